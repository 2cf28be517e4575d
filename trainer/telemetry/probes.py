"""Evaluation-time probes of the claims the lab exists to show.

- batch invariance: a fixed sequence's logits alone vs batched with others and extra padding
  (LayerNorm-like norms: 0; BatchNorm in training mode: > 0);
- token cosine per block: mean pairwise cosine of a sequence's token vectors (-> 1: rank collapse);
- rank-1 residual per block: ||X - 1 mean^T|| / ||X|| of a sequence's tokens (-> 0: rank collapse);
- BN statistic drift per block: |batch moments - running moments| of each block's first norm;
- DyT saturation at every DyT layer: share of real tokens' features of the layer's input with
  |alpha * x| > ``SATURATION_X`` (tanh's flat tails; alpha is the layer's current value) (F14):
  ``probe/dyt_saturation/block_i`` the block's first norm (its tag since F14), ``.../block_i/ffn``
  its second, ``probe/dyt_saturation/final`` the final norm (pre placement). The evaluation at
  step 0 gives the value at init; summary.json keeps each probe's last and maximum value.

Probes run eagerly on one small fixed batch (a few ms) so they add no compiled shapes, and any
training-mode call restores the running statistics it touched.
"""

from __future__ import annotations

import contextlib

import numpy as np
import tensorflow as tf

from trainer.models import BATCH_NORMS
from trainer.models.norms import DynamicTanh
from trainer.telemetry.definitions import SATURATION_X



class ProbeBatch:
    """A fixed probe: sequence ``alone`` (1, n) and the same sequence inside ``crowd`` (B, L)."""

    def __init__(self, eval_batches: list[dict], max_len: int, crowd_size: int = 8):
        rows = [(b["inputs"][r], int(b["mask"][r].sum())) for b in eval_batches
                for r in range(b["inputs"].shape[0]) if b["mask"][r].sum() >= 4]
        if not rows:
            raise ValueError("no validation sequence long enough for the probes")
        seq, n = rows[0]
        self.n = n = min(n, max(max_len // 2, 4))
        self.alone = {"inputs": seq[None, :n].astype(np.int32), "mask": np.ones((1, n), np.float32)}
        crowd = np.zeros((crowd_size, max_len), np.int32)
        mask = np.zeros((crowd_size, max_len), np.float32)
        crowd[0, :n], mask[0, :n] = seq[:n], 1.0  # row 0: the probe plus (max_len - n) pads
        for i, (other, m) in enumerate(rows[1:crowd_size], start=1):
            m = min(m, max_len)
            crowd[i, :m], mask[i, :m] = other[:m], 1.0
        self.crowd = {"inputs": crowd, "mask": mask}


@contextlib.contextmanager
def frozen_state(model):
    """Run training-mode calls without keeping their side effects on running statistics."""
    saved = [v.numpy() for v in model.non_trainable_variables]
    try:
        yield
    finally:
        for v, value in zip(model.non_trainable_variables, saved):
            v.assign(value)


def batch_invariance(model, probe: ProbeBatch, training: bool) -> float:
    """max |logits(alone) - logits(in the crowd)| over the probe's real positions."""
    with frozen_state(model):
        alone = model(probe.alone["inputs"], padding_mask=probe.alone["mask"], training=training)
        crowd = model(probe.crowd["inputs"], padding_mask=probe.crowd["mask"], training=training)
    return float(tf.reduce_max(tf.abs(alone[0] - crowd[0, :probe.n])))


def mean_pairwise_cosine(x, mask) -> float:
    """Mean cosine over pairs of distinct real tokens of the same sequence, averaged over rows."""
    x = np.asarray(x, np.float64)
    mask = np.asarray(mask, np.float64)
    unit = x / (np.linalg.norm(x, axis=-1, keepdims=True) + 1e-12) * mask[..., None]
    n = mask.sum(-1)
    total = np.square(np.linalg.norm(unit.sum(1), axis=-1))  # sum over all ordered pairs + n
    valid = n > 1
    return float(np.mean((total[valid] - n[valid]) / (n[valid] * (n[valid] - 1))))


def rank_collapse_residual(x, mask) -> float:
    """Distance of a sequence's token matrix X (n, C) to rank-1 collapse, averaged over rows:
    ||X - 1 mean(X)^T||_F / ||X||_F (Dong et al. 2021's res(X), relative, in Frobenius norm).

    0 when every token carries the same vector (collapse); ~1 when tokens spread around a zero
    mean. Centred, so unlike the pairwise cosine it does not read a shared offset as collapse,
    and it stays defined as activations shrink (an all-zero row counts as collapsed).
    """
    x = np.asarray(x, np.float64)
    mask = np.asarray(mask, np.float64)[..., None]
    n = mask.sum(1)  # (B, 1)
    valid = n[:, 0] > 1
    mean = (x * mask).sum(1) / np.maximum(n, 1)  # (B, C)
    resid = np.sqrt((np.square(x - mean[:, None]) * mask).sum((1, 2)))
    total = np.sqrt((np.square(x) * mask).sum((1, 2)))
    ratio = np.where(total > 1e-30, resid / np.maximum(total, 1e-30), 0.0)
    return float(np.mean(ratio[valid]))


def dyt_saturation(norm, x, mask) -> float:
    """Share of (real tokens x features) of ``x`` (B, T, C) that DyT layer ``norm`` maps into
    tanh's flat tails: |alpha * x| > ``SATURATION_X``, with alpha the layer's current value."""
    alpha = np.asarray(norm.alpha.numpy(), np.float64)  # scalar (or per feature)
    x = tf.cast(x, tf.float32).numpy().astype(np.float64)
    scaled = np.abs(alpha * x)[np.asarray(mask).astype(bool)]
    return float(np.mean(scaled > SATURATION_X)) if scaled.size else 0.0


def run_probes(model, probe: ProbeBatch) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """All probe scalars (eval/ tags) and per-block activation histograms."""
    scalars = {"probe/batch_invariance": batch_invariance(model, probe, training=True),
               "probe/batch_invariance_inference": batch_invariance(model, probe, training=False)}
    mask = probe.crowd["mask"]
    _, hidden = model(probe.crowd["inputs"], padding_mask=mask, training=False, return_hidden=True)
    real = mask.astype(bool)
    histograms = {}
    for i, (h, block) in enumerate(zip(hidden, model.blocks)):
        stream = h["stream"].numpy()
        scalars[f"probe/token_cosine/block_{i}"] = mean_pairwise_cosine(stream, mask)
        scalars[f"probe/rank1_residual/block_{i}"] = rank_collapse_residual(stream, mask)
        histograms[f"activation/block_{i}"] = stream[real]
        if block.config.norm in BATCH_NORMS:
            norm = block.attention_norm
            mean, var = norm.moments(h["norm_input"], mask)
            run_mean, run_var = norm.running_moments
            scalars[f"probe/bn_stat_drift/block_{i}"] = float(tf.reduce_mean(tf.abs(mean - run_mean)))
            scalars[f"probe/bn_var_drift/block_{i}"] = float(tf.reduce_mean(tf.abs(var - run_var)))
        if isinstance(block.attention_norm, DynamicTanh):
            scalars[f"probe/dyt_saturation/block_{i}"] = dyt_saturation(
                block.attention_norm, h["norm_input"], mask)
            scalars[f"probe/dyt_saturation/block_{i}/ffn"] = dyt_saturation(
                block.ffn_norm, h["ffn_norm_input"], mask)
    if isinstance(model.final_norm, DynamicTanh):  # its input: the last block's output
        scalars["probe/dyt_saturation/final"] = dyt_saturation(
            model.final_norm, hidden[-1]["stream"], mask)
    return scalars, histograms
