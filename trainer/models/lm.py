"""Decoder-only causal language model: embeddings -> N blocks -> (final norm) -> vocabulary head."""

from __future__ import annotations

import keras
from keras import ops
from omegaconf import OmegaConf

from trainer.choices import Norm, Placement
from trainer.models.block import Block, kernel_init, normal_init
from trainer.models.norms import BATCH_NORMS, make_norm


@keras.saving.register_keras_serializable(package="trainer")
class CausalLM(keras.Model):
    """Next-token predictor whose norm, placement and residual come from the config.

    ``call(tokens, padding_mask)`` with tokens (B, T) int and padding_mask (B, T) returns float32
    logits (B, T, vocab). Padding must be on the right: attention is causal only, so a real token
    never sees a later pad, but it would see an earlier (left) one. With ``return_hidden=True``
    it also returns, per block, the residual stream after the block and the output of the
    block's first norm — what the telemetry measures.
    """

    def __init__(self, vocab_size: int, max_len: int, num_layers: int = 4, dim: int = 128,
                 num_heads: int = 4, ffn_dim: int = 512, dropout: float = 0.0,
                 norm: str = "layer", placement: str = "pre", residual: str = "true",
                 norm_epsilon: float = 1e-5, bn_momentum: float = 0.99, dyt_alpha: float = 0.5,
                 head_bias: bool = True, init: str = "normal", norm_affine: bool = True,
                 **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.max_len, self.num_layers = vocab_size, max_len, num_layers
        self.block_args = dict(dim=dim, num_heads=num_heads, ffn_dim=ffn_dim, dropout=dropout,
                               norm=norm, placement=placement, residual=residual,
                               norm_epsilon=norm_epsilon, bn_momentum=bn_momentum,
                               dyt_alpha=dyt_alpha, init=init, num_layers=num_layers,
                               norm_affine=bool(norm_affine))
        self.token_embedding = keras.layers.Embedding(vocab_size, dim, embeddings_initializer=normal_init(),
                                                      name="token_embedding")
        self.position_embedding = keras.layers.Embedding(max_len, dim, embeddings_initializer=normal_init(),
                                                         name="position_embedding")
        self.embedding_dropout = keras.layers.Dropout(dropout)
        self.blocks = [Block(**self.block_args, name=f"block_{i}") for i in range(num_layers)]
        # Pre-norm leaves the residual stream un-normalized: a final norm precedes the head.
        self.final_norm = make_norm(norm if placement == Placement.pre else Norm.none,
                                    epsilon=norm_epsilon, momentum=bn_momentum,
                                    dyt_alpha=dyt_alpha, affine=bool(norm_affine),
                                    name_prefix="final_norm")
        self.head_bias = head_bias
        self.head = keras.layers.Dense(vocab_size, use_bias=head_bias,
                                       kernel_initializer=kernel_init(init, dim, vocab_size),
                                       dtype="float32", name="head")

    def build(self, input_shape):
        batch, length = input_shape[:2]
        dim = self.block_args["dim"]
        self.token_embedding.build(input_shape)
        self.position_embedding.build((length,))
        for block in self.blocks:
            block.build((batch, length, dim))
        self.final_norm.build((batch, length, dim))
        self.head.build((batch, length, dim))
        self.built = True

    def call(self, tokens, padding_mask=None, training=None, return_hidden=False):
        length = ops.shape(tokens)[1]
        x = self.token_embedding(tokens) + self.position_embedding(ops.arange(length))[None]
        x = self.embedding_dropout(x, training=training)  # (B, T, C)
        hidden = []
        for block in self.blocks:
            x, internals = block(x, padding_mask=padding_mask, training=training,
                                 return_internals=True)
            hidden.append({"stream": x, **internals})
        x = self.final_norm(x, padding_mask=padding_mask, training=training)
        logits = self.head(ops.cast(x, "float32"))  # (B, T, V), float32 for a stable softmax
        return (logits, hidden) if return_hidden else logits

    @property
    def mode_dependent(self) -> bool:
        """Whether ``training=True`` computes anything different from inference: batch-statistic
        norms or dropout. When not, one compiled eval program serves both modes."""
        return self.block_args["norm"] in BATCH_NORMS or self.block_args["dropout"] > 0

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "max_len": self.max_len,
                "head_bias": self.head_bias, **self.block_args}


def build_model(model_cfg, vocab_size: int, max_len: int) -> CausalLM:
    """Build (and create the variables of) the LM described by ``cfg.model``: each field of
    ``ModelConfig`` is the ``CausalLM`` keyword of the same name."""
    model = CausalLM(vocab_size=vocab_size, max_len=max_len, name="causal_lm",
                     **OmegaConf.to_container(model_cfg, resolve=True))
    model.build((None, max_len))
    return model
