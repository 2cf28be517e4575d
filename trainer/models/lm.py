"""Decoder-only causal language model: embeddings -> N blocks -> (final norm) -> vocabulary head."""

from __future__ import annotations

import keras
from keras import ops

from trainer.choices import Norm
from trainer.models.block import (FINAL_NORM, Block, config_dict, dyt_alpha, kernel_init,
                                  model_config, normal_init)
from trainer.models.norms import BATCH_NORMS, NORMS, make_norm


# Why a cached decode refuses training mode (batch statistics, dropout).
DECODE_NEEDS_INFERENCE = (
    "decoding runs in inference mode only: with batch statistics (training-mode BatchNorm) a "
    "request's output would depend on the other requests in the batch and on positions not yet "
    "generated, so batch norms decode with their running statistics")


@keras.saving.register_keras_serializable(package="trainer")
class CausalLM(keras.Model):
    """Next-token predictor whose norm, placement and residual come from the config.

    ``call(tokens, padding_mask)`` with tokens (B, T) int and padding_mask (B, T) returns float32
    logits (B, T, vocab). Padding must be on the right: attention is causal only, so a real token
    never sees a later pad, but it would see an earlier (left) one. With ``return_hidden=True``
    it also returns, per block, the residual stream after the block, the input and output of
    the block's first norm, the input of its FFN sublayer's first norm and the attention
    instruments (largest logit, entropy) — what the telemetry measures.

    With ``model.embed_scale`` set, a learnable scalar (``embed_scale``, rank 0, so never
    weight-decayed) multiplies the input embeddings, token + position, before the first block:
    DyT's LLaMA code scales its token embedding so, and has no position embedding to add.
    """

    def __init__(self, config, vocab_size: int, max_len: int, **kwargs):
        """Args:
            config: the model config (``cfg.model``, a ``ModelConfig`` or its dict; see
                ``model_config``): norm, placement, residual, sizes, init, ``head_bias``,
                ``embed_scale``, ``dyt_alpha_final``.
            vocab_size: tokens the embedding and the head cover.
            max_len: positions the position embedding covers (the longest sequence).
            **kwargs: keras ``Model`` arguments (``name``).
        """
        super().__init__(**kwargs)
        self.config = c = model_config(config)
        self.vocab_size, self.max_len = vocab_size, max_len
        self.token_embedding = keras.layers.Embedding(vocab_size, c.dim, embeddings_initializer=normal_init(),
                                                      name="token_embedding")
        self.position_embedding = keras.layers.Embedding(max_len, c.dim, embeddings_initializer=normal_init(),
                                                         name="position_embedding")
        self.embedding_dropout = keras.layers.Dropout(c.dropout)
        self.blocks = [Block(c, name=f"block_{i}") for i in range(c.num_layers)]
        # Pre, peri and output norms leave the residual stream un-normalized: a final norm
        # precedes the head (Peri-LN's, Gemma 2's and OLMo 2's code have one too).
        self.final_norm = make_norm(c.norm if c.placement in FINAL_NORM else Norm.none,
                                    epsilon=c.norm_epsilon, momentum=c.bn_momentum,
                                    dyt_alpha=dyt_alpha(c, "final"), affine=bool(c.norm_affine),
                                    name_prefix="final_norm")
        self.head = keras.layers.Dense(vocab_size, use_bias=c.head_bias,
                                       kernel_initializer=kernel_init(c.init, c.dim, vocab_size),
                                       dtype="float32", name="head")

    def build(self, input_shape):
        batch, length = input_shape[:2]
        dim = self.config.dim
        self.token_embedding.build(input_shape)
        self.position_embedding.build((length,))
        if self.config.embed_scale is not None:
            self.embed_scale = self.add_weight(
                name="embed_scale", shape=(),
                initializer=keras.initializers.Constant(self.config.embed_scale))
        for block in self.blocks:
            block.build((batch, length, dim))
        self.final_norm.build((batch, length, dim))
        self.head.build((batch, length, dim))
        self.built = True

    def call(self, tokens, padding_mask=None, training=None, return_hidden=False, cache=None,
             positions=None):
        """Logits (B, T, V) of ``tokens`` (B, T); see the class docstring.

        Decoding: with ``cache`` (B, num_layers, 2, max_len, heads, head_dim; ``new_cache``)
        holding the keys/values of earlier positions and ``positions`` (B, T) the absolute
        position of each new token, only the new tokens are computed and (logits, updated
        cache) is returned. Decoding runs in inference mode only (``DECODE_NEEDS_INFERENCE``).
        ``cache`` may also be a list of per-layer (keys, values) pairs, (B, max_len or fewer
        positions, heads, head_dim) each, updated and returned as such (``decode_loop``'s token
        loop: each step then writes its layer's pair, with no restacking of the whole cache).
        """
        if cache is not None:
            if training:
                raise ValueError(DECODE_NEEDS_INFERENCE)
            return self.decode_step(tokens, cache, positions)
        x = self._embed(tokens, ops.arange(ops.shape(tokens)[1])[None])
        x = self.embedding_dropout(x, training=training)  # (B, T, C)
        hidden = []
        for block in self.blocks:
            x = block(x, padding_mask=padding_mask, training=training,
                      return_internals=return_hidden)
            if return_hidden:
                x, internals = x
                hidden.append({"stream": x, **internals})
        x = self.final_norm(x, padding_mask=padding_mask, training=training)
        logits = self.head(ops.cast(x, "float32"))  # (B, T, V), float32 for a stable softmax
        return (logits, hidden) if return_hidden else logits

    def decode_step(self, tokens, cache, positions, training=False):
        """The cached decoding of ``call``: (logits, updated cache). ``call`` refuses training
        mode (``DECODE_NEEDS_INFERENCE``); ``training=True`` is for ``analyze decode`` alone,
        which measures what serving with batch statistics costs: every norm then uses the
        statistics of the tokens fed (with dropout 0 nothing else changes), and undoing the
        running-statistics updates is the caller's job (``telemetry.probes.frozen_state``)."""
        x = self._embed(tokens, positions)  # (B, T, C)
        layered = isinstance(cache, (tuple, list))  # per-layer (keys, values): nothing stacked
        kv = []
        for i, block in enumerate(self.blocks):
            layer = cache[i] if layered else cache[:, i]
            x, block_kv = block(x, training=training, cache=(layer, positions))
            kv.append(block_kv)
        x = self.final_norm(x, training=training)
        return self.head(ops.cast(x, "float32")), kv if layered else ops.stack(kv, axis=1)

    def _embed(self, tokens, positions):
        """The residual stream's input (B, T, C): token + position embeddings (positions (B or
        1, T)), times the learnable ``embed_scale`` when the config has one."""
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        return x if self.config.embed_scale is None else x * self.embed_scale

    def new_cache(self, batch_size: int):
        """An empty key/value cache for ``batch_size`` rows: (B, num_layers, 2, max_len, heads,
        head_dim) zeros in the compute dtype."""
        c = self.config
        return ops.zeros((batch_size, c.num_layers, 2, self.max_len, c.num_heads,
                          c.dim // c.num_heads), dtype=self.compute_dtype)

    @property
    def mode_dependent(self) -> bool:
        """Whether ``training=True`` may compute anything different from inference: batch-statistic
        norms, a norm from outside the lab (it may use batch statistics), or dropout. When not,
        one compiled eval program serves both modes."""
        return (self.config.norm in BATCH_NORMS or self.config.norm not in NORMS
                or self.config.dropout > 0)

    def get_config(self):
        return {**super().get_config(), "config": config_dict(self.config),
                "vocab_size": self.vocab_size, "max_len": self.max_len}


def build_model(model_cfg, vocab_size: int, max_len: int) -> CausalLM:
    """Build (and create the variables of) the LM described by ``cfg.model``."""
    model = CausalLM(model_cfg, vocab_size, max_len, name="causal_lm")
    model.build((None, max_len))
    return model
