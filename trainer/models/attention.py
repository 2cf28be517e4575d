"""Causal self-attention that can also decode with a key/value cache, normalise its queries and
keys (QK-norm), and report the two attention instruments.

Training and evaluation call keras' ``MultiHeadAttention`` unchanged unless QK-norm or the
instruments are asked for. Decoding (as keras-hub's ``CachedMultiHeadAttention`` does) passes the
keys and values of every position written so far; only the new tokens are projected, their keys
and values are written into the cache at their own positions, and each attends to the cached
positions up to its own: a new token costs one position, through the same projection and
attention code as training.

The instruments (``stats=True``), per call, over heads and real query tokens:

- ``max_logit``: the largest pre-softmax logit q.k/sqrt(d_h) over causal query-key pairs
  (attention-logit growth; Dehghani et al. 2023, Wortsman et al. 2023);
- ``entropy``: the mean entropy of the attention distributions, in nats (entropy collapse;
  Zhai et al. 2023). Read off the softmax the layer computes anyway: a row's log-normaliser is
  its largest logit minus the log of its largest probability, so no second exponential is taken.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from trainer.choices import QKNorm


def _qk_layer_norm(epsilon: float, name: str) -> keras.layers.Layer:
    # Dehghani et al.'s and Wortsman et al.'s qk-layernorm (flax LayerNorm, use_bias=False):
    # centred and scaled over the head dimension, one learnable gain shared by the heads.
    return keras.layers.LayerNormalization(epsilon=epsilon, center=False, dtype="float32",
                                           name=name)


def _qk_rms_norm(epsilon: float, name: str) -> keras.layers.Layer:
    return keras.layers.RMSNormalization(epsilon=epsilon, dtype="float32", name=name)


# What keras' TensorFlow attention puts at masked logits (keras' _get_large_negative). A number,
# not a tensor: a TF op run at import starts TF's thread pools, and a sweep worker's forked
# children would then deadlock in their first op (trainer/launch.py, tests/test_imports.py).
LARGE_NEGATIVE = 3.38953e38 * -0.7

# model.qk_norm -> the layer normalising (B, T, heads, head_dim) over head_dim; none: no layer.
QK_NORMS = QKNorm.require_keys({QKNorm.none: None, QKNorm.layer: _qk_layer_norm,
                                QKNorm.rms: _qk_rms_norm}, "QK_NORMS")


def attention_stats(logits, probs, query_mask):
    """The instruments of one attention call: ``{"max_logit", "entropy"}`` (float32 scalars).

    logits (B, N, T, S): scaled pre-softmax logits, masked positions already at a large
    negative value; probs (B, N, T, S): their softmax; query_mask (B, T): 1 = real query.
    """
    logits = ops.cast(ops.stop_gradient(logits), "float32")
    probs = ops.cast(ops.stop_gradient(probs), "float32")
    w = ops.cast(query_mask, "float32")[:, None, :]  # (B, 1, T)
    row_max = ops.max(logits, axis=-1)  # (B, N, T): over the visible keys (the rest is -1e9)
    log_z = row_max - ops.log(ops.max(probs, axis=-1))
    entropy = log_z - ops.sum(probs * ops.where(probs > 0, logits, 0.0), axis=-1)
    real = ops.broadcast_to(w, ops.shape(row_max)) > 0
    lowest = ops.min(row_max)
    count = ops.maximum(ops.sum(w) * ops.shape(row_max)[1], 1.0)
    return {"max_logit": ops.max(ops.where(real, row_max, lowest)),
            "entropy": ops.sum(entropy * w) / count}


def _fused_projections(denses, x) -> list:
    """The query, key and value ``EinsumDense`` layers ("abc,cde->abde", bias "de") of the same
    ``x`` (B, S, C), as ``Dense`` computes: one matmul by their kernels side by side (C, 3*N*H),
    plus their biases; split into (B, S, N, H) each. The same sums: on the CPU, XLA turns each
    einsum's small dot into an elementwise loop that recomputes the norm before it for every
    weight it reads, a third of a token-loop step at batch 1; a matmul followed by its bias is
    one matrix-vector kernel. (In a ``tf.while_loop`` XLA concatenates the kernels once, outside
    the loop: they do not change from step to step.)"""
    kernel = ops.concatenate([ops.reshape(d.kernel, (d.kernel.shape[0], -1)) for d in denses], 1)
    y = ops.matmul(x, ops.cast(kernel, x.dtype))
    if denses[0].bias is not None:
        y = ops.add(y, ops.cast(ops.concatenate([ops.reshape(d.bias, (-1,)) for d in denses]),
                                y.dtype))
    heads = tuple(denses[0].kernel.shape[1:])
    return [ops.reshape(part, (*ops.shape(x)[:-1], *heads)) for part in ops.split(y, 3, -1)]


@keras.saving.register_keras_serializable(package="trainer")
class CachedAttention(keras.layers.MultiHeadAttention):
    """keras ``MultiHeadAttention`` plus QK-norm, the instruments and a cached decoding path.

    Args:
        qk_norm: ``model.qk_norm`` (none, layer, rms).
        qk_epsilon: the QK-norm's epsilon.
        **kwargs: keras' own ``MultiHeadAttention`` arguments; weight names are keras'
            (``query``, ``key``, ``value``, ``attention_output``) plus ``query_norm`` and
            ``key_norm`` with QK-norm.
    """

    def __init__(self, *args, qk_norm: str = QKNorm.none, qk_epsilon: float = 1e-5, **kwargs):
        super().__init__(*args, **kwargs)
        self.qk_norm, self.qk_epsilon = QKNorm.parse(qk_norm, "model.qk_norm"), qk_epsilon
        make = QK_NORMS[self.qk_norm]
        self.query_norm = make(qk_epsilon, "query_norm") if make else None
        self.key_norm = make(qk_epsilon, "key_norm") if make else None

    def build(self, query_shape, value_shape, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        if self.query_norm is not None:
            heads = (None, None, self._num_heads, self._key_dim)
            self.query_norm.build(heads)
            self.key_norm.build(heads)

    def _normalize_qk(self, q, k):
        if self.query_norm is None:
            return q, k
        return (ops.cast(self.query_norm(q), q.dtype), ops.cast(self.key_norm(k), k.dtype))

    def call(self, query, value, cache=None, positions=None, training=None, stats=False,
             padding_mask=None, **kwargs):
        """Without ``cache``: keras' ``MultiHeadAttention.call`` (``use_causal_mask`` etc.);
        with QK-norm or ``stats`` the same causal attention, computed here.

        ``stats=True`` (causal self-attention only) returns (output, ``attention_stats``),
        real queries read from ``padding_mask`` (B, T) (None: all real).

        With ``cache`` (B, 2, L, heads, head_dim), keys and values of positions 0..L-1, and
        ``positions`` (B, S) int, the absolute position of each row's S new tokens in ``query``
        (B, S, C): returns (output (B, S, C), the cache with the new keys/values written).
        ``cache`` may also be a (keys, values) pair, (B, L, heads, head_dim) each: the updated
        pair is returned, nothing stacked (the compiled token loop carries its cache so).
        Positions of a row must be distinct and < L; cached entries past a token's own position
        are never attended to, so what they hold does not matter.
        """
        if cache is not None:
            return self._decode(query, value, cache, positions, training)
        if not stats and self.query_norm is None:
            return super().call(query, value, training=training, **kwargs)
        q, k = self._normalize_qk(self._query_dense(query), self._key_dense(value))
        v = self._value_dense(value)
        out, logits, probs = self._causal_attention(q, k, v, training)
        out = self._output_dense(out)
        if not stats:
            return out
        mask = ops.ones(ops.shape(query)[:2]) if padding_mask is None else padding_mask
        return out, attention_stats(logits, probs, mask)

    def _causal_attention(self, q, k, v, training):
        """Causal attention of projected q, k, v (B, T, N, H): (output (B, T, N, H), masked
        logits, probabilities). With dropout 0 these are the ops of keras' TensorFlow
        ``dot_product_attention`` (the path ``MultiHeadAttention.call`` takes), so the output is
        the same; with dropout, dropout on the probabilities as keras' explicit path does (which
        scales q before the product, so its last bits may differ)."""
        logits = tf.einsum("BTNH,BSNH->BNTS", q, k, optimize="optimal")
        logits = tf.multiply(tf.cast(logits, "float32"),
                             tf.cast(self._inverse_sqrt_key_dim, "float32"))
        length = tf.shape(logits)[-1]
        causal = tf.linalg.band_part(tf.ones((length, length), "bool"), -1, 0)[None, None]
        combined = tf.logical_and(tf.ones_like(logits, dtype="bool"), causal)
        logits = tf.where(combined, logits, tf.constant(LARGE_NEGATIVE, logits.dtype))
        probs = tf.cast(tf.nn.softmax(logits, axis=-1), v.dtype)
        dropped = self._dropout_layer(probs, training=training) if self._dropout > 0 else probs
        return tf.einsum("BNTS,BSNH->BTNH", dropped, v, optimize="optimal"), logits, probs

    def _decode(self, query, value, cache, positions, training):
        split = isinstance(cache, (tuple, list))  # the token loop's (keys, values) per layer
        if split and query is value:  # self-attention in the token loop: one matmul
            q, k, v = _fused_projections(
                (self._query_dense, self._key_dense, self._value_dense), query)
        else:  # (B, S, N, H) each
            q, k, v = self._query_dense(query), self._key_dense(value), self._value_dense(value)
        rows = ops.broadcast_to(ops.arange(ops.shape(positions)[0])[:, None], ops.shape(positions))
        index = ops.reshape(ops.stack([rows, positions], axis=-1), (-1, 2))  # (B*S, [row, pos])

        def write(stored, new):  # (B, L, N, H) <- (B, S, N, H) at each row's positions
            return ops.scatter_update(stored, index, ops.reshape(new, (-1, *new.shape[2:])))

        stored_keys, stored_values = cache if split else (cache[:, 0], cache[:, 1])
        q, new_keys = self._normalize_qk(q, k)
        keys = write(stored_keys, new_keys)
        values = write(stored_values, v)
        length = ops.shape(stored_keys)[1]
        visible = ops.arange(length)[None, None, :] <= positions[:, :, None]  # (B, S, L)
        out, _ = self._compute_attention(q, keys, values, attention_mask=visible,
                                         training=training)
        return self._output_dense(out), (keys, values) if split else ops.stack([keys, values], 1)

    def get_config(self):
        return {**super().get_config(), "qk_norm": str(self.qk_norm),
                "qk_epsilon": self.qk_epsilon}
