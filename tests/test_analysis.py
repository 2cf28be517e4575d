"""Analyses over real (tiny) trained runs and fresh models: the batch-size sweep of F7 and the
gradient profile at init of F6."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import NORM_RUNS_GROUP, TINY, run_cli
from trainer.config import load_config
from trainer.provenance import git_dirty

ROOT = Path(__file__).resolve().parents[1]


# The runs are conftest's session-wide ``norm_runs``: every test that reads them goes to one
# xdist worker (--dist loadgroup, setup.cfg), where they are trained once.
pytestmark = pytest.mark.xdist_group(NORM_RUNS_GROUP)


@pytest.fixture
def runs(norm_runs):
    return norm_runs


def test_batch_size_analysis_separates_layer_from_batch_norm(runs, tmp_path):
    from trainer.analysis.batch_size import run

    rows = run([runs["layer"], runs["batch"]], tmp_path, n=8, sizes=(1, 2, 8))
    loss = {(r["norm"], r["mode"], r["batch_size"]): r["loss"] for r in rows}
    for mode in ("train", "inference"):  # LN: the batch never matters
        assert max(abs(loss[("layer", mode, b)] - loss[("layer", mode, 8)]) for b in (1, 2)) < 1e-5
    assert max(abs(loss[("batch", "inference", b)] - loss[("batch", "inference", 8)])
               for b in (1, 2)) < 1e-5
    assert abs(loss[("batch", "train", 1)] - loss[("batch", "train", 8)]) > 1e-4  # >> 1e-5
    with open(tmp_path / "batch_size.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(rows) == 2 * 2 * 4
    assert (tmp_path / "batch_size.png").read_bytes()[:4] == b"\x89PNG"


def test_bn_output_for_a_single_token_batch_is_beta():
    """B = 1, T = 1 in training mode: the token is its own batch mean, so BN returns beta."""
    import numpy as np

    from trainer.models.norms import make_norm

    layer = make_norm("batch")
    x = np.random.default_rng(0).normal(size=(1, 1, 6)).astype("float32")
    layer.build(x.shape)
    layer.inner.beta.assign(np.arange(6, dtype="float32"))
    out = np.asarray(layer(x, padding_mask=np.ones((1, 1), "float32"), training=True))
    np.testing.assert_allclose(out[0, 0], np.arange(6), atol=1e-6)


def test_an_analysis_records_the_commit_that_made_it(runs, tmp_path):
    """``NAME.meta.json`` beside the CSV: this checkout's commit and tree state (asked of git
    here), and the command line; a failed analysis leaves none."""
    import json

    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()

    commands = {"batch_size": ["batch-size", str(runs["layer"]), "--out", str(tmp_path),
                               "--sequences", "2", "--batch-sizes", "1", "2"],
                "grad_profile": ["grad-profile", "--config", "configs/base.yaml", "--out",
                                 str(tmp_path), "--seeds", "0", "--inits", "normal",
                                 "--batches", "1", *TINY]}
    for name, args in commands.items():
        proc = run_cli("analyze", *args)
        assert proc.returncode == 0, proc.stderr[-2000:]
        meta = json.loads((tmp_path / f"{name}.meta.json").read_text())
        assert meta["git_sha"] == git("rev-parse", "HEAD")
        assert meta["git_dirty"] == git_dirty()
        assert meta["command"] == ["analyze", *args]
    failed = tmp_path / "failed"
    assert run_cli("analyze", "padding", str(runs["layer"]), "--out", str(failed)).returncode == 2
    assert not failed.exists() or not list(failed.glob("*.meta.json"))


def test_analyze_cli_errors_are_one_line(tmp_path):
    for args in (["nope"], ["batch-size", str(tmp_path), "--out", str(tmp_path / "o")]):
        proc = run_cli("analyze", *args)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1


def test_grad_profile_writes_one_row_per_init_placement_seed(tmp_path):
    from trainer.analysis.grad_profile import run

    overrides = [*TINY, "model.num_layers=3"]
    rows = run("configs/base.yaml", overrides, tmp_path, seeds=[0, 1], inits=["normal", "xavier"],
               batches=2)
    assert [(r["init"], r["placement"], r["seed"]) for r in rows] == [
        (i, p, s) for i in ("normal", "xavier") for p in ("pre", "post") for s in (0, 1)]
    # One row recomputed here: the FFN output kernels' gradient norms of the mean token loss
    # (keras' cross-entropy, not the trainer's), per block, averaged over the first 2 batches.
    import keras
    import numpy as np
    import tensorflow as tf

    from trainer.data import prepare
    from trainer.models import build_model

    cfg = load_config("configs/base.yaml", [*overrides, "model.init=xavier",
                                            "model.placement=post", "train.seed=1"])
    corpus = prepare(cfg.data)
    keras.utils.set_random_seed(1)
    model = build_model(cfg.model, corpus.vocab_size, corpus.max_len)
    kernels = [block.ffn.out.kernel for block in model.blocks]
    norms = np.zeros(3)
    for step in range(2):
        b = corpus.train_batch(step, 1)
        with tf.GradientTape() as tape:
            logits = model(b["inputs"], padding_mask=b["mask"], training=True)
            ce = keras.losses.sparse_categorical_crossentropy(b["targets"], logits, from_logits=True)
            loss = tf.reduce_sum(ce * b["mask"]) / b["mask"].sum()
        norms += [float(tf.norm(g)) for g in tape.gradient(loss, kernels)] / np.float64(2)
    row = next(r for r in rows if (r["init"], r["placement"], r["seed"]) == ("xavier", "post", 1))
    np.testing.assert_allclose([row[f"block_{i}"] for i in range(3)], norms, rtol=1e-4)
    assert row["last_over_first"] == pytest.approx(norms[2] / norms[0], rel=1e-4)
    assert len({round(r["last_over_first"], 6) for r in rows}) == len(rows)  # no constant ratio
    assert (tmp_path / "grad_profile.png").is_file() and (tmp_path / "grad_profile.csv").is_file()


def test_restored_checkpoint_gives_the_runs_own_eval_loss(runs):
    """The analysis' model is the run's final model, BN running statistics included."""
    import json

    from trainer.train.checkpoint import restore_trained
    from trainer.train.evaluation import evaluate
    from trainer.train.step import make_eval_step

    for run_dir in runs.values():
        cfg, corpus, model = restore_trained(run_dir)
        loss = evaluate(make_eval_step(model, xla=False), corpus.eval_batches("validation"))
        assert loss == pytest.approx(json.loads((run_dir / "summary.json").read_text())[
            "final_eval_loss"], rel=1e-6)


def test_composition_separates_per_token_norms_from_batch_norm(runs, tmp_path):
    """Only the partners' real lengths change: LN's logits are identical, BN's move."""
    from trainer.analysis.composition import run
    from trainer.findings.thresholds import DEPENDENT_MIN, INVARIANT_MAX

    rows = run([runs["layer"], runs["batch"]], tmp_path, n=4)
    delta = {(r["norm"], r["mode"]): r["max_abs_delta"] for r in rows}
    assert delta[("layer", "train")] < INVARIANT_MAX and delta[("layer", "inference")] < INVARIANT_MAX
    assert delta[("batch", "train")] > DEPENDENT_MIN
    assert delta[("batch", "inference")] < INVARIANT_MAX  # running statistics: no partners
    assert (tmp_path / "composition.png").read_bytes()[:4] == b"\x89PNG"


def test_padding_shift_is_the_pads_pull_on_the_mean():
    """Pads at value c in a share p of positions move the mean by p·(c − mean_real)."""
    import numpy as np

    from trainer.analysis.padding import shift

    x = np.zeros((2, 5, 3))
    x[:, :4] = np.random.default_rng(0).normal(size=(2, 4, 3))
    x[:, 4] = 7.0
    mask = np.ones((2, 5))
    mask[:, 4] = 0
    real = x[:, :4].reshape(-1, 3)
    want = np.mean(0.2 * np.abs(7.0 - real.mean(0)) / real.std(0))
    assert shift(x, mask, 0.0) == pytest.approx(want)
    assert shift(x, np.ones((2, 5)), 0.0) == 0.0


def test_padding_analysis_on_a_bn_run(runs, tmp_path):
    from trainer.analysis.padding import run

    rows = run([runs["batch"]], tmp_path, k=3)
    by = {r["condition"]: r for r in rows}
    assert list(by) == ["bucketed", "pad_to_max", "small_batch"]
    assert by["pad_to_max"]["pad_fraction"] > by["bucketed"]["pad_fraction"]
    for r in rows:  # no pads: the two means coincide; pads: they part
        assert r["shift"] > 0 if r["pad_fraction"] > 0 else r["shift"] < 1e-6
    assert "shift_block_0" in rows[0]
    assert (tmp_path / "padding.png").read_bytes()[:4] == b"\x89PNG"


def test_padding_analysis_rejects_a_run_without_batch_norm(runs, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "trainer", "analyze", "padding", str(runs["layer"]),
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2 and "batch norms" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_git_dirty_means_the_code_changed_not_the_committed_results(tmp_path):
    """A modified tracked file outside results/ makes a tree dirty; a rewritten committed result
    (an analysis rerun over its own outputs) and an untracked file do not."""
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, check=True)

    git("init", "-q")
    for rel in ("trainer/x.py", "results/reference/analysis/a.csv", "configs/c.yaml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("0\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    assert not git_dirty(tmp_path)
    (tmp_path / "results/reference/analysis/a.csv").write_text("1\n")
    (tmp_path / "untracked.py").write_text("")
    assert not git_dirty(tmp_path)
    assert not git_dirty(tmp_path / "trainer")  # asked from a subfolder, the rule is the same
    for rel in ("trainer/x.py", "configs/c.yaml"):
        (tmp_path / rel).write_text("1\n")
        assert git_dirty(tmp_path / "trainer"), rel
        git("checkout", "-q", rel)



def test_grad_profile_plots_any_placements_it_was_given(tmp_path):
    """The figure draws the placements in its rows (Peri-LN included), not a fixed pre/post pair."""
    from trainer.analysis.grad_profile import plot

    rows = [{"init": "normal", "placement": p, "seed": 0, "block_0": 1.0, "block_1": 0.5}
            for p in ("pre", "peri", "output")]
    plot(rows, tmp_path / "g.png")
    assert (tmp_path / "g.png").stat().st_size > 0
