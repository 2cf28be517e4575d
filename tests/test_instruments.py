"""The instability instruments (attention-logit growth, attention entropy, log Z), QK-norm and
the z-loss: each measured against a plain numpy recomputation, and a tiny real run's event
files and summary.json carrying them."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from tests.conftest import train_runs  # noqa: E402
from trainer.models.attention import CachedAttention  # noqa: E402
from trainer.models.block import model_config  # noqa: E402
from trainer.models.lm import CausalLM  # noqa: E402
from trainer.results.run import Run  # noqa: E402
from trainer.telemetry.instruments import Extremes, is_instrument  # noqa: E402
from trainer.telemetry.tensorboard import custom_scalars_layout  # noqa: E402
from trainer.train.optimizer import make_optimizer  # noqa: E402
from trainer.config import load_config  # noqa: E402
from trainer.train.step import make_train_step  # noqa: E402

HEADS, HEAD_DIM, DIM = 2, 8, 16


def _attention(qk_norm="none") -> CachedAttention:
    keras.utils.set_random_seed(0)
    att = CachedAttention(HEADS, HEAD_DIM, qk_norm=qk_norm, name="attention")
    att.build((None, None, DIM), (None, None, DIM))
    return att


def _numpy_instruments(att, x, mask):
    """Largest logit and mean entropy over real queries, straight from the definitions."""
    q = np.einsum("btc,cnh->btnh", x, att._query_dense.kernel.numpy()) + att._query_dense.bias.numpy()
    k = np.einsum("btc,cnh->btnh", x, att._key_dense.kernel.numpy()) + att._key_dense.bias.numpy()
    logits = np.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(HEAD_DIM)
    t = x.shape[1]
    causal = np.tril(np.ones((t, t), bool))
    top, entropies = -np.inf, []
    for b in range(x.shape[0]):
        for n in range(HEADS):
            for i in range(t):
                if mask[b, i] == 0:
                    continue
                row = logits[b, n, i][causal[i]]
                top = max(top, row.max())
                p = np.exp(row - row.max())
                p /= p.sum()
                entropies.append(-(p * np.log(p)).sum())
    return top, float(np.mean(entropies))


def test_attention_instruments_equal_their_definitions_over_real_queries():
    att = _attention()
    rng = np.random.default_rng(0)
    x = rng.normal(0, 3, (3, 9, DIM)).astype("float32")
    mask = np.ones((3, 9), "float32")
    mask[1, 5:] = mask[2, 2:] = 0  # right padding: pads are no queries
    _, stats = att(x, x, stats=True, padding_mask=mask)
    top, entropy = _numpy_instruments(att, x, mask)
    assert abs(float(stats["max_logit"]) - top) < 1e-4 * max(1.0, abs(top))
    assert abs(float(stats["entropy"]) - entropy) < 1e-4
    # A pad query with a larger logit than every real one does not count.
    x[1, 6] *= 50
    assert abs(float(att(x, x, stats=True, padding_mask=mask)[1]["max_logit"]) - top) < 1e-3


def test_the_instrumented_path_is_keras_attention_to_the_last_bit():
    """The default network must not change: forward and gradients equal bit for bit."""
    att = _attention()
    x = tf.constant(np.random.default_rng(1).normal(size=(4, 12, DIM)).astype("float32"))

    @tf.function(jit_compile=True)
    def both(x):
        with tf.GradientTape(persistent=True) as tape:
            plain = att(x, x, use_causal_mask=True)
            instrumented = att(x, x, stats=True)[0]
            a, b = tf.reduce_sum(tf.sin(plain)), tf.reduce_sum(tf.sin(instrumented))
        return [plain, instrumented, tape.gradient(a, att.trainable_variables),
                tape.gradient(b, att.trainable_variables)]

    plain, instrumented, ga, gb = both(x)
    assert np.array_equal(plain.numpy(), instrumented.numpy())
    assert all(np.array_equal(u.numpy(), v.numpy()) for u, v in zip(ga, gb))


@pytest.mark.parametrize("qk_norm", ["layer", "rms"])
def test_qk_norm_bounds_the_logits_when_the_stream_grows(qk_norm):
    """q and k are normalised per head: scaling the input 100x (no biases) leaves the logits,
    so the attention, unchanged with QK-norm, and multiplies them by 10^4 without."""
    x = np.random.default_rng(2).normal(size=(2, 10, DIM)).astype("float32")
    for norm, fixed in ((qk_norm, True), ("none", False)):
        att = _attention(norm)
        att._query_dense.bias.assign(np.zeros_like(att._query_dense.bias))
        att._key_dense.bias.assign(np.zeros_like(att._key_dense.bias))
        small = float(att(x, x, stats=True)[1]["max_logit"])
        big = float(att(100 * x, 100 * x, stats=True)[1]["max_logit"])
        assert (abs(big - small) < 1e-3 * abs(small)) == fixed, (norm, small, big)


def _step_outputs(z_loss: float):
    cfg = load_config("configs/base.yaml", ["model.num_layers=1", "model.dim=16",
                                            "model.num_heads=2", "model.ffn_dim=32",
                                            "train.warmup_steps=0", f"train.z_loss={z_loss}"])
    keras.utils.set_random_seed(0)
    model = CausalLM(cfg.model, 60, 16)
    model.build((None, 16))
    model.head.bias.assign(np.full(60, 2.0, "float32"))  # log Z well away from 0
    optimizer = make_optimizer(cfg.train)
    optimizer.build(model.trainable_variables)
    step = make_train_step(model, optimizer, clip_norm=1.0, telemetry=True, xla=False,
                           z_loss=z_loss)
    rng = np.random.default_rng(3)
    batch = {"inputs": rng.integers(3, 60, (4, 16)).astype("int32"),
             "targets": rng.integers(3, 60, (4, 16)).astype("int32"),
             "mask": np.ones((4, 16), "float32")}
    batch["mask"][2, 10:] = 0
    logits = np.asarray(model(batch["inputs"], padding_mask=batch["mask"]), np.float64)
    out = step(batch)
    return out, logits, batch, [v.numpy() for v in model.trainable_variables]


def test_z_loss_is_its_definition_and_leaves_the_reported_loss_alone():
    coef = 1e-2
    with_z, logits, batch, after_z = _step_outputs(coef)
    without, _, _, after = _step_outputs(0.0)
    m = batch["mask"] > 0
    z = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    ce = -(logits - z[..., None])[np.arange(4)[:, None], np.arange(16), batch["targets"]]
    assert abs(float(with_z["loss"]) - ce[m].mean()) < 1e-5  # the cross-entropy alone
    assert float(with_z["loss"]) == float(without["loss"])
    assert abs(float(with_z["z_loss"]) - coef * (z[m] ** 2).mean()) < 1e-5
    assert abs(float(with_z["output/log_z_mean"]) - z[m].mean()) < 1e-4
    assert abs(float(with_z["output/log_z_max"]) - z[m].max()) < 1e-4
    assert "z_loss" not in without
    assert any(not np.array_equal(a, b) for a, b in zip(after_z, after))  # it trains on it


def test_extremes_keep_last_max_and_min_through_a_resume():
    first = Extremes()
    first.update({"attention/block_0/max_logit": 2.0, "loss": 9.0, "output/log_z_mean": 1.0})
    first.update({"attention/block_0/max_logit": 5.0, "output/log_z_mean": -2.0})
    resumed = Extremes(first.state())
    resumed.update({"attention/block_0/max_logit": 3.0, "output/log_z_mean": 0.5})
    resumed.update({"attention/block_0/max_logit": float("nan"),
                    "output/log_z_mean": float("inf")})  # not finite: skipped
    s = resumed.summary()
    assert s["instruments"] == {"attention/block_0/max_logit": 3.0, "output/log_z_mean": 0.5}
    assert s["instruments_max"] == {"attention/block_0/max_logit": 5.0, "output/log_z_mean": 1.0}
    assert s["instruments_min"] == {"attention/block_0/max_logit": 2.0, "output/log_z_mean": -2.0}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A real tiny run with the new variants on: Peri-LN, RMS QK-norm, the z-loss."""
    return train_runs(tmp_path_factory.mktemp("instruments"), {"peri": [
        "model.placement=peri", "model.qk_norm=rms", "train.z_loss=1e-4"]})["peri"]


def test_a_tiny_runs_event_files_and_summary_carry_the_instruments(tiny_run):
    run = Run(tiny_run)
    blocks = int(run.cfg.model.num_layers)
    tags = {f"attention/block_{i}/{s}" for i in range(blocks) for s in ("max_logit", "entropy")}
    tags |= {"output/log_z_mean", "output/log_z_max", "z_loss"}
    assert tags <= set(run.train)
    for key in ("instruments", "instruments_max", "instruments_min"):
        assert set(run.summary[key]) == tags
    s = run.summary
    for tag in tags:  # every step's extremes bracket every logged value
        logged = [v for _, v in run.train[tag]]
        assert s["instruments_min"][tag] <= min(logged) <= max(logged) <= s["instruments_max"][tag]
    # At init the head's logits are ~0 (N(0, 0.02) weights, zero bias), so log Z starts at
    # log(vocab): a uniform prediction, nothing learned yet.
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(tiny_run / "tokenizer.json")).get_vocab_size()
    assert abs(dict(run.train["output/log_z_mean"])[0] - np.log(vocab)) < 0.05
    assert 0 < s["instruments_min"]["attention/block_0/entropy"]


def test_custom_scalars_chart_every_instrument_tag(tiny_run):
    import re

    regexes = [t for cat in custom_scalars_layout().category for c in cat.chart
               for t in c.multiline.tag]
    for tag in Run(tiny_run).train:
        if is_instrument(tag) and tag != "z_loss":
            assert any(re.fullmatch(r, tag) for r in regexes), tag
