"""Tensor statistics computed inside the compiled step (pure functions, no summaries).

Per-block values are stacked into one vector of length num_layers so the step returns a fixed,
small dict; their keys hold a ``{block}`` field that the Python loop fills with ``block_{i}``.
"""

from __future__ import annotations

import tensorflow as tf


def block_grad_norms(grads, group_idx):
    """L2 norm of the gradients of each block's variables, stacked: (num_layers,)."""
    return tf.stack([tf.linalg.global_norm([grads[i] for i in idx]) for idx in group_idx])


def update_ratio(deltas, before):
    """||parameter update|| / ||parameters||: how far one step moves the weights, relatively."""
    return tf.linalg.global_norm(deltas) / (tf.linalg.global_norm(before) + 1e-12)


def token_moments(x, mask):
    """Per-token mean and std over features, and rms, each averaged over real tokens only."""
    x = tf.cast(x, tf.float32)
    w = tf.cast(mask, tf.float32)
    count = tf.maximum(tf.reduce_sum(w), 1.0)
    mean = tf.reduce_mean(x, axis=-1)  # (B, T): the token's value baseline
    std = tf.math.reduce_std(x, axis=-1)  # (B, T): the token's spread over features
    ms = tf.reduce_mean(tf.square(x), axis=-1)

    def avg(v):
        return tf.reduce_sum(v * w) / count

    return avg(mean), avg(std), tf.sqrt(avg(ms))


def stream_stats(hidden, mask):
    """Residual-stream statistics per block: after the block, and after its first norm."""
    out = {}
    for where, key in (("stream", "activation"), ("normed", "activation_normed")):
        rows = [token_moments(h[where], mask) for h in hidden]
        for j, stat in enumerate(("token_mean", "token_std", "rms")):
            out[f"{key}/{{block}}/{stat}"] = tf.stack([r[j] for r in rows])
    return out


def attention_instruments(hidden):
    """Each block's attention instruments, stacked (num_layers,): its largest pre-softmax logit
    and its mean attention entropy (``trainer.models.attention.attention_stats``)."""
    return {f"attention/{{block}}/{stat}": tf.stack([h["attention"][stat] for h in hidden])
            for stat in ("max_logit", "entropy")}


def log_z_stats(z, mask):
    """Mean and max over real tokens of log Z = logsumexp of each position's logits (B, T;
    ``trainer.train.step.masked_loss``): 0 when the logits are log-probabilities; its drift is
    PaLM's output-logit divergence, the z-loss's target. Telemetry: no gradient flows back."""
    z = tf.stop_gradient(z)
    w = tf.cast(mask, tf.float32)
    mean = tf.reduce_sum(z * w) / tf.maximum(tf.reduce_sum(w), 1.0)
    return {"output/log_z_mean": mean,
            "output/log_z_max": tf.reduce_max(tf.where(w > 0, z, tf.reduce_min(z)))}
