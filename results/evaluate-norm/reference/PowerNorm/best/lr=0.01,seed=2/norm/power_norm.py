"""PowerNorm: batch normalization reworked for Transformers.

Source: S. Shen, Z. Yao, A. Gholami, M. W. Mahoney, K. Keutzer, "PowerNorm: Rethinking Batch
Normalization in Transformers", ICML 2020 (arXiv:2003.07845), Algorithm 1; code:
github.com/sIncerass/powernorm (``MaskPowerNorm``, ``GroupScaling1D``). What it keeps from
their layer:

- *group scaling* first: each token divided by the root mean square of its features within
  each of ``scale_groups`` groups (their ``GroupScaling1D``, 4 groups by default);
- *relaxed zero-mean*: no mean is subtracted, only the quadratic mean ψ² = mean(x²) is used;
- *running statistics in the forward pass*: in training the layer normalises by the running
  ψ of the previous steps (not by the batch's), and updates it from the batch's real tokens
  (pads excluded, as their mask); during the first ``warmup_steps`` training calls it uses the
  batch's own quadratic mean, as their ``warmup_iters``;
- inference uses the running ψ, so the layer is the same function in both modes after warm-up.

Deviation: their backward pass adds an approximate gradient through the running statistics
(the Γ term of Algorithm 1); here ψ is a non-trainable variable and no gradient flows through
it. Their default warm-up is 4000 iterations of much longer runs; here 50 (the lab's warm-up).

Try it:  python -m trainer evaluate-norm examples/norms/power_norm.py:PowerNorm --budget checks
"""

import keras
from keras import ops


class PowerNorm(keras.layers.Layer):
    """y = γ ⊙ s(x) / sqrt(ψ² + ε) + β, s the per-token group scaling, ψ² the running quadratic
    mean over real tokens (batch statistics during warm-up)."""

    def __init__(self, epsilon: float = 1e-5, momentum: float = 0.99, affine: bool = True,
                 scale_groups: int = 4, warmup_steps: int = 50, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.epsilon, self.momentum, self.affine = epsilon, momentum, affine
        self.scale_groups, self.warmup_steps = scale_groups, warmup_steps

    def build(self, input_shape):
        dim = input_shape[-1]
        if self.affine:
            self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer="ones")
            self.beta = self.add_weight(name="beta", shape=(dim,), initializer="zeros")
        self.running_phi = self.add_weight(name="running_phi", shape=(dim,), initializer="ones",
                                           trainable=False, aggregation="mean")
        self.calls = self.add_weight(name="calls", shape=(), initializer="zeros",
                                     trainable=False, aggregation="mean")

    def _group_scale(self, x):
        b, t, c = ops.shape(x)[0], ops.shape(x)[1], x.shape[-1]
        g = ops.reshape(x, (b, t, self.scale_groups, c // self.scale_groups))
        g = g * ops.rsqrt(ops.mean(ops.square(g), axis=-1, keepdims=True) + self.epsilon)
        return ops.reshape(g, (b, t, c))

    def call(self, x, padding_mask=None, training=None):
        x = self._group_scale(ops.cast(x, "float32"))
        phi = self.running_phi
        if training and self.trainable:
            w = (ops.ones(ops.shape(x)[:2]) if padding_mask is None
                 else ops.cast(padding_mask, "float32"))[..., None]
            batch_phi = ops.sum(w * ops.square(x), axis=(0, 1)) / ops.maximum(ops.sum(w), 1.0)
            warm = ops.cast(self.calls < self.warmup_steps, "float32")
            phi = warm * batch_phi + (1.0 - warm) * self.running_phi
            m = self.momentum
            self.running_phi.assign(m * self.running_phi + (1 - m) * batch_phi)
            self.calls.assign(self.calls + 1.0)
        y = x * ops.rsqrt(phi + self.epsilon)
        return y * self.gamma + self.beta if self.affine else y

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "momentum": self.momentum,
                "affine": self.affine, "scale_groups": self.scale_groups,
                "warmup_steps": self.warmup_steps}
