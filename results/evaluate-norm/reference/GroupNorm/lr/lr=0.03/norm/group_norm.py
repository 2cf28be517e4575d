"""Per-token GroupNorm: each token normalised over groups of its own features.

Source: Y. Wu and K. He, "Group Normalization", ECCV 2018 (arXiv:1803.08494), eq. 1-3 with the
set S_i of one token's features in one group. In a Transformer the natural reading is per token:
group g of token t is normalised by the mean and variance of its C/G features, then every
feature gets its own gain and bias. G = 1 is LayerNorm; G = C normalises each feature by itself.

The lab's norm contract: called as ``norm(x, padding_mask=..., training=...)`` with x (B, T, C),
float32 compute, ``get_config``. The statistics never look at another token, so the mask is not
needed. (Keras' own ``GroupNormalization(axis=-1)`` is *not* this: on (B, T, C) it pools each
group over time as well, so a later token changes an earlier one's output.)

Try it:  python -m trainer evaluate-norm examples/norms/group_norm.py:GroupNorm --budget checks
"""

import keras
from keras import ops


class GroupNorm(keras.layers.Layer):
    """y = γ·(x − mean_g) / sqrt(var_g + ε) + β, statistics per token over each group of
    ``groups`` contiguous feature groups (``C`` must divide by ``groups``)."""

    def __init__(self, groups: int = 8, epsilon: float = 1e-5, affine: bool = True, **kwargs):
        kwargs.setdefault("dtype", "float32")  # statistics in float32, as every lab norm
        super().__init__(**kwargs)
        self.groups, self.epsilon, self.affine = groups, epsilon, affine

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim % self.groups:
            raise ValueError(f"{dim} features do not split into {self.groups} groups")
        if self.affine:
            self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer="ones")
            self.beta = self.add_weight(name="beta", shape=(dim,), initializer="zeros")

    def call(self, x, padding_mask=None, training=None):
        x = ops.cast(x, "float32")
        b, t, c = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        g = ops.reshape(x, (b, t, self.groups, c // self.groups))  # (B, T, G, C/G)
        mean = ops.mean(g, axis=-1, keepdims=True)
        var = ops.mean(ops.square(g - mean), axis=-1, keepdims=True)  # two passes: no cancellation
        y = ops.reshape((g - mean) * ops.rsqrt(var + self.epsilon), (b, t, c))
        return y * self.gamma + self.beta if self.affine else y

    def get_config(self):
        return {**super().get_config(), "groups": self.groups, "epsilon": self.epsilon,
                "affine": self.affine}
