"""Which variables weight decay shrinks (trainer/train/optimizer.py), over every registered norm.

If a norm's γ/β (or DyT's α, or a ReZero gate) were decayed, every norm comparison would be
confounded by a pull toward zero gain that the no-norm variant does not feel. The test applies
one AdamW step with zero gradients: Adam's update is then exactly 0, so a variable changes only
when weight decay applies to it, and then by the factor 1 - lr * weight_decay.
"""

from __future__ import annotations

import numpy as np
import pytest

from trainer.config import load_config
from trainer.models import build_model
from trainer.models.norms import NORMS
from trainer.train.optimizer import decay_groups, make_optimizer

LR, WD = 0.1, 0.5


def _decayed_after_one_step(cfg, model) -> set[str]:
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for v in model.trainable_variables:  # nonzero everywhere: decay would move any of them
        v.assign(rng.uniform(0.5, 1.5, v.shape).astype("float32"))
    before = {v.path: np.array(v) for v in model.trainable_variables}
    make_optimizer(cfg.train).apply_gradients(
        [(tf.zeros_like(v), v) for v in model.trainable_variables])
    changed = set()
    for v in model.trainable_variables:
        if not np.array_equal(np.array(v), before[v.path]):
            np.testing.assert_allclose(np.array(v), before[v.path] * (1 - LR * WD), rtol=1e-6)
            changed.add(v.path)
    return changed


@pytest.mark.parametrize("norm", sorted(str(n) for n in NORMS))
@pytest.mark.parametrize("placement,residual", [("pre", "rezero"), ("post", "true")])
def test_weight_decay_shrinks_the_weight_matrices_only(norm, placement, residual):
    cfg = load_config(None, [f"model.norm={norm}", f"model.placement={placement}",
                             f"model.residual={residual}", "model.num_layers=2", "model.dim=16",
                             "model.num_heads=2", "model.ffn_dim=32", f"train.lr={LR}",
                             f"train.weight_decay={WD}", "train.warmup_steps=0",
                             "train.decay=constant"])
    model = build_model(cfg.model, 64, 16)
    decayed = _decayed_after_one_step(cfg, model)

    paths = {v.path for v in model.trainable_variables}
    norm_layers = [layer for layer in model._flatten_layers()
                   if isinstance(layer, tuple(NORMS.values()))]
    in_norms = {v.path for layer in norm_layers for v in layer.trainable_variables}
    kernels = {p for p in paths if p.endswith("/kernel")}
    # attention q/k/v/output and the two FFN matrices per block, and the output head
    assert len(kernels) == 6 * 2 + 1
    assert decayed == kernels
    assert not in_norms & decayed
    if norm != "none":  # γ/β, RMS scale or DyT's α: the norms have parameters to protect
        assert in_norms
    gates = {p for p in paths if p.endswith("_gate")}
    assert len(gates) == (4 if residual == "rezero" else 0) and not gates & decayed
    biases = {p for p in paths if p.endswith("/bias")}
    assert biases and not biases & decayed  # attention's per-head biases are rank 2, kept
    # embeddings are not decayed (as the reference runs were made)
    assert {p for p in paths if p.endswith("/embeddings")}.isdisjoint(decayed)

    groups = decay_groups(model.trainable_variables)
    assert groups["decayed"]["tensors"] == len(kernels)
    assert groups["decayed"]["params"] == sum(
        int(np.prod(v.shape)) for v in model.trainable_variables if v.path in kernels)
    assert groups["decayed"]["params"] + groups["not_decayed"]["params"] == model.count_params() - \
        sum(int(np.prod(v.shape)) for v in model.non_trainable_variables)


def test_the_embedding_scalar_is_trained_but_not_decayed():
    """DyT's embedding scalar (``model.embed_scale``) is rank 0: the rule leaves it undecayed,
    as the ReZero gates and DyT's α, unlike the authors' LLaMA code, whose AdamW decays every
    parameter (weight_decay 0.1): a decayed scalar would pull the stream back to std 0.03."""
    cfg = load_config(None, ["model.norm=dyt", "model.embed_scale=35.36", "model.num_layers=1",
                             "model.dim=16", "model.num_heads=2", "model.ffn_dim=32",
                             f"train.lr={LR}", f"train.weight_decay={WD}", "train.warmup_steps=0",
                             "train.decay=constant"])
    model = build_model(cfg.model, 64, 16)
    scale = [v.path for v in model.trainable_variables if v.path.endswith("/embed_scale")]
    assert len(scale) == 1
    decayed = _decayed_after_one_step(cfg, model)
    assert decayed == {v.path for v in model.trainable_variables if v.path.endswith("/kernel")}
    assert scale[0] not in decayed
    assert decay_groups(model.trainable_variables)["not_decayed"]["tensors"] == \
        len(model.trainable_variables) - len(decayed)
