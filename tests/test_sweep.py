"""Sweeps: grid expansion, run names, exclusions, seeds, skipping finished runs, launchers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY
from trainer.config import load_config
from trainer.sweep import SweepSpec, expand_variants, load_spec

ROOT = Path(__file__).resolve().parents[1]


def test_grid_names_exclusions_and_seeds():
    spec = SweepSpec(grid={"model.norm": ["layer", "batch"], "model.residual": [True, False]},
                     seeds=[0, 1], exclude=[{"model.norm": "batch", "model.residual": False}],
                     overrides=["train.steps=5", "train.warmup_steps=1"])
    variants = expand_variants(spec)
    names = [v.name for v in variants]
    assert names == ["norm=layer,residual=true,seed=0", "norm=layer,residual=true,seed=1",
                     "norm=layer,residual=false,seed=0", "norm=layer,residual=false,seed=1",
                     "norm=batch,residual=true,seed=0", "norm=batch,residual=true,seed=1"]
    cfg = load_config(None, variants[3].overrides)
    assert (cfg.model.norm, cfg.model.residual, cfg.train.seed, cfg.train.steps) == \
        ("layer", "false", 1, 5)


def test_same_leaf_in_two_sections_uses_full_path():
    spec = SweepSpec(grid={"model.dropout": [0.0], "data.name": ["x"], "train.seed": [3]})
    assert expand_variants(spec)[0].name == "dropout=0.0,name=x,seed=3"
    spec = SweepSpec(grid={"data.config": ["a"], "model.config": ["b"]})
    assert expand_variants(spec)[0].name == "data.config=a,model.config=b"


def test_shipped_sweeps_expand_to_valid_configs():
    for path in (ROOT / "configs/sweeps").glob("*.yaml"):
        spec, base = load_spec(path)
        for v in expand_variants(spec):
            load_config(base, v.overrides)


def _sweep(tmp_path, *args):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"base: {ROOT / 'configs/base.yaml'}\noverrides: {TINY}\n"
                    "grid:\n  model.norm: [layer, dyt]\n")
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
