"""Keras 3 models: the norm registry, the Transformer block and the causal LM.

Modules: ``norms`` (the norm registry), ``plugin`` (norms from outside the lab: load, check against
the norm contract, keep with the run), ``attention`` (causal self-attention, with a key/value
cache for decoding), ``block`` (one Transformer block, ``model.init`` schemes), ``lm`` (the
causal LM), ``decode`` (cached decoding of several requests at once: continuous batching),
``decode_loop`` (the sampler, prefill, and the token loop compiled as one program)."""

from trainer.models.block import Block, FeedForward, model_config
from trainer.models.lm import CausalLM, build_model
from trainer.models.norms import BATCH_NORMS, NORMS, make_norm
from trainer.models.plugin import use_run_norm

__all__ = ["BATCH_NORMS", "NORMS", "Block", "CausalLM", "FeedForward", "build_model", "make_norm",
           "model_config", "use_run_norm"]
