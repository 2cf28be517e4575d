"""End to end: a tiny config trains on the embedded corpus; curves read back with TensorBoard."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from tests.conftest import TINY, mean_token_loss, restore_final_model
from trainer.config import load_config
from trainer.train.loop import HPARAM_KEYS, _hparam, run_training
from trainer.train.optimizer import make_schedule


TINY_RUN = [*TINY, "model.num_layers=2"]


def _tb_scalars(path):
    """Scalars of one event dir, read with TensorBoard's EventAccumulator (not our reader)."""
    acc = EventAccumulator(str(path), size_guidance={"tensors": 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()["tensors"]:
        values = [(e.step, tensor_util.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]
        if all(v.ndim == 0 for _, v in values):  # scalars; histograms are checked elsewhere
            out[tag] = [(s, float(v)) for s, v in values]
    return out


# Its module-scoped runs are built once: every test here goes to the same xdist worker
# (--dist loadgroup, setup.cfg), not once per worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_train")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    cfg = load_config("configs/base.yaml", TINY_RUN)
    run_dir = tmp_path_factory.mktemp("runs") / "tiny"
    summary = run_training(cfg, run_dir, argv=["test"], progress=False)
    return cfg, run_dir, summary


def test_run_directory_is_self_describing(tiny_run):
    cfg, run_dir, summary = tiny_run
    assert summary["status"] == "completed" and summary["steps"] == cfg.train.steps
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["model"]["num_layers"] == 2 and saved["data"]["max_len"] == 32
    assert load_config(run_dir / "config.yaml") == cfg  # the saved config reproduces the run
    meta = json.loads((run_dir / "meta.json").read_text())
    for key in ("git_sha", "git_dirty", "packages", "command", "seed", "dataset_fingerprint",
                "tokenizer_hash", "host", "start_time"):
        assert key in meta, key
    assert meta["packages"]["tensorflow"].startswith("2.")
    # weight decay on the 13 kernels (q, k, v, output, 2 FFN per block; the head), not the rest
    decay = meta["weight_decay"]
    assert decay["decayed"]["tensors"] == 6 * cfg.model.num_layers + 1
    assert decay["decayed"]["params"] + decay["not_decayed"]["params"] == summary["num_params"]
    assert 0 < summary["pad_fraction"] < 0.5
    assert summary["tokens_per_sec"] > 0
    assert list((run_dir / "checkpoints").glob("ckpt-6.index"))
    # one XLA program per bucket shape (+ the shared update), never one per batch
    buckets = len(cfg.data.buckets)
    assert cfg.runtime.shared_update
    assert 2 <= summary["compile_count"]["train"] <= buckets + 1
    assert 1 <= summary["compile_count"]["eval"] <= buckets
    # LayerNorm without dropout: the inference program also gives the train-mode eval loss
    # (test_final_eval_losses_are_the_checkpoints checks the value), so none is compiled for it
    assert summary["compile_count"]["eval_train_mode"] == 0
    assert summary["peak_rss_mb"] > 100


def test_curves_readable_by_tensorboard(tiny_run):
    cfg, run_dir, summary = tiny_run
    train, ev = _tb_scalars(run_dir / "train"), _tb_scalars(run_dir / "eval")
    for tag in ("loss", "learning_rate", "grad_norm/global", "pad_fraction", "tokens_per_sec",
                "update_ratio/global", "nonfinite"):
        assert tag in train, tag
    steps = [s for s, _ in train["loss"]]
    assert steps == list(range(cfg.train.steps))  # log_every=1: every step, once
    assert all(math.isfinite(v) for _, v in train["loss"])
    for tag in ("loss", "perplexity", "loss_train_mode"):
        assert [s for s, _ in ev[tag]] == [0, 3, 6], tag
    # perplexity is exp(loss); the first eval is near ln(vocab) for an untrained model
    for (_, loss), (_, ppl) in zip(ev["loss"], ev["perplexity"]):
        assert ppl == pytest.approx(math.exp(loss), rel=1e-5)
    assert abs(ev["loss"][0][1] - math.log(512)) < 0.5
    assert ev["loss"][-1][1] < ev["loss"][0][1]  # it learns something in 6 steps
    # the learning rate warms up linearly then decays
    lr = [v for _, v in train["learning_rate"]]
    assert lr[0] == 0.0 and max(lr) == pytest.approx(cfg.train.lr, rel=1e-5) and lr[-1] < max(lr)
    for i in range(cfg.model.num_layers):
        assert f"grad_norm/block_{i}" in train and f"activation/block_{i}/token_std" in train


def test_final_eval_losses_are_the_checkpoints(tiny_run):
    """summary.json's final eval losses (and the last eval curve points) are the mean token
    loss of the last checkpoint's weights on the eval batches, recomputed here in numpy; LN in
    training mode gives the same loss, and PreciseBN is not run for it."""
    cfg, run_dir, _ = tiny_run
    summary = json.loads((run_dir / "summary.json").read_text())
    _, corpus, model = restore_final_model(run_dir)
    batches = corpus.eval_batches("validation", cfg.data.eval_batches)
    inference = mean_token_loss(model, batches)
    assert summary["final_eval_loss"] == pytest.approx(inference, rel=1e-5)
    assert summary["final_eval_loss_train_mode"] == pytest.approx(
        mean_token_loss(model, batches, training=True), rel=1e-5)
    assert summary["final_eval_loss_precise_bn"] is None
    ev = _tb_scalars(run_dir / "eval")
    assert ev["loss"][-1] == (cfg.train.steps, pytest.approx(inference, rel=1e-5))
    assert ev["loss_train_mode"][-1][1] == pytest.approx(inference, rel=1e-5)


@pytest.mark.parametrize("decay,end", [("cosine", 0.001), ("constant", 0.01)])
def test_schedule_without_warmup(decay, end):
    cfg = load_config(None, ["train.warmup_steps=0", "train.steps=10", "train.lr=0.01",
                             f"train.decay={decay}", "train.min_lr_ratio=0.1"])
    sched = make_schedule(cfg.train)
    assert float(sched(0)) == pytest.approx(0.01) and float(sched(10)) == pytest.approx(end)


def test_same_seed_same_curves(tiny_run, tmp_path):
    """Determinism on CPU: the same config and seed give identical curves and metrics."""
    cfg, run_dir, summary = tiny_run
    again = run_training(cfg, tmp_path / "again", argv=["test"], progress=False)
    assert again["final_eval_loss"] == summary["final_eval_loss"]
    a, b = _tb_scalars(run_dir / "train"), _tb_scalars(tmp_path / "again" / "train")
    assert np.array_equal([v for _, v in a["loss"]], [v for _, v in b["loss"]])
    assert np.array_equal([v for _, v in a["grad_norm/global"]], [v for _, v in b["grad_norm/global"]])


def test_mixed_precision_run(tiny_run, tmp_path):
    """bfloat16 compute trains the same model to about the same loss; the policy is restored."""
    import keras

    cfg, _, summary = tiny_run
    mixed = load_config("configs/base.yaml", [*TINY_RUN, "runtime.mixed_precision=true"])
    result = run_training(mixed, tmp_path / "bf16", argv=["test"], progress=False)
    assert result["status"] == "completed"
    assert result["final_eval_loss"] == pytest.approx(summary["final_eval_loss"], abs=0.1)
    assert result["final_eval_loss"] != summary["final_eval_loss"]  # it did run in bf16
    assert keras.mixed_precision.global_policy().name == "float32"


def test_time_breakdown_adds_up(tiny_run):
    """summary.json's time: phases are disjoint slices of the process's wall time, and the
    train share is the train-step slice of it (issue #13)."""
    import time

    cfg, run_dir, summary = tiny_run
    t = summary["time"]
    phases = sum(t[f"{p}_s"] for p in ("data", "compile", "train", "eval", "checkpoint"))
    assert 0 < t["train_s"] and 0 < t["compile_s"] and 0 < t["eval_s"]
    assert phases <= t["wall_s"] and t["startup_s"] <= t["wall_s"]
    # train share against the file system's clock: the run's wall time holds everything from
    # writing config.yaml to writing summary.json, so the share is at most train_s over that
    written = [(run_dir / f).stat().st_mtime for f in ("config.yaml", "summary.json")]
    assert 0 < t["train_share"] <= t["train_s"] / (written[1] - written[0]) * 1.02 + 1e-4
    # train_s is the time of the steps that compiled nothing (a batch shape seen before): the
    # tokens/s summary counts the real tokens of exactly those steps over the same seconds
    from trainer.data import prepare

    corpus, seen, timed_tokens = prepare(cfg.data, seed=cfg.train.seed), set(), 0.0
    for step in range(cfg.train.steps):
        batch = corpus.train_batch(step, cfg.train.seed)
        if batch["inputs"].shape in seen:
            timed_tokens += float(batch["mask"].sum())
        seen.add(batch["inputs"].shape)
    assert timed_tokens > 0
    assert summary["tokens_per_sec"] * t["train_s"] == pytest.approx(timed_tokens, rel=0.02)
    # not the first run of this pytest process: its clock starts at run_training, not at the
    # interpreter's start, so it is bounded by the time since its run dir was created
    assert t["wall_s"] <= time.time() - (run_dir / "config.yaml").stat().st_mtime + 60


def test_hparams_are_plain_values():
    # the HParams dashboard must show "batch", not "Norm.batch" or an Enum repr
    from omegaconf import OmegaConf

    cfg = load_config(None, ["model.norm=batch", "model.residual=false"])
    values = {k: _hparam(OmegaConf.select(cfg, k)) for k in HPARAM_KEYS}
    assert all(type(v) in (bool, int, float, str) for v in values.values()), values
    assert (values["model.norm"], values["model.residual"]) == ("batch", "false")
