"""The final losses on the test split (summary.json ``final_test_loss``, and for batch norms
``final_test_loss_precise_bn``), recomputed here from the run's own checkpoint with a plain
forward pass and a numpy cross-entropy; resuming after the last checkpoint gives them again."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from tests.conftest import TINY, train_runs
from trainer import rundir
from trainer.config import load_config
from trainer.results.metrics import final_test_loss
from trainer.results.run import Run
from trainer.telemetry.precise_bn import BATCHES, population_statistics
from trainer.train.checkpoint import restore_trained
from trainer.train.loop import run_training
from trainer.train.rundir import inspect_run_dir


# Its module-scoped runs are built once: every test here goes to the same xdist worker
# (--dist loadgroup, setup.cfg), not once per worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_evaluation")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny LayerNorm run and a tiny BatchNorm run (XLA steps, as every real run)."""
    return train_runs(tmp_path_factory.mktemp("final"),
                      {norm: [f"model.norm={norm}"] for norm in ("layer", "batch")})


def _summary(run_dir):
    return json.loads((run_dir / rundir.SUMMARY).read_text())


def _loss(model, batches) -> float:
    """Mean cross-entropy over the real tokens, from the model's logits in inference mode."""
    total = tokens = 0.0
    for b in batches:
        logits = np.asarray(model(b["inputs"], padding_mask=b["mask"], training=False), np.float64)
        logits -= logits.max(-1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        nll = -np.take_along_axis(logp, b["targets"][..., None].astype(np.int64), -1)[..., 0]
        total += float((nll * b["mask"]).sum())
        tokens += float(b["mask"].sum())
    return total / tokens


def test_layer_norm_test_loss_is_the_test_split_in_inference_mode(runs):
    summary = _summary(runs["layer"])
    assert set(summary) == set(rundir.SUMMARY_KEYS)  # the loop writes exactly the schema
    cfg, corpus, model = restore_trained(runs["layer"])
    test = corpus.eval_batches("test", cfg.data.eval_batches)
    validation = corpus.eval_batches("validation", cfg.data.eval_batches)
    assert summary["final_test_loss"] == pytest.approx(_loss(model, test), rel=1e-5)
    # another split than the one tuned on: the validation loss is a different number
    assert summary["final_eval_loss"] == pytest.approx(_loss(model, validation), rel=1e-5)
    assert abs(summary["final_test_loss"] - summary["final_eval_loss"]) > 1e-3
    assert summary["final_test_loss_precise_bn"] is None
    assert summary["final_eval_loss_precise_bn"] is None
    assert final_test_loss(Run(runs["layer"])) == summary["final_test_loss"]


def test_batch_norm_precise_test_loss_uses_population_statistics(runs):
    summary = _summary(runs["batch"])
    cfg, corpus, model = restore_trained(runs["batch"])
    test = corpus.eval_batches("test", cfg.data.eval_batches)
    # inference mode on the running (EMA) statistics the checkpoint holds
    assert summary["final_test_loss"] == pytest.approx(_loss(model, test), rel=1e-5)
    train = [corpus.train_batch(i, cfg.train.seed) for i in range(BATCHES)]
    with population_statistics(model, train):
        precise = _loss(model, test)
    assert summary["final_test_loss_precise_bn"] == pytest.approx(precise, rel=1e-5)
    # after 6 steps the EMA statistics are mostly their initial values: a different number
    assert abs(summary["final_test_loss_precise_bn"] - summary["final_test_loss"]) > 1e-3
    assert summary["compile_count"]["test"] >= 0 and summary["compile_count"]["eval"] >= 1


def test_resuming_after_the_last_checkpoint_gives_the_same_final_losses(runs, tmp_path):
    """Killed after its last checkpoint, before summary.json: the rerun measures the same."""
    again = tmp_path / "batch"
    shutil.copytree(runs["batch"], again)
    (again / rundir.SUMMARY).unlink()
    cfg = load_config(again / rundir.CONFIG)
    assert inspect_run_dir(again, cfg) == "resume"
    resumed = run_training(cfg, again, argv=["test"], progress=False)
    original = _summary(runs["batch"])
    for key in ("final_test_loss", "final_test_loss_precise_bn", "final_eval_loss",
                "final_eval_loss_precise_bn", "best_eval_loss"):
        assert resumed[key] == original[key], key
    assert inspect_run_dir(again, cfg) == "completed"
    # a finished run is left as it is: its summary comes back unchanged
    assert run_training(cfg, again, argv=["test"], progress=False) == _summary(again)


def test_a_diverged_run_has_no_test_loss(tmp_path):
    cfg = load_config("configs/base.yaml", [*TINY, "model.norm=batch",
                                            "train.loss_upper_bound=1.0"])
    summary = run_training(cfg, tmp_path / "run", argv=["test"], progress=False)
    assert summary["status"] == "diverged" and summary["diverged_step"] == 0
    assert summary["final_test_loss"] is None and summary["final_test_loss_precise_bn"] is None
    assert inspect_run_dir(tmp_path / "run", cfg) == "diverged"  # not "completed"
    assert final_test_loss(Run(tmp_path / "run")) == math.inf  # as bad as its final loss
