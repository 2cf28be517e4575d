"""One Transformer block, written as the equations in README.md ("The variants").

Each placement is one function of a sublayer F (attention, then the FFN), in ``PLACEMENTS``:

    pre   : h = x + F(N(x))                  post  : h = N(x + F(x))
    peri  : h = x + N_out(F(N_in(x)))        output: h = x + N(F(x))

residual=false drops the ``x +`` (no add op in the graph); rezero (not post) gives
x + a * (.), a learnable scalar per sublayer, 0 at init; deepnorm (post only) gives
N(alpha * x + F(x)) with alpha = (2L)^(1/4), and scales the initial value, attention-output and
FFN weights by beta = (8L)^(-1/4) (DeepNet's decoder-only constants, L blocks).
"""

from __future__ import annotations

import dataclasses

import keras
from keras import ops
from omegaconf import OmegaConf

from trainer.choices import Choice, ConfigError, Init, Placement, Residual
from trainer.config import (CHOICES, ModelConfig, check_dyt_alphas, check_norm,
                            check_residual)
from trainer.models.attention import CachedAttention
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


def model_config(config=None, **overrides) -> ModelConfig:
    """``config`` as a typed ``ModelConfig``, what ``Block`` and ``CausalLM`` hold.

    ``config``: ``cfg.model`` (an OmegaConf node), a ``ModelConfig``, a plain dict (a saved Keras
    config) or None (the schema defaults); ``overrides``: fields to replace. Every name field is
    parsed into its ``Choice`` (a typo fails naming the field and the valid values), ``norm``
    checked to be a lab norm or a norm from outside the lab (``config.check_norm``), and the
    placement/residual rule is checked, also for models built without a loaded config.
    """
    if config is None:
        values = {}
    elif isinstance(config, ModelConfig):
        values = dataclasses.asdict(config)
    elif OmegaConf.is_config(config):
        values = OmegaConf.to_container(config, resolve=True)
    else:
        values = dict(config)
    values.update(overrides)
    valid = [f.name for f in dataclasses.fields(ModelConfig)]
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise ConfigError(f"unknown model config key '{unknown[0]}'; valid: {', '.join(valid)}")
    for key, kind in CHOICES.items():
        section, _, leaf = key.partition(".")
        if section == "model" and leaf in values:
            values[leaf] = kind.parse(values[leaf], leaf)
    if "norm" in values:
        values["norm"] = check_norm(values["norm"])
    typed = ModelConfig(**values)
    check_residual(typed.placement, typed.residual, typed.norm)
    check_dyt_alphas(typed)
    return typed


def dyt_alpha(config: ModelConfig, location: str) -> float:
    """DyT's initial alpha at ``location`` (``attention``, ``ffn`` or ``final``): the
    location's own key ``model.dyt_alpha_<location>``, else ``model.dyt_alpha``."""
    value = getattr(config, f"dyt_alpha_{location}")
    return config.dyt_alpha if value is None else value


def config_dict(config: ModelConfig) -> dict:
    """A ``ModelConfig`` as plain Python values (a Choice as its string): what ``get_config``
    stores, so a ``.keras`` file holds no enum."""
    return {k: v.value if isinstance(v, Choice) else v for k, v in dataclasses.asdict(config).items()}


def deepnorm_constants(num_layers: int) -> tuple[float, float]:
    """DeepNet's (alpha, beta) for a decoder-only model of ``num_layers`` blocks (Wang et al.
    2022, Table 1): the residual's weight alpha = (2L)^(1/4) and the init gain beta = (8L)^(-1/4)."""
    return (2 * num_layers) ** 0.25, (8 * num_layers) ** -0.25


def _pre(block, x, branch, norms, gate, mask, training):
    """h = x + F(N(x))"""
    normed = block.normalize(norms[0], x, mask, training)
    return block.add(x, branch(normed), gate), x, normed


def _post(block, x, branch, norms, gate, mask, training):
    """h = N(x + F(x))  (deepnorm: N(alpha * x + F(x)))"""
    summed = block.add(x, branch(x), gate)
    h = block.normalize(norms[0], summed, mask, training)
    return h, summed, h


def _peri(block, x, branch, norms, gate, mask, training):
    """h = x + N_out(F(N_in(x)))"""
    normed = block.normalize(norms[0], x, mask, training)
    return block.add(x, block.normalize(norms[1], branch(normed), mask, training), gate), x, normed


def _output(block, x, branch, norms, gate, mask, training):
    """h = x + N(F(x))"""
    fx = branch(x)
    normed = block.normalize(norms[0], fx, mask, training)
    return block.add(x, normed, gate), fx, normed


# model.placement -> one sublayer's equation: (block, x, F, (N, N_out), gate, padding mask,
# training) -> (h, what the sublayer's first norm saw, what it gave).
PLACEMENTS = Placement.require_keys(
    {Placement.pre: _pre, Placement.post: _post, Placement.peri: _peri, Placement.output: _output},
    "PLACEMENTS")
FINAL_NORM = (Placement.pre, Placement.peri, Placement.output)  # placements with a final norm


@keras.saving.register_keras_serializable(package="trainer")
class Block(keras.layers.Layer):
    """Causal self-attention + FFN, each wrapped by norm and residual as the config says."""

    def __init__(self, config, **kwargs):
        """Args:
            config: the model config (``cfg.model``, a ``ModelConfig`` or its dict; see
                ``model_config``). The block reads ``norm``, ``placement``, ``residual``,
                ``qk_norm``, ``dim``, ``num_heads``, ``ffn_dim``, ``dropout``,
                ``norm_epsilon``, ``bn_momentum``, ``dyt_alpha`` (and ``dyt_alpha_attention`` /
                ``dyt_alpha_ffn``), ``norm_affine``, ``init`` and ``num_layers`` (the depth
                the ``scaled`` init and DeepNorm divide by).
            **kwargs: keras ``Layer`` arguments (``name``: ``block_{i}`` in ``CausalLM``).
        """
        super().__init__(**kwargs)
        self.config = c = model_config(config)
        norm_kw = dict(epsilon=c.norm_epsilon, momentum=c.bn_momentum, affine=bool(c.norm_affine))
        self.attention_norm = make_norm(c.norm, name_prefix="attention_norm",
                                        dyt_alpha=dyt_alpha(c, "attention"), **norm_kw)
        self.ffn_norm = make_norm(c.norm, name_prefix="ffn_norm", dyt_alpha=dyt_alpha(c, "ffn"),
                                  **norm_kw)
        self.out_norms = (None, None)
        if c.placement == Placement.peri:  # N_out of each sublayer, after N_in's
            self.out_norms = tuple(
                make_norm(c.norm, name_prefix=f"{where}_out_norm",
                          dyt_alpha=dyt_alpha(c, where), **norm_kw)
                for where in ("attention", "ffn"))
        # Q, K, V and the output projection are all d_model x d_model matrices (fans d, d).
        self.attention = CachedAttention(
            c.num_heads, c.dim // c.num_heads, dropout=c.dropout, qk_norm=c.qk_norm,
            qk_epsilon=c.norm_epsilon,
            kernel_initializer=kernel_init(c.init, c.dim, c.dim), name="attention")
        self.attention_dropout = keras.layers.Dropout(c.dropout)
        self.ffn = FeedForward(c.dim, c.ffn_dim, c.dropout, init=c.init, num_layers=c.num_layers,
                               name="ffn")
        self.deepnorm_alpha, self.deepnorm_beta = deepnorm_constants(c.num_layers)

    def build(self, input_shape):
        c = self.config
        self.attention_norm.build(input_shape)
        self.ffn_norm.build(input_shape)
        for norm in self.out_norms:
            if norm is not None:
                norm.build(input_shape)
        self.attention.build(input_shape, input_shape)
        if c.init == Init.scaled:
            # Keras' MultiHeadAttention takes one initializer for Q, K, V and the output; GPT-2
            # scales only the output projection, which writes into the residual stream.
            out = self.attention._output_dense.kernel
            out.assign(kernel_init(Init.scaled, c.dim, c.dim, output_proj=True,
                                   num_layers=c.num_layers)(out.shape))
        self.ffn.build(input_shape)
        if c.residual == Residual.deepnorm:
            # DeepNet: the value, attention-output and FFN weights start beta times smaller
            # (query and key keep gain 1); on top of model.init (xavier is the authors').
            for kernel in (self.attention._value_dense.kernel, self.attention._output_dense.kernel,
                           self.ffn.hidden.kernel, self.ffn.out.kernel):
                kernel.assign(kernel * self.deepnorm_beta)
        if c.residual == Residual.rezero:
            self.attention_gate = self.add_weight(name="attention_gate", shape=(),
                                                  initializer="zeros")
            self.ffn_gate = self.add_weight(name="ffn_gate", shape=(), initializer="zeros")

    def add(self, x, fx, gate):
        """The residual connection of one sublayer (``model.residual``)."""
        # The residual switch is structural: with residual=false no add op is built at all.
        if self.config.residual == Residual.false:
            return fx
        if self.config.residual == Residual.rezero:
            return x + gate * fx
        if self.config.residual == Residual.deepnorm:
            return self.deepnorm_alpha * x + fx
        return x + fx

    def normalize(self, norm, x, padding_mask, training):
        """``norm`` of ``x``: computed in float32, returned in the stream's compute dtype."""
        return ops.cast(norm(x, padding_mask=padding_mask, training=training), x.dtype)

    def call(self, x, padding_mask=None, training=None, return_internals=False, cache=None):
        """x: (B, T, C) residual stream; padding_mask: (B, T), 1 = real token.

        With ``return_internals`` also returns ``{"norm_input", "normed", "ffn_norm_input",
        "attention"}``: what the block's first norm saw and what it produced (telemetry and
        BN-drift probes read them), what its FFN sublayer's first norm saw (the DyT saturation
        probe), and the attention instruments (``attention.attention_stats``).
        With ``cache`` = (key/value cache (B, 2, L, heads, head_dim), positions (B, T)) it
        decodes: x holds only the new tokens, and the updated cache is returned beside the
        output (``CachedAttention``; the cache may also be a (keys, values) pair).
        """
        place = PLACEMENTS[self.config.placement]
        gates = (getattr(self, "attention_gate", None), getattr(self, "ffn_gate", None))
        found = {}

        def attend(h):
            if cache is not None:
                y, found["kv"] = self.attention(h, h, cache=cache[0], positions=cache[1],
                                                training=training)
            elif return_internals:
                y, found["attention"] = self.attention(h, h, stats=True, padding_mask=padding_mask,
                                                       training=training)
            else:
                y = self.attention(h, h, use_causal_mask=True, training=training)
            return self.attention_dropout(y, training=training)

        def feed_forward(h):
            return self.ffn(h, training=training)

        x, norm_input, normed = place(self, x, attend, (self.attention_norm, self.out_norms[0]),
                                      gates[0], padding_mask, training)
        x, ffn_norm_input, _ = place(self, x, feed_forward, (self.ffn_norm, self.out_norms[1]),
                                     gates[1], padding_mask, training)
        internals = {"norm_input": norm_input, "normed": normed,
                     "ffn_norm_input": ffn_norm_input, "attention": found.get("attention")}
        out = (x, internals) if return_internals else x
        return out if cache is None else (out, found["kv"])

    def get_config(self):
        return {**super().get_config(), "config": config_dict(self.config)}
