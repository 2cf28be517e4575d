"""The edge rule on a learning-rate sweep (``trainer/edge_rule.py``, ``sweep --edge-rule``): which
variant gets which next rate, at which seeds and under which names, read from run directories
whose configs, summaries and event files are the lab's own (their losses made up, as in
test_lr_sweep); then a real sweep with ``--edge-rule`` (slow)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import tiny_spec
from tests.test_lr_sweep import BIGRAM, UNIGRAM, _write_run
from trainer.atomic import write_json
from trainer.config import ConfigError, load_config
from trainer.edge_rule import check, sig3, steps
from trainer.findings.thresholds import MAX_EXTENSIONS, RATE_STEP
from trainer.results.baselines import data_key
from trainer.sweep import expand_variants, load_spec

ROOT = Path(__file__).resolve().parents[1]
GRID = (1e-3, 3e-3, 1e-2)
INF = math.inf


def _spec(tmp_path: Path):
    """A learning-rate sweep over GRID, seeds 0-1 (batch norm: seed 0 only), and its variants."""
    path = tiny_spec(tmp_path / "lr.yaml", "  model.norm: [layer, rms, batch]\n"
                     f"  train.lr: [{', '.join(map(str, GRID))}]\n",
                     "seeds: [0, 1]\nexclude:\n  - {model.norm: batch, seed: 1}\n")
    spec = load_spec(path)[0]
    return spec, expand_variants(spec)


def _write(root: Path, variants, losses: dict) -> None:
    """Write the runs of sweep ``variants``: ``losses[norm][lr]`` = final loss per seed (None:
    unfinished); a rate or norm ``losses`` lacks is not run."""
    for v in variants:
        values = dict(o.split("=", 1) for o in v.overrides)
        lr, seed = float(values["train.lr"]), int(values["train.seed"])
        per_seed = losses.get(values["model.norm"], {}).get(lr)
        if per_seed is not None and not (root / v.name).exists():
            _write_run(root / v.name, v.overrides, per_seed[seed], 5.5)
    cfg = load_config(ROOT / "configs/base.yaml", variants[0].overrides)
    write_json(root / "baselines.json", {"unigram": UNIGRAM, "bigram": BIGRAM,
                                         "bigram_k": 0.03, "data": data_key(cfg)})


def test_a_variant_best_at_an_edge_gets_the_next_rate_at_its_seeds_named_as_the_spec(tmp_path):
    (spec, variants), root = _spec(tmp_path), tmp_path / "lr"
    _write(root, variants, {
        "layer": {1e-3: [2.4, 2.5], 3e-3: [2.1, 2.2], 1e-2: [2.3, 2.3]},  # best inside
        "rms": {1e-3: [2.6, 2.6], 3e-3: [2.3, 2.2], 1e-2: [2.0, 2.1]},  # best at the highest
        "batch": {1e-3: [2.2, None], 3e-3: [2.4, None], 1e-2: [INF, None]}})  # at the lowest
    found = {s.variant: s for s in steps(spec, variants, root)}
    assert set(found) == {"norm=rms", "norm=batch"}
    rms, bn = found["norm=rms"], found["norm=batch"]
    assert (rms.edge, rms.best, rms.rate) == ("highest", 1e-2, sig3(1e-2 * RATE_STEP))
    assert (bn.edge, bn.best, bn.rate) == ("lowest", 1e-3, sig3(1e-3 / RATE_STEP))
    assert rms.rate == 0.0316 and bn.rate == 0.000316
    # the spec's seeds and exclusions, and the names the spec gives its runs
    assert [v.name for v in rms.runs] == ["norm=rms,lr=0.0316", "norm=rms,lr=0.0316,seed=1"]
    assert [v.name for v in bn.runs] == ["norm=batch,lr=0.000316"]
    assert "train.lr=0.0316" in rms.runs[1].overrides and "train.seed=1" in rms.runs[1].overrides
    # the names and overrides the spec itself gives a run at that rate
    at = expand_variants(replace(spec, grid={**spec.grid, "train.lr": [0.0316]}))
    assert [(v.name, v.overrides) for v in at if v.name.startswith("norm=rms")] == [
        (v.name, v.overrides) for v in rms.runs]
    assert rms.describe() == ("edge rule: norm=rms: best rate 0.01 is the highest rate tried, "
                              "so 0.0316 runs next")


def test_steps_continue_while_the_best_stays_at_the_edge_and_stop_when_spent(tmp_path):
    (spec, variants), root = _spec(tmp_path), tmp_path / "lr"
    losses = {"rms": {1e-3: [2.6, 2.6], 3e-3: [2.3, 2.2], 1e-2: [2.0, 2.1]}}
    _write(root, variants, losses)
    rates = []
    for _ in range(MAX_EXTENSIONS):
        (step,) = steps(spec, variants, root)
        assert step.rate > max([*GRID, *rates])  # one step beyond the last one, never again
        rates.append(step.rate)
        best = min(min(v) for v in losses["rms"].values())
        losses["rms"][step.rate] = [best - 0.1, best - 0.1]  # still the best: at the edge
        _write(root, step.runs, losses)
    assert rates == [0.0316, sig3(0.0316 * RATE_STEP), sig3(sig3(0.0316 * RATE_STEP) * RATE_STEP)]
    assert steps(spec, variants, root) == []  # MAX_EXTENSIONS spent: an open edge, reported, not run


@pytest.mark.parametrize("edge_loss", [INF, UNIGRAM])  # diverged, or at the plateau
def test_an_edge_rate_that_fails_closes_the_edge(tmp_path, edge_loss):
    (spec, variants), root = _spec(tmp_path), tmp_path / "lr"
    losses = {"rms": {1e-3: [2.6, 2.6], 3e-3: [2.3, 2.2], 1e-2: [2.0, 2.1]}}
    _write(root, variants, losses)
    (step,) = steps(spec, variants, root)
    losses["rms"][step.rate] = [edge_loss, edge_loss]
    _write(root, step.runs, losses)
    assert steps(spec, variants, root) == []


def test_an_unfinished_step_is_asked_for_again_and_a_variant_never_trained_is_not(tmp_path):
    (spec, variants), root = _spec(tmp_path), tmp_path / "lr"
    losses = {"rms": {1e-3: [2.6, 2.6], 3e-3: [2.3, 2.2], 1e-2: [2.0, 2.1]},
              "layer": {lr: [UNIGRAM, UNIGRAM] for lr in GRID}}  # the plateau everywhere
    _write(root, variants, losses)
    (step,) = steps(spec, variants, root)
    losses["rms"][step.rate] = [None, None]  # started, not finished: resumed by the sweep
    _write(root, step.runs, losses)
    assert [s.rate for s in steps(spec, variants, root)] == [step.rate]


def test_only_the_specs_own_names_are_read(tmp_path):
    """A run another spec wrote into the same directory (a name this spec never gives) is not
    this spec's, even when its rate would move a best."""
    (spec, variants), root = _spec(tmp_path), tmp_path / "lr"
    _write(root, variants, {"rms": {1e-3: [2.6, 2.6], 3e-3: [2.3, 2.2], 1e-2: [2.0, 2.1]}})
    other = tiny_spec(tmp_path / "other.yaml", "  model.norm: [rms]\n  model.dyt_alpha: [1.0]\n"
                      "  train.lr: [0.0316]\n")
    _write(root, expand_variants(load_spec(other)[0]), {"rms": {0.0316: [1.5]}})
    assert [s.rate for s in steps(spec, variants, root)] == [0.0316]


def test_a_sweep_the_rule_cannot_extend_is_one_config_error(tmp_path):
    spec = _spec(tmp_path)[0]
    no_lr = replace(spec, grid={"model.norm": ["layer"]})
    for one_rate in (None, {"from": "x", "match": []}, {"from": "x", "match": [], "factors": [1.0]}):
        with pytest.raises(ConfigError, match="needs a learning-rate sweep"):
            check(replace(no_lr, best_lr=one_rate), "x.yaml")
    check(replace(no_lr, best_lr={"from": "x", "match": [], "factors": [0.316, 1.0, 3.16]}), "x")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    path = tiny_spec(tmp_path / "norms.yaml", "  model.norm: [layer]\n")
    proc = subprocess.run([sys.executable, "-m", "trainer", "sweep", str(path), "--edge-rule",
                           "--out", str(tmp_path / "out")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "needs a learning-rate sweep" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_sweep_with_the_edge_rule_trains_the_extension_runs(tmp_path):
    """A tiny real sweep whose grid is two rates far below any useful one: the best is the
    highest rate tried, so ``--edge-rule`` trains the next rate up (and further while it stays
    best), into the sweep's directory, under the spec's names."""
    path = tiny_spec(tmp_path / "lr.yaml", "  model.norm: [layer]\n  train.lr: [1.0e-6, 3.16e-6]\n")
    out = tmp_path / "lr"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-m", "trainer", "sweep", str(path), "--edge-rule",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "edge rule: norm=layer: best rate 3.16e-06 is the highest rate tried" in proc.stdout
    made = {p.name for p in out.iterdir() if p.is_dir() and p.name.startswith("norm=")}
    assert {"norm=layer,lr=1e-06", "norm=layer,lr=3.16e-06", "norm=layer,lr=9.99e-06"} <= made
    assert len(made) <= 2 + MAX_EXTENSIONS
    spec = load_spec(path)[0]
    assert steps(spec, expand_variants(spec), out) == []  # nothing more asked: the rule ended


def test_a_best_lr_factor_sweep_is_extended_per_variant_under_its_own_names(tmp_path):
    """The replication settings' ``lr`` form: each variant's rates are its best rate in another
    sweep × ``factors``, its runs named ``...,lr=<rate:g>``; the rule extends each variant from
    its own rates."""
    from trainer.sweep import resolve_variants

    (src_spec, src_variants), src = _spec(tmp_path), tmp_path / "src"
    _write(src, src_variants, {"layer": {1e-3: [2.4, 2.5], 3e-3: [2.1, 2.2], 1e-2: [2.3, 2.3]},
                               "rms": {1e-3: [2.2, 2.2], 3e-3: [2.3, 2.3], 1e-2: [2.4, 2.4]}})
    path = tiny_spec(tmp_path / "wide.yaml", "  model.norm: [layer, rms]\n",
                     f"best_lr:\n  from: {src}\n  match: [model.norm]\n"
                     "  factors: [0.316, 1.0, 3.16]\n")
    spec, base = load_spec(path)
    variants = resolve_variants(spec, path, base)[0]
    assert "norm=rms,lr=0.000316" in [v.name for v in variants]  # best 1e-3 × 0.316
    root = tmp_path / "lr"
    _write(root, variants, {"layer": {0.000948: [2.3], 0.003: [2.2], 0.00948: [2.25]},
                            "rms": {0.000316: [2.1], 0.001: [2.2], 0.00316: [2.3]}})
    (step,) = steps(spec, variants, root)  # layer's best is inside its own three rates
    assert (step.variant, step.edge, step.rate) == ("norm=rms", "lowest", 0.0001)
    assert [v.name for v in step.runs] == ["norm=rms,lr=0.0001"]
    _write(root, step.runs, {"rms": {0.0001: [2.0]}})
    (again,) = steps(spec, variants, root)  # found by its name, still best: one step further
    assert again.rate == sig3(0.0001 / RATE_STEP) and again.runs[0].name == "norm=rms,lr=3.16e-05"
