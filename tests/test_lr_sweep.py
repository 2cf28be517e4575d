"""Learning-rate sweeps: best rate (and its tie rule), LR sensitivity against a hand computation,
the edge flag, "trains at no rate", the tables summarize writes, and the spec's ``best_lr:``.

The run directories are real (config.yaml from configs/base.yaml, summary.json and TensorBoard
event files written by the lab's own writers); only their numbers are made up. The last test
trains a tiny learning-rate sweep and then a ``best_lr:`` sweep on top of it.
"""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import tiny_spec
from trainer.atomic import write_json
from trainer.config import ConfigError, load_config, to_yaml
from trainer.results.baselines import data_key
from trainer.results.lr_sweep import load_lr_sweep
from trainer.results.summarize import summarize
from trainer.sweep import load_spec, resolve_variants
from trainer.telemetry.tensorboard import RunWriters

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "configs/base.yaml"
BIGRAM, UNIGRAM = 2.5, 3.1
INF = math.inf
# (norm, placement) -> {lr: (final loss per seed, loss at init)}; INF: diverged; None: unfinished
GROUP = {
    # best 3e-3; sensitivity = ((2.4 − 2.1) + 0 + (min(∞, 5.0) − 2.1)) / 3 = 3.2 / 3
    ("layer", "pre"): {1e-3: ([2.4], 5.5), 3e-3: ([2.1], 5.5), 1e-2: ([INF], 5.0)},
    # a tie at 2.3 goes to the lower rate, 1e-3: the lowest rate tried (edge)
    ("layer", "post"): {1e-3: ([2.3], 5.5), 3e-3: ([2.3], 5.5), 1e-2: ([2.6], 5.5)},
    # at the plateau or diverged everywhere: trains at no rate
    ("none", "pre"): {1e-3: ([3.1], 5.5), 3e-3: ([3.12], 5.5), 1e-2: ([INF], 5.5)},
    # two seeds at 1e-2: their mean (2.0 + 2.2) / 2 = 2.1 is the best, at the highest rate
    ("rms", "pre"): {1e-3: ([2.6], 5.5), 3e-3: ([2.2], 5.5), 1e-2: ([2.0, 2.2], 5.5)},
}


def _write_run(path: Path, overrides: list[str], loss: float | None, init: float) -> None:
    path.mkdir(parents=True)
    cfg = load_config(BASE, overrides)
    (path / "config.yaml").write_text(to_yaml(cfg))
    if loss is not None:  # None: an unfinished run has no summary yet
        write_json(path / "summary.json", {
            "status": "diverged" if math.isinf(loss) else "completed",
            "final_eval_loss": None if math.isinf(loss) else loss, "loss_spikes": 0,
            "diverged_step": 5 if math.isinf(loss) else None})
    writers = RunWriters(path)
    writers.write("eval", {"loss": init}, 0)
    if loss is not None and math.isfinite(loss):
        writers.write("eval", {"loss": loss}, int(cfg.train.steps))
    writers.close()


def build(root: Path, group: dict = GROUP, baselines: bool = True) -> Path:
    """An lr-sweep results group from ``group`` (see GROUP), with its baselines.json."""
    cfg = None
    for (norm, placement), rates in group.items():
        for lr, (losses, init) in rates.items():
            for seed, loss in enumerate(losses):
                name = f"norm={norm},placement={placement},lr={lr:g}" + (f",seed={seed}" if seed
                                                                        else "")
                overrides = [f"model.norm={norm}", f"model.placement={placement}",
                             f"train.lr={lr}", f"train.seed={seed}"]
                _write_run(root / name, overrides, loss, init)
                cfg = cfg or load_config(BASE, overrides)
    if baselines:  # keyed to the runs' data, so summarize reads it instead of computing it
        write_json(root / "baselines.json", {"unigram": UNIGRAM, "bigram": BIGRAM,
                                             "bigram_k": 0.03, "data": data_key(cfg)})
    return root


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    return build(tmp_path_factory.mktemp("lr") / "lr")


def _by_name(root):
    variants, _ = load_lr_sweep(root)
    return {v.name: v for v in variants}


def test_best_rate_sensitivity_edge_and_trains(group):
    v = _by_name(group)
    assert list(v) == ["norm=layer,placement=pre", "norm=layer,placement=post",
                       "norm=rms,placement=pre", "norm=none,placement=pre"]
    pre = v["norm=layer,placement=pre"]
    assert (pre.best_lr, pre.best_loss, pre.edge) == (3e-3, pytest.approx(2.1), None)
    assert pre.sensitivity == pytest.approx(3.2 / 3)  # the diverged rate costs init − best
    assert pre.trains is True and pre.trains_at == [1e-3, 3e-3]
    assert [p.status for p in pre.points] == ["completed", "completed", "diverged"]
    post = v["norm=layer,placement=post"]
    assert (post.best_lr, post.edge) == (1e-3, "lowest")  # the tie goes to the lower rate
    assert post.sensitivity == pytest.approx((0 + 0 + 0.3) / 3)
    rms = v["norm=rms,placement=pre"]
    assert (rms.best_lr, rms.best_loss, rms.edge) == (1e-2, pytest.approx(2.1), "highest")
    assert rms.points[-1].seed_losses == (2.0, 2.2)
    none = v["norm=none,placement=pre"]
    assert none.trains is False and none.trains_at == [] and none.best_lr == 1e-3


def test_without_baselines_training_is_unknown(tmp_path):
    root = build(tmp_path / "g", {("layer", "pre"): GROUP[("layer", "pre")]}, baselines=False)
    (v,) = load_lr_sweep(root)[0]
    assert v.trains is None and v.trains_at == [] and v.best_lr == 3e-3


def test_every_rate_diverged_has_no_best_rate(tmp_path):
    root = build(tmp_path / "g", {("layer", "post"): {1e-3: ([INF], 5.5), 1e-2: ([INF], 5.5)}})
    (v,) = load_lr_sweep(root)[0]
    assert (v.best_lr, v.best_loss, v.sensitivity, v.edge, v.trains) == (
        None, None, None, None, False)


def test_summarize_writes_the_lr_tables_and_figure(group):
    summarize(group)
    with open(group / "lr_sweep.csv", newline="") as fh:
        rows = {r["variant"]: r for r in csv.DictReader(fh)}
    pre = rows["norm=layer,placement=pre"]
    assert float(pre["best_lr"]) == 3e-3 and float(pre["val_loss@lr=0.01"]) == INF
    assert float(pre["lr_sensitivity"]) == pytest.approx(3.2 / 3)
    assert pre["rates_that_train"] == "0.001 0.003" and pre["trains"] == "yes"
    assert rows["norm=none,placement=pre"]["trains"] == "no rate tried"
    assert rows["norm=layer,placement=post"]["best_at_edge"] == "lowest rate"
    md = (group / "lr_sweep.md").read_text()
    assert ("| norm=layer,placement=pre | 0.003 | 2.1 | 1.067 | yes | 0.001 0.003 |  "
            "| 2.4 | 2.1 | ∞ |") in md
    assert (group / "plots" / "lr_sensitivity.png").stat().st_size > 10_000


def test_summarize_writes_no_lr_tables_without_an_lr_axis(tmp_path):
    root = build(tmp_path / "g", {("layer", "pre"): {3e-3: ([2.1], 5.5)},
                                  ("layer", "post"): {3e-3: ([2.3], 5.5)}})
    summarize(root, plots=False)
    assert (root / "summary.csv").exists() and not (root / "lr_sweep.csv").exists()


def test_variants_each_at_their_own_single_rate_are_not_an_lr_sweep(tmp_path):
    # lr differs across the group, but no variant has a second rate: a best-rate sub-sweep
    one_each = {("layer", "pre"): {3e-3: ([2.1, 2.2], 5.5)},
                ("layer", "post"): {1e-3: ([2.3], 5.5)}}
    root = build(tmp_path / "best", one_each)
    summarize(root, plots=False)
    assert (root / "summary.csv").exists() and not (root / "lr_sweep.csv").exists()
    second = {**one_each, ("layer", "post"): {1e-3: ([2.3], 5.5), 1e-2: ([2.6], 5.5)}}
    root = build(tmp_path / "lr", second)
    summarize(root, plots=False)
    assert (root / "lr_sweep.csv").exists()


# ---- the sweep spec's best_lr: ------------------------------------------------------------------

def _spec(tmp_path: Path, best: str, grid: str = "  model.placement: [pre, post]\n",
          overrides: str = "[]") -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(f"base: {BASE}\noverrides: {overrides}\ngrid:\n{grid}seeds: [0, 1]\n"
                    f"best_lr:\n{best}")
    return path


def _resolve(spec_path: Path, extra=()):
    """The variants ``sweep`` would run (names, overrides), without running them."""
    spec, base = load_spec(spec_path)
    return resolve_variants(spec, spec_path, base, list(extra))[0]


def test_best_lr_gives_every_variant_its_own_rate(group, tmp_path):
    # relative to the spec file, like base:
    (tmp_path / "specs").mkdir()
    rel = os.path.relpath(group, tmp_path / "specs")
    spec = _spec(tmp_path / "specs", f"  from: {rel}\n  match: [model.norm, model.placement]\n",
                 overrides="[model.norm=layer]")
    variants = _resolve(spec)
    assert [v.name for v in variants] == ["placement=pre", "placement=pre,seed=1",
                                          "placement=post", "placement=post,seed=1"]
    spec, base = load_spec(spec)
    rates = [load_config(base, v.overrides).train.lr for v in variants]
    assert rates == [3e-3, 3e-3, 1e-3, 1e-3]
    spec = _spec(tmp_path / "specs", f"  from: {group}\n  match: [model.norm, model.placement]\n"
                 "  factors: [0.5, 1.0, 3.0]\n", grid="  model.placement: [pre]\n",
                 overrides="[model.norm=rms]")
    names = [v.name for v in _resolve(spec)][:3]
    assert names == ["placement=pre,lr=0.005", "placement=pre,lr=0.01", "placement=pre,lr=0.03"]
    spec = _spec(tmp_path / "specs", f"  from: {group}\n  match: [model.norm, model.placement]\n"
                 "  factors: [0.5]\n", grid="  model.placement: [pre]\n",
                 overrides="[model.norm=rms]")
    assert [v.name for v in _resolve(spec)] == ["placement=pre,lr=0.005",
                                                "placement=pre,lr=0.005,seed=1"]


def test_best_lr_reuse_copies_the_grids_run_for_its_seed_only(group, tmp_path):
    """``reuse: true``: seed 0 is the grid's run at the best rate (the source's seed), seed 1
    has none and trains."""
    spec = _spec(tmp_path, f"  from: {group}\n  match: [model.norm, model.placement]\n"
                 "  reuse: true\n", overrides="[model.norm=layer]")
    got = {v.name: v.copy_from for v in _resolve(spec)}
    assert got["placement=pre,seed=1"] is None and got["placement=post,seed=1"] is None
    for placement, rate in (("pre", 3e-3), ("post", 1e-3)):
        src = OmegaConf.load(got[f"placement={placement}"] / "config.yaml")
        assert (src.model.placement, src.train.lr, src.train.seed) == (placement, rate, 0)


@pytest.mark.parametrize("best, grid, overrides, extra, message", [
    ("  from: nowhere\n  match: [model.norm]\n", None, "[]", (), "does not exist"),
    ("  from: {empty}\n  match: [model.norm]\n", None, "[]", (), "no run directories"),
    ("  from: {group}\n  match: [model.norm, model.placement]\n", None, "[model.norm=batch]", (),
     "no run under .* has model.norm=batch, model.placement=pre"),
    ("  from: {group}\n  match: [model.norm]\n", "  train.lr: [0.1]\n", "[]", (),
     "sets train.lr"),
    ("  from: {group}\n  match: [model.norm]\n", None, "[train.lr=0.1]", (), "sets train.lr"),
    ("  from: {group}\n  match: [model.norm]\n", None, "[]", ("train.lr=0.1",),
     "command line"),
    ("  from: {group}\n  match: [model.norm]\n", None, "[model.norm=layer]", (),
     "form 2 variants differing in model.placement"),
    ("  from: {group}\n  match: [model.nope]\n", None, "[]", (), "unknown config key"),
    ("  from: {group}\n  match: model.norm\n", None, "[]", (), "list of config keys"),
    ("  from: {group}\n  match: [model.norm]\n  factors: [0]\n", None, "[]", (),
     "distinct positive"),
    ("  match: [model.norm]\n", None, "[]", (), "with 'from:' and 'match:'"),
    ("  from: {group}\n  match: [model.norm]\n  factors: [0.5, 1.0]\n  reuse: true\n", None,
     "[]", (), "true only with factors"),
    ("  from: {group}\n  match: [model.norm]\n  reuse: maybe\n", None, "[]", (),
     "reuse must be true or false"),
])
def test_best_lr_errors_are_one_clear_line(group, tmp_path, best, grid, overrides, extra,
                                           message):
    (tmp_path / "empty").mkdir()
    spec = _spec(tmp_path, best.format(group=group, empty=tmp_path / "empty"),
                 grid or "  model.placement: [pre, post]\n", overrides)
    with pytest.raises(ConfigError, match=message) as err:
        _resolve(spec, extra)
    assert "\n" not in str(err.value)


def test_best_lr_refuses_unfinished_and_all_diverged_sources(tmp_path):
    src = build(tmp_path / "src", {("layer", "pre"): {1e-3: ([2.3], 5.5), 3e-3: ([None], 5.5)},
                                   ("layer", "post"): {1e-3: ([INF], 5.5), 1e-2: ([INF], 5.5)}})
    for placement, message in (("pre", "lr=0.003 is unfinished"), ("post", "diverged: no best")):
        spec = _spec(tmp_path, f"  from: {src}\n  match: [model.norm, model.placement]\n",
                     grid=f"  model.placement: [{placement}]\n")
        with pytest.raises(ConfigError, match=message):
            _resolve(spec)


@pytest.mark.slow
def test_tiny_lr_sweep_then_a_best_lr_sweep(tmp_path):
    """Real runs: a 2-rate sweep (its lr tables), then seeds 0 and 1 at its best rate, seed 0
    reused: the grid's run copied (byte-identical summary and provenance), seed 1 trained."""
    lr_spec = tiny_spec(tmp_path / "lr.yaml", "  train.lr: [0.0001, 0.01]\n")
    lr_out = tmp_path / "lr"
    seed_spec = tmp_path / "seeds.yaml"
    seed_spec.write_text(tiny_spec(tmp_path / "tmp.yaml", "  model.norm: [layer]\n").read_text()
                         + "seeds: [0, 1]\nbest_lr:\n  from: lr\n  match: [model.norm]\n"
                         "  reuse: true\n")
    seed_out = tmp_path / "seeds"
    for spec, out in ((lr_spec, lr_out), (seed_spec, seed_out)):
        proc = subprocess.run([sys.executable, "-m", "trainer", "sweep", "--config", str(spec),
                               "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    (v,) = load_lr_sweep(lr_out)[0]
    assert [p.lr for p in v.points] == [1e-4, 1e-2] and v.best_lr in (1e-4, 1e-2)
    assert all(p.init_loss is not None and p.status == "completed" for p in v.points)
    with open(lr_out / "lr_sweep.csv", newline="") as fh:
        assert float(next(csv.DictReader(fh))["best_lr"]) == v.best_lr
    assert (lr_out / "plots" / "lr_sensitivity.png").exists()
    saved = OmegaConf.load(seed_out / "norm=layer,seed=1" / "config.yaml")
    assert saved.train.lr == v.best_lr and saved.train.seed == 1
    assert not (seed_out / "lr_sweep.csv").exists()  # one rate: no lr tables
    src = next(r.path for r in v.runs if float(r.cfg.train.lr) == v.best_lr)
    for name in ("summary.json", "meta.json", "config.yaml"):
        assert (seed_out / "norm=layer" / name).read_bytes() == (src / name).read_bytes()
