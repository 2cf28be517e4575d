"""Sweeps: grid expansion, run names, exclusions, seeds, skipping finished runs, launchers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import tiny_spec
from trainer.config import ConfigError, load_config
from trainer.sweep import SweepSpec, expand_variants, load_spec, resolve_variants

ROOT = Path(__file__).resolve().parents[1]


def test_grid_names_exclusions_and_seeds():
    spec = SweepSpec(grid={"model.norm": ["layer", "batch"], "model.residual": [True, False]},
                     seeds=[0, 1], exclude=[{"model.norm": "batch", "model.residual": False},
                                            {"model.residual": False, "seed": 1}],
                     overrides=["train.steps=5", "train.warmup_steps=1"])
    variants = expand_variants(spec)
    names = [v.name for v in variants]
    # The base seed (0) is not named: adding seeds later never renames finished runs.
    assert names == ["norm=layer,residual=true", "norm=layer,residual=true,seed=1",
                     "norm=layer,residual=false",
                     "norm=batch,residual=true", "norm=batch,residual=true,seed=1"]
    cfg = load_config(None, variants[1].overrides)
    assert (cfg.model.norm, cfg.model.residual, cfg.train.seed, cfg.train.steps) == \
        ("layer", "true", 1, 5)
    assert load_config(None, variants[0].overrides).train.seed == 0


def test_seed_names_are_relative_to_the_base_seed():
    spec = SweepSpec(grid={"model.norm": ["layer"]}, seeds=[0, 7])
    assert [v.name for v in expand_variants(spec, base_seed=7)] == ["norm=layer,seed=0", "norm=layer"]
    # Extending the seeds keeps the earlier names: the rerun skips what is already done.
    one = {v.name for v in expand_variants(SweepSpec(grid={"model.norm": ["layer"]}, seeds=[0]))}
    assert one < {v.name for v in expand_variants(spec)}


def test_seed_in_grid_is_refused(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("grid:\n  train.seed: [1, 2]\n")
    with pytest.raises(ConfigError, match="seeds:"):
        load_spec(spec)


def test_same_leaf_in_two_sections_uses_full_path():
    spec = SweepSpec(grid={"model.dropout": [0.0], "data.name": ["x"]})
    assert expand_variants(spec)[0].name == "dropout=0.0,name=x"
    spec = SweepSpec(grid={"data.config": ["a"], "model.config": ["b"]})
    assert expand_variants(spec)[0].name == "data.config=a,model.config=b"


def test_shipped_sweeps_expand_to_valid_configs():
    paths = sorted((ROOT / "configs/sweeps").rglob("*.yaml"))
    assert len(paths) >= 15  # quick, calibration and the 13 pre-registered reference parts
    for path in paths:
        spec, base = load_spec(path)
        for v in expand_variants(spec):
            load_config(base, v.overrides)


def test_the_reference_specs_are_the_pre_registered_design():
    """The rate grid and seed counts of configs/sweeps/reference/ are the ones fixed in
    trainer/findings/thresholds.py, and lr_a/b/c cover the 15 variants of the table."""
    from trainer.findings.thresholds import HEADLINE_SEEDS, MIN_SEEDS, RATE_GRID, SHORT_GRID

    specs = {p.stem: load_spec(p)[0] for p in (ROOT / "configs/sweeps/reference").glob("*.yaml")}
    names = {part: {v.name.rsplit(",lr=", 1)[0] for v in expand_variants(specs[part])}
             for part in ("lr_a", "lr_b", "lr_c")}
    assert sum(len(n) for n in names.values()) == len(set().union(*names.values())) == 15
    for part in ("lr_a", "lr_b", "lr_c"):
        assert tuple(specs[part].grid["train.lr"]) == RATE_GRID
        assert specs[part].seeds == [0]
    best = {v.name.split(",seed=")[0]: v for part in ("best_a", "best_b")
            for v in expand_variants(specs[part])}
    assert set(best) == set().union(*names.values())  # the same 15 variants, at their best rate
    assert len(specs["best_a"].seeds) == len(specs["depth"].seeds) == HEADLINE_SEEDS
    grids = [p for p in specs if p.startswith("lr_") or p.endswith("_lr")]
    assert len(grids) == 6 and all(specs[p].seeds == [0] for p in grids)
    assert all(len(specs[p].seeds) >= MIN_SEEDS for p in specs if p not in grids)
    for part in ("depth_lr", "dyt_lr", "affine_lr"):
        assert tuple(specs[part].best_lr["factors"]) == SHORT_GRID


REFERENCE_PARTS = {"lr": ["lr_a.yaml", "lr_b.yaml", "lr_c.yaml"],
                   "best": ["best_a.yaml", "best_b.yaml"],
                   **{p: [f"{p}.yaml"] for p in ("depth_lr", "depth", "dyt_lr", "dyt", "affine_lr",
                                                  "affine", "pad_to_max", "small_batch")}}


@pytest.mark.parametrize("sub", sorted(REFERENCE_PARTS))
def test_reference_specs_still_resolve_to_the_committed_run_configs(sub):
    """Regenerating results/reference reruns exactly the committed configs, best rates included
    (``best_lr:`` resolved against the committed grids): a changed default or spec that would
    silently alter a committed run fails here."""
    committed = sorted(p.parent for p in (ROOT / "results/reference" / sub).glob("*/config.yaml"))
    if not committed:
        pytest.skip(f"results/reference/{sub} has no runs yet (scripts/reference.sh makes them)")
    variants = {}
    for spec_name in REFERENCE_PARTS[sub]:
        path = ROOT / "configs/sweeps/reference" / spec_name
        spec, base = load_spec(path)
        found, configs, _ = resolve_variants(spec, path, base)
        variants.update({v.name: cfg for v, cfg in zip(found, configs)})
    assert {p.name for p in committed} <= set(variants)
    for run in committed:
        expected = OmegaConf.to_container(load_config(run / "config.yaml"))
        assert OmegaConf.to_container(variants[run.name]) == expected, run.name


def _sweep(tmp_path, *args):
    tmp_path.mkdir(parents=True, exist_ok=True)
    spec = tiny_spec(tmp_path / "spec.yaml", "  model.norm: [layer, dyt]\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "trainer", "sweep", "--config", str(spec),
                           "--out", str(out), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


@pytest.mark.slow
def test_submitit_local_launcher_then_rerun_skips_finished(tmp_path):
    out, _ = _sweep(tmp_path, "--launcher", "submitit-local")
    runs = ["norm=dyt", "norm=layer"]
    assert sorted(p.parent.name for p in out.glob("*/summary.json")) == runs
    assert list((out / ".submitit").iterdir())  # the jobs went through submitit
    stamps = {r: (out / r / "summary.json").stat().st_mtime_ns for r in runs}
    _, proc = _sweep(tmp_path, "--parallel", "2")
    assert {r: (out / r / "summary.json").stat().st_mtime_ns for r in runs} == stamps
    assert "norm=dyt" in proc.stdout  # the table is printed again



@pytest.mark.slow
def test_worker_runs_each_command_in_its_own_child(tmp_path):
    """A failing command fails alone: the worker answers its exit code and runs the next one
    in a fresh child (its own pid), which trains."""
    import json

    from tests.conftest import TINY
    from trainer.launch import Worker
    from trainer.train.preempt import stop_requests

    worker = Worker()
    try:
        with stop_requests() as stop:
            bad = worker.run(["train", "--workdir", str(tmp_path / "bad"), "model.norm=bogus"],
                             stop)
            good = worker.run(["train", "--workdir", str(tmp_path / "good"), "--quiet", *TINY,
                               "train.steps=3", "train.eval_every=3"], stop)
        assert (bad, good) == (2, 0) and worker.alive()
        assert not (tmp_path / "bad").exists()  # a config error writes nothing
        summary = json.loads((tmp_path / "good" / "summary.json").read_text())
        assert summary["status"] == "completed"
    finally:
        worker.close()
    assert worker.proc.returncode == 0


@pytest.mark.slow
def test_a_killed_variant_fails_alone_and_the_worker_goes_on(tmp_path):
    """SIGKILL to a variant's forked child (the OOM killer): that command fails with the
    signal, the worker lives on and its next child trains."""
    import signal
    import threading
    import time

    import psutil

    from tests.conftest import TINY
    from trainer.launch import Worker
    from trainer.train.preempt import stop_requests

    worker = Worker()
    codes = []
    try:
        with stop_requests() as stop:
            long_run = ["train", "--workdir", str(tmp_path / "killed"), "--quiet", *TINY,
                        "train.steps=100000", "train.eval_every=100000"]
            thread = threading.Thread(target=lambda: codes.append(worker.run(long_run, stop)))
            thread.start()
            deadline = time.monotonic() + 120
            while not psutil.Process(worker.proc.pid).children() and time.monotonic() < deadline:
                time.sleep(0.2)
            while not (tmp_path / "killed" / "meta.json").exists() and time.monotonic() < deadline:
                time.sleep(0.2)  # training has started
            for child in psutil.Process(worker.proc.pid).children():
                child.send_signal(signal.SIGKILL)
            thread.join(timeout=60)
            codes.append(worker.run(["train", "--workdir", str(tmp_path / "next"), "--quiet",
                                     *TINY, "train.steps=3", "train.eval_every=3"], stop))
        assert codes == [-signal.SIGKILL, 0] and worker.alive()
    finally:
        worker.close()


def _headline_values(cfg) -> tuple:
    """A run config's values of the keys HEADLINE_VARIANTS names (DyT's recipe keys: DyT only)."""
    m, t = cfg.model, cfg.train
    out = dict(norm=m.norm, residual=str(m.residual), placement=str(m.placement),
               warmup_steps=t.warmup_steps)
    if m.norm == "dyt":
        out.update(embed_scale=m.embed_scale, dyt_alpha=m.dyt_alpha)
    return tuple(sorted((k, str(v).lower()) for k, v in out.items()))


def test_the_replication_specs_are_the_pre_registered_design():
    """configs/sweeps/replication/ runs what pre-registration 2 fixed in thresholds.py: in each
    setting the 10 headline variants (HEADLINE_VARIANTS) on SHORT_GRID, seeds REPLICATION_SEEDS
    at the best rate (seed 0 reused from the grid; python: MIN_SEEDS for RMSNorm and DyT), DyT
    by its recipe; the DyT recipe sweep's alphas and rates."""
    from trainer.findings.thresholds import (DYT_RECIPE_ALPHAS, EMBED_UNIT_SCALE,
                                             HEADLINE_VARIANTS, MIN_SEEDS, REPLICATION_SEEDS,
                                             SETTINGS, SHORT_GRID)

    specs = ROOT / "configs/sweeps/replication"
    want = {tuple(sorted((k, str(v).lower()) for k, v in variant.items())): name
            for name, variant in HEADLINE_VARIANTS.items()}
    for setting, seeds in REPLICATION_SEEDS.items():
        grid, best = {}, {}
        for part in ("lr", "lr_dyt", "best", "best_dyt"):
            spec, base = load_spec(specs / setting / f"{part}.yaml")
            assert base == (ROOT / SETTINGS[setting][0]).resolve()
            if part.startswith("lr"):
                assert spec.best_lr["factors"] == list(SHORT_GRID) and spec.seeds == [0]
            else:
                assert spec.best_lr["reuse"] is True
            for v in expand_variants(spec):
                cfg = load_config(base, v.overrides)
                (grid if part.startswith("lr") else best).setdefault(
                    _headline_values(cfg), set()).add(cfg.train.seed)
        assert set(grid) == set(best) == set(want)
        few = {"RMSNorm", "DyT (recipe)"} if setting == "python" else set(want.values())
        assert {want[k]: len(s) for k, s in best.items()} == {
            name: MIN_SEEDS if name in few else seeds for name in want.values()}
    spec, _ = load_spec(specs / "dyt_recipe_lr.yaml")
    assert tuple(spec.grid["model.dyt_alpha"]) == DYT_RECIPE_ALPHAS
    assert f"model.embed_scale={EMBED_UNIT_SCALE}" in spec.overrides
    from trainer.results.lr_sweep import load_lr_sweep

    pre_ln = [v for v in load_lr_sweep(ROOT / "results/reference/lr")[0]
              if v.name == "norm=layer,residual=true,placement=pre,warmup_steps=50"]
    assert len(pre_ln) == 1  # DyT's rates: Pre-LN's best rate in the reference x SHORT_GRID
    assert spec.grid["train.lr"] == [float(f"{pre_ln[0].best_lr * f:.12g}") for f in SHORT_GRID]
