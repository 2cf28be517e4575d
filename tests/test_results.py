"""Sweep tables and plots on three tiny runs laid out like a sweep would (reproduce:
tests/test_reproduce.py)."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli

from trainer.config import load_config
from trainer.results.run import variant_name
from trainer.results.summarize import group_variants, summarize
from trainer.train.loop import run_training

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("loss", "grad_norm_by_block", "token_std_by_depth", "invariance_and_gap",
         "token_cosine_by_depth")
# Two blocks for depth plots; eager steps and two evaluations (0, 6) keep each run a few seconds.
FAST = ["model.num_layers=2", "runtime.xla=false", "train.eval_every=6", "train.checkpoint_every=6"]
RUNS = {"norm=layer,seed=0": ["model.norm=layer", "train.seed=0"],
        "norm=layer,seed=1": ["model.norm=layer", "train.seed=1"],
        "norm=batch,seed=0": ["model.norm=batch", "train.seed=0"]}


# Its module-scoped runs are built once: every test here goes to the same xdist worker
# (--dist loadgroup, setup.cfg), not once per worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_results")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Three tiny runs under one results root, named as a sweep names them; ``summarize`` once."""
    from tests.conftest import TINY

    root = tmp_path_factory.mktemp("results") / "tiny_sweep"
    for name, overrides in RUNS.items():
        cfg = load_config("configs/base.yaml", [*TINY, *FAST, *overrides])
        run_training(cfg, root / name, argv=["test"], progress=False)
    variants = summarize(root)
    return root, variants


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _summary(root, name):
    return json.loads((root / name / "summary.json").read_text())


def test_variant_name_drops_only_the_seed():
    assert variant_name("norm=batch,residual=false,seed=1") == "norm=batch,residual=false"
    assert variant_name("seed=3,norm=layer") == "norm=layer"
    assert variant_name("norm=layer") == "norm=layer"
    assert variant_name("myseed=2") == "myseed=2"


def test_status_and_divergence_of_a_partly_diverged_variant():
    base = {"variant": "v", "norm": "batch", "placement": "pre", "residual": "false",
            "num_layers": 2, "lr": 1e-3, "warmup_steps": 2, "final_eval_loss_train_mode": None,
            "train_inference_gap": None, "max_grad_norm": 2.0, "batch_invariance": None,
            "token_cosine_last": None, "tokens_per_sec": 10.0, "best_eval_loss": 5.0}
    rows = [{**base, "status": "completed", "final_eval_loss": 5.0, "diverged_step": None},
            {**base, "status": "diverged", "final_eval_loss": None, "diverged_step": 37,
             "max_grad_norm": 9.0}]
    (v,) = group_variants(rows)
    assert v["status"] == "diverged 1/2" and v["diverged_steps"] == "37" and v["n_seeds"] == 2
    assert v["final_eval_loss_mean"] == 5.0 and v["final_eval_loss_std"] is None
    assert v["max_grad_norm"] == 9.0


def test_summary_groups_seeds_into_variants(sweep):
    root, variants = sweep
    rows = {r["variant"]: r for r in _csv(root / "summary.csv")}
    assert sorted(rows) == ["norm=batch", "norm=layer"]
    layer, batch = rows["norm=layer"], rows["norm=batch"]
    assert layer["n_seeds"] == "2" and batch["n_seeds"] == "1"
    assert layer["norm"] == "layer" and layer["num_layers"] == "2"
    assert layer["status"] == "completed"
    # mean and sample std recomputed here from the two summary.json files
    losses = [_summary(root, f"norm=layer,seed={s}")["final_eval_loss"] for s in (0, 1)]
    assert losses[0] != losses[1]  # the seed matters, so grouping is not trivially right
    assert float(layer["final_eval_loss_mean"]) == pytest.approx(statistics.mean(losses), rel=1e-12)
    assert float(layer["final_eval_loss_std"]) == pytest.approx(statistics.stdev(losses), rel=1e-9)
    assert batch["final_eval_loss_std"] == ""  # one seed: no spread
    b = _summary(root, "norm=batch,seed=0")
    assert float(batch["final_eval_loss_mean"]) == b["final_eval_loss"]
    gap = b["final_eval_loss"] - b["final_eval_loss_train_mode"]
    assert float(batch["train_inference_gap"]) == pytest.approx(gap)
    cosine = b["probes"]["probe/token_cosine/block_1"]  # the last of the two blocks
    assert float(batch["token_cosine_last"]) == pytest.approx(cosine)
    assert float(layer["max_grad_norm"]) == max(
        _summary(root, f"norm=layer,seed={s}")["max_grad_norm"] for s in (0, 1))
    md = (root / "summary.md").read_text()
    assert md.count("\n| norm=") == 2 and " ± " in md
    assert f"{statistics.mean(losses):.4g}" in md


def test_runs_csv_has_one_row_per_run(sweep):
    root, _ = sweep
    rows = _csv(root / "runs.csv")
    assert sorted(r["run"] for r in rows) == sorted(RUNS)
    for r in rows:
        s = _summary(root, r["run"])
        assert float(r["final_eval_loss"]) == s["final_eval_loss"]
        assert r["variant"] == variant_name(r["run"]) and r["status"] == "completed"
        # the claims' inputs, the test split's losses among them, as summary.json has them
        for key in ("final_test_loss", "final_test_loss_precise_bn",
                    "final_eval_loss_precise_bn", "loss_spikes"):
            assert (r[key] == "") if s[key] is None else (float(r[key]) == s[key]), key
    assert any(r["final_test_loss_precise_bn"] for r in rows)  # the BN run has one
    layer = {r["variant"]: r for r in _csv(root / "summary.csv")}["norm=layer"]
    tests = [_summary(root, f"norm=layer,seed={s}")["final_test_loss"] for s in (0, 1)]
    assert float(layer["final_test_loss_mean"]) == pytest.approx(statistics.mean(tests), rel=1e-12)


def test_plots_are_valid_pngs(sweep):
    import matplotlib.image as mpimg

    root, _ = sweep
    for name in PLOTS:
        path = root / "plots" / f"{name}.png"
        data = path.read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 1024, name
        assert mpimg.imread(path).shape[0] > 100, name


def test_summarize_copes_with_unfinished_and_diverged_runs(sweep, tmp_path):
    """A crashed run (no summary.json, no eval curves) and a diverged one: one variant, 5 plots."""
    root, _ = sweep
    skip = shutil.ignore_patterns("checkpoints")
    crashed, diverged = tmp_path / "norm=batch,seed=0", tmp_path / "norm=batch,seed=1"
    shutil.copytree(root / "norm=batch,seed=0", crashed, ignore=skip)
    shutil.copytree(root / "norm=batch,seed=0", diverged, ignore=skip)
    (crashed / "summary.json").unlink()
    shutil.rmtree(crashed / "eval")
    summary = _summary(tmp_path, diverged.name)
    summary.update(status="diverged", diverged_step=3, final_eval_loss=None,
                   final_eval_loss_train_mode=None)
    (diverged / "summary.json").write_text(json.dumps(summary))
    (variant,) = summarize(tmp_path)
    assert variant["status"] == "unfinished 1/2, diverged 1/2" and variant["diverged_steps"] == "3"
    assert variant["final_eval_loss_mean"] is None and variant["n_seeds"] == 2
    for name in PLOTS:
        assert (tmp_path / "plots" / f"{name}.png").read_bytes()[:8] == PNG_SIGNATURE


def test_summarize_cli(sweep):
    root, _ = sweep
    proc = run_cli("summarize", root)
    assert proc.returncode == 0, proc.stderr
    assert "| variant |" in proc.stdout and "| norm=layer |" in proc.stdout
    assert not math.isnan(float(_csv(root / "summary.csv")[0]["final_eval_loss_mean"]))
    bad = run_cli("summarize", root / "missing")
    assert bad.returncode == 2 and "error:" in bad.stderr


def test_summarize_prints_nothing_on_stderr_in_a_plain_shell(sweep):
    """No TensorFlow start-up chatter (TensorBoard's event reader imports TensorFlow): a user's
    shell sets no TF_CPP_MIN_LOG_LEVEL, and the command line must still be quiet."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-m", "trainer", "summarize", str(sweep[0])], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
