"""Keras 3 models: the norm registry (and norms from outside the lab: ``plugin``), the Transformer
block and the causal LM."""

from trainer.models.block import Block, FeedForward, model_config
from trainer.models.lm import CausalLM, build_model
from trainer.models.norms import BATCH_NORMS, NORMS, make_norm
from trainer.models.plugin import use_run_norm

__all__ = ["BATCH_NORMS", "NORMS", "Block", "CausalLM", "FeedForward", "build_model", "make_norm",
           "model_config", "use_run_norm"]
