"""The norm contract's properties, measured on one model: what ``evaluate-norm --budget checks``
reports for any norm, the lab's own included, and what a run with a norm from outside the lab
records at init (``trainer.train.rundir.norm_contract_checks``).

Each property is the largest |Δ logits| over the positions it concerns, and holds when that is
at most ``INVARIANT_MAX`` (float32 reassociation noise on logits of size ~10 is ~1e-6):

Inputs: 4 random sequences of 32 tokens (at most half the model's positions), 16 pads at most.

- ``causal``: logits at positions < t do not move when the tokens from t on change (inference
  mode; training mode reported beside it: batch statistics see the future);
- ``batch_invariant``: a sequence's logits alone vs batched with three others, in training mode
  and in inference mode separately;
- ``padding_invariant``: the same batch with extra padding (mask 0) after every sequence, real
  positions compared, in training mode and in inference mode;
- ``train_equals_inference``: training-mode vs inference-mode logits of one batch;
- ``decode_matches_forward``: the KV-cache decode, one token at a time, vs the full forward.

Training-mode calls never keep their updates of running statistics (``frozen_state``).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from trainer.telemetry.definitions import INVARIANT_MAX
from trainer.telemetry.probes import frozen_state

BATCH, LENGTH, EXTRA_PADS = 4, 32, 16  # sequences, tokens each (at most), pads added (at most)
PAD_ID, FIRST_ID = 0, 3  # token ids: [PAD]; the first id after the specials


def _logits(model, tokens, mask, training: bool) -> np.ndarray:
    with frozen_state(model):
        return np.asarray(model(tf.constant(tokens), padding_mask=tf.constant(mask),
                                training=training))


def _delta(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _entry(delta: float) -> dict:
    return {"holds": bool(delta <= INVARIANT_MAX), "max_abs_diff": delta}


def _two_modes(deltas: dict[str, float]) -> dict:
    modes = {mode: _entry(d) for mode, d in deltas.items()}
    return {**modes, "holds": all(m["holds"] for m in modes.values())}


def _decode(model, tokens: np.ndarray) -> np.ndarray:
    """Logits of ``tokens`` fed one position at a time through the KV cache (inference)."""
    cache = model.new_cache(tokens.shape[0])
    out = []
    for t in range(tokens.shape[1]):
        positions = tf.fill((tokens.shape[0], 1), t)
        logits, cache = model.decode_step(tf.constant(tokens[:, t:t + 1]), cache, positions)
        out.append(np.asarray(logits))
    return np.concatenate(out, axis=1)


def measure(model, seed: int = 0) -> dict:
    """Every property of ``model`` (module docstring), as ``{name: {...}}`` with ``holds`` and
    the measured ``max_abs_diff`` (per mode where there are two)."""
    rng = np.random.default_rng(seed)
    vocab = model.vocab_size
    length = min(LENGTH, model.max_len // 2)  # room for the pads within the positions it has
    cut, pads = length // 2, min(EXTRA_PADS, model.max_len - length)
    tokens = rng.integers(FIRST_ID, vocab, size=(BATCH, length)).astype("int32")
    mask = np.ones((BATCH, length), "float32")
    changed = tokens.copy()
    changed[:, cut:] = rng.integers(FIRST_ID, vocab, size=(BATCH, length - cut))
    padded = np.concatenate([tokens, np.full((BATCH, pads), PAD_ID, "int32")], axis=1)
    padded_mask = np.concatenate([mask, np.zeros((BATCH, pads), "float32")], axis=1)

    def causal(training):
        return _delta(_logits(model, tokens, mask, training)[:, :cut],
                      _logits(model, changed, mask, training)[:, :cut])

    def batch(training):
        return _delta(_logits(model, tokens[:1], mask[:1], training)[0],
                      _logits(model, tokens, mask, training)[0])

    def padding(training):
        return _delta(_logits(model, tokens, mask, training),
                      _logits(model, padded, padded_mask, training)[:, :length])

    out = {"causal": {**_entry(causal(False)), "training_mode": _entry(causal(True))},
           "batch_invariant": _two_modes({"training": batch(True), "inference": batch(False)}),
           "padding_invariant": _two_modes({"training": padding(True),
                                            "inference": padding(False)}),
           "train_equals_inference": _entry(_delta(_logits(model, tokens, mask, True),
                                                   _logits(model, tokens, mask, False))),
           "decode_matches_forward": _entry(_delta(_decode(model, tokens[:2, :cut]),
                                                   _logits(model, tokens[:2, :cut],
                                                           mask[:2, :cut], False)))}
    return out

