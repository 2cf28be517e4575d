"""The compiled train step: one program per shape vs a shared, shape-independent update."""

from __future__ import annotations

import numpy as np

import trainer

tf = trainer.import_tensorflow_quietly()
import keras  # noqa: E402

from trainer.config import load_config  # noqa: E402
from trainer.models import CausalLM, model_config  # noqa: E402
from trainer.train.optimizer import make_optimizer  # noqa: E402
from trainer.train.step import make_train_step  # noqa: E402

VOCAB, MAX_LEN = 64, 16


def _step(shared: bool, seed: int = 0):
    keras.utils.set_random_seed(seed)
    model = CausalLM(model_config(num_layers=2, dim=32, num_heads=2, ffn_dim=64), VOCAB, MAX_LEN)
    model.build((None, MAX_LEN))
    optimizer = make_optimizer(load_config(None, ["train.lr=1e-2", "train.warmup_steps=0"]).train)
    optimizer.build(model.trainable_variables)
    step = make_train_step(model, optimizer, clip_norm=0.5, telemetry=True, xla=True,
                           shared_update=shared)
    return model, step


def _batch(rng, rows: int, length: int, repeat_tokens: bool) -> dict:
    if repeat_tokens:
        inputs = rng.integers(1, 4, (rows, length))  # three token ids, each many times
    else:  # every input token once: a sparse and a dense embedding gradient are the same
        inputs = rng.permutation(np.arange(1, VOCAB))[:rows * length].reshape(rows, length)
    return {"inputs": tf.constant(inputs, tf.int32),
            "targets": tf.constant(rng.integers(0, VOCAB, (rows, length)), tf.int32),
            "mask": tf.constant(np.ones((rows, length), np.float32))}


def _train(shared: bool, repeat_tokens: bool, steps: int = 4):
    model, step = _step(shared)
    rng = np.random.default_rng(0)
    metrics = [step(_batch(rng, 2, 8, repeat_tokens)) for _ in range(steps)]
    return model, metrics


def test_shared_update_equals_per_shape_update_when_no_token_repeats():
    (m_a, a), (m_b, b) = _train(False, False), _train(True, False)
    for key in ("loss", "grad_norm/global", "update_ratio/global", "grad_norm/{block}"):
        np.testing.assert_allclose([np.asarray(x[key]) for x in a],
                                   [np.asarray(x[key]) for x in b], rtol=1e-5, err_msg=key)
    assert float(a[-1]["grad_norm/global"]) > 0.5  # clipping was active on the way
    # atol: the attention key bias has an exactly-zero gradient (softmax ignores a constant
    # shift), so Adam turns float noise into ~1e-6 steps of either sign there.
    for va, vb in zip(m_a.trainable_variables, m_b.trainable_variables):
        np.testing.assert_allclose(va.numpy(), vb.numpy(), rtol=1e-4, atol=1e-5, err_msg=va.path)


def test_shared_update_is_plain_dense_adam_for_repeated_tokens():
    """Keras' sparse path squares each occurrence's gradient before summing (second moment);
    the shared update squares the summed, dense gradient. Repeated tokens tell them apart."""
    (m_a, _), (m_b, _) = _train(False, True, steps=1), _train(True, True, steps=1)
    emb_a, emb_b = m_a.token_embedding.embeddings.numpy(), m_b.token_embedding.embeddings.numpy()
    assert np.abs(emb_a - emb_b)[1:4].max() > 1e-4  # the three repeated ids
    np.testing.assert_array_equal(emb_a[4:], emb_b[4:])  # untouched rows: weight decay only


def test_shared_update_compiles_once_per_shape_plus_one():
    _, step = _step(shared=True)
    rng = np.random.default_rng(1)
    counts = []
    for rows, length in [(4, 8), (4, 8), (2, 16), (4, 8), (2, 16)]:
        step(_batch(rng, rows, length, repeat_tokens=True))
        counts.append(step.compilations())
    assert counts == [2, 2, 3, 3, 3]  # shape 1 + the update; shape 2; nothing per batch
