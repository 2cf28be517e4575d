"""One Transformer block, written as the equations in README.md ("The variants").

    pre : h = x + F(N(x))        post: h = N(x + F(x))
    residual=false drops the ``x +`` (no add op in the graph);
    rezero (pre only) gives x + a * F(.), a learnable scalar per sublayer, 0 at init.
"""

from __future__ import annotations

import keras
from keras import ops

from trainer.choices import Init, Placement, Residual
from trainer.config import check_residual
from trainer.models.norms import make_norm

NORMAL_STD = 0.02  # GPT-2's N(0, 0.02)


def normal_init(stddev: float = NORMAL_STD) -> keras.initializers.Initializer:
    """N(0, stddev). A new instance per layer: an initializer made once at import would
    carry one seed drawn before the run is seeded, identical for every layer that shares it."""
    return keras.initializers.RandomNormal(stddev=stddev)


def kernel_init(scheme: str, fan_in: int, fan_out: int, output_proj: bool = False,
                num_layers: int = 1) -> keras.initializers.Initializer:
    """The initializer of one weight matrix under ``model.init``:

    - ``normal``: N(0, 0.02) everywhere (GPT-2's base scale; the schema default);
    - ``xavier``: N(0, 2 / (fan_in + fan_out)) (Glorot), the init Xiong et al. (2020) analyse:
      each sublayer's output has the scale of its input, so in Post-LN the branch is as large as
      the stream and LN's Jacobian shrinks the gradient of every block below it;
    - ``scaled``: N(0, 0.02), with the output projections that write into the residual stream
      (attention output, FFN out) scaled by 1/sqrt(2L) (GPT-2), keeping the stream's variance
      bounded over depth.
    Fans are the matrix's logical fans (d_model, d_ffn, vocab), not Keras' per-axis guess for
    multi-head kernels.
    """
    scheme = Init.parse(scheme, "init")
    if scheme == Init.xavier:
        return normal_init((2.0 / (fan_in + fan_out)) ** 0.5)
    if scheme == Init.scaled and output_proj:
        return normal_init(NORMAL_STD / (2 * num_layers) ** 0.5)
    return normal_init()


@keras.saving.register_keras_serializable(package="trainer")
class FeedForward(keras.layers.Layer):
    """Position-wise MLP: Dense(ffn_dim, gelu) -> Dense(dim) -> dropout."""

    def __init__(self, dim: int, ffn_dim: int, dropout: float = 0.0, init: str = "normal",
                 num_layers: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.dim, self.ffn_dim, self.dropout = dim, ffn_dim, dropout
        self.init, self.num_layers = init, num_layers
        self.hidden = keras.layers.Dense(ffn_dim, activation="gelu", name="hidden",
                                         kernel_initializer=kernel_init(init, dim, ffn_dim))
        self.out = keras.layers.Dense(dim, name="out", kernel_initializer=kernel_init(
            init, ffn_dim, dim, output_proj=True, num_layers=num_layers))
        self.drop = keras.layers.Dropout(dropout)

    def build(self, input_shape):
        self.hidden.build(input_shape)
        self.out.build((*input_shape[:-1], self.ffn_dim))

    def call(self, x, training=None):
        return self.drop(self.out(self.hidden(x)), training=training)

    def get_config(self):
        return {**super().get_config(), "dim": self.dim, "ffn_dim": self.ffn_dim,
                "dropout": self.dropout, "init": self.init, "num_layers": self.num_layers}


@keras.saving.register_keras_serializable(package="trainer")
class Block(keras.layers.Layer):
    """Causal self-attention + FFN, each wrapped by norm and residual as configured."""

    def __init__(self, dim: int, num_heads: int, ffn_dim: int, dropout: float = 0.0,
                 norm: str = "layer", placement: str = "pre", residual: str = "true",
                 norm_epsilon: float = 1e-5, bn_momentum: float = 0.99, dyt_alpha: float = 0.5,
                 init: str = "normal", num_layers: int = 1, norm_affine: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.dim, self.num_heads, self.ffn_dim, self.dropout = dim, num_heads, ffn_dim, dropout
        self.init, self.num_layers, self.norm = Init.parse(init, "init"), num_layers, norm
        # call() branches on these: a typo must not silently select post-norm.
        self.placement = Placement.parse(placement, "placement")
        self.residual = Residual.parse(residual, "residual")
        check_residual(self.placement, self.residual)  # also for blocks built without a config
        self.norm_epsilon, self.bn_momentum, self.dyt_alpha = norm_epsilon, bn_momentum, dyt_alpha
        self.norm_affine = bool(norm_affine)
        norm_kw = dict(epsilon=norm_epsilon, momentum=bn_momentum, dyt_alpha=dyt_alpha,
                       affine=self.norm_affine)
        self.attention_norm = make_norm(norm, name_prefix="attention_norm", **norm_kw)
        self.ffn_norm = make_norm(norm, name_prefix="ffn_norm", **norm_kw)
        # Q, K, V and the output projection are all d_model x d_model matrices (fans d, d).
        self.attention = keras.layers.MultiHeadAttention(
            num_heads, dim // num_heads, dropout=dropout, kernel_initializer=kernel_init(init, dim, dim),
            name="attention")
        self.attention_dropout = keras.layers.Dropout(dropout)
        self.ffn = FeedForward(dim, ffn_dim, dropout, init=init, num_layers=num_layers, name="ffn")

    def build(self, input_shape):
        self.attention_norm.build(input_shape)
        self.ffn_norm.build(input_shape)
        self.attention.build(input_shape, input_shape)
        if self.init == Init.scaled:
            # Keras' MultiHeadAttention takes one initializer for Q, K, V and the output; GPT-2
            # scales only the output projection, which writes into the residual stream.
            out = self.attention._output_dense.kernel
            out.assign(kernel_init(Init.scaled, self.dim, self.dim, output_proj=True,
                                   num_layers=self.num_layers)(out.shape))
        self.ffn.build(input_shape)
        if self.residual == Residual.rezero:
            self.attention_gate = self.add_weight(name="attention_gate", shape=(),
                                                  initializer="zeros")
            self.ffn_gate = self.add_weight(name="ffn_gate", shape=(), initializer="zeros")

    def _attend(self, x, training):
        y = self.attention(x, x, use_causal_mask=True, training=training)
        return self.attention_dropout(y, training=training)

    def _add(self, x, fx, gate):
        # The residual switch is structural: with residual=false no add op is built at all.
        if self.residual == Residual.false:
            return fx
        if self.residual == Residual.rezero:
            return x + gate * fx
        return x + fx

    def _normalize(self, norm, x, padding_mask, training):
        # Norms compute in float32; the stream returns to the compute dtype (bf16 when mixed).
        return ops.cast(norm(x, padding_mask=padding_mask, training=training), x.dtype)

    def call(self, x, padding_mask=None, training=None, return_internals=False):
        """x: (B, T, C) residual stream; padding_mask: (B, T), 1 = real token.

        With ``return_internals`` also returns ``{"norm_input", "normed"}``: what the block's
        first norm saw and what it produced (telemetry and BN-drift probes read them).
        """
        gates = (getattr(self, "attention_gate", None), getattr(self, "ffn_gate", None))
        if self.placement == Placement.pre:
            norm_input = x
            normed = self._normalize(self.attention_norm, x, padding_mask, training)
            x = self._add(x, self._attend(normed, training), gates[0])
            h = self._normalize(self.ffn_norm, x, padding_mask, training)
            x = self._add(x, self.ffn(h, training=training), gates[1])
        else:
            x = norm_input = self._add(x, self._attend(x, training), gates[0])
            x = normed = self._normalize(self.attention_norm, x, padding_mask, training)
            x = self._add(x, self.ffn(x, training=training), gates[1])
            x = self._normalize(self.ffn_norm, x, padding_mask, training)
        if return_internals:
            return x, {"norm_input": norm_input, "normed": normed}
        return x

    def get_config(self):
        return {**super().get_config(), "dim": self.dim, "num_heads": self.num_heads,
                "ffn_dim": self.ffn_dim, "dropout": self.dropout, "norm": self.norm,
                "placement": self.placement, "residual": self.residual,
                "norm_epsilon": self.norm_epsilon, "bn_momentum": self.bn_momentum,
                "dyt_alpha": self.dyt_alpha, "init": self.init, "num_layers": self.num_layers,
                "norm_affine": self.norm_affine}
