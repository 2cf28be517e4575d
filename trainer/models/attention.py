"""Causal self-attention that can also decode with a key/value cache.

Training and evaluation call keras' ``MultiHeadAttention`` unchanged. Decoding (as keras-hub's
``CachedMultiHeadAttention`` does) passes the keys and values of every position written so far;
only the new tokens are projected, their keys and values are written into the cache at their own
positions, and each attends to the cached positions up to its own: a new token costs one
position, through the same projection and attention code as training.
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="trainer")
class CachedAttention(keras.layers.MultiHeadAttention):
    """keras ``MultiHeadAttention`` plus a cached decoding path (``cache`` and ``positions``).

    Takes keras' own constructor arguments; weight names are keras' (``query``, ``key``,
    ``value``, ``attention_output``).
    """

    def call(self, query, value, cache=None, positions=None, training=None, **kwargs):
        """Without ``cache``: keras' ``MultiHeadAttention.call`` (``use_causal_mask`` etc.).

        With ``cache`` (B, 2, L, heads, head_dim), keys and values of positions 0..L-1, and
        ``positions`` (B, S) int, the absolute position of each row's S new tokens in ``query``
        (B, S, C): returns (output (B, S, C), the cache with the new keys/values written).
        Positions of a row must be distinct and < L; cached entries past a token's own position
        are never attended to, so what they hold does not matter.
        """
        if cache is None:
            return super().call(query, value, training=training, **kwargs)
        q = self._query_dense(query)  # (B, S, N, H)
        rows = ops.broadcast_to(ops.arange(ops.shape(positions)[0])[:, None], ops.shape(positions))
        index = ops.reshape(ops.stack([rows, positions], axis=-1), (-1, 2))  # (B*S, [row, pos])

        def write(stored, new):  # (B, L, N, H) <- (B, S, N, H) at each row's positions
            return ops.scatter_update(stored, index, ops.reshape(new, (-1, *new.shape[2:])))

        keys = write(cache[:, 0], self._key_dense(value))
        values = write(cache[:, 1], self._value_dense(value))
        length = ops.shape(cache)[2]
        visible = ops.arange(length)[None, None, :] <= positions[:, :, None]  # (B, S, L)
        out, _ = self._compute_attention(q, keys, values, attention_mask=visible,
                                         training=training)
        return self._output_dense(out), ops.stack([keys, values], axis=1)
