"""AdamW on a warm-up + cosine schedule, and the rule for which variables weight decay shrinks.

The rule (``decays``): a weight matrix decays, everything else does not. Concretely a trainable
variable decays when it has rank >= 2 and is neither an embedding table nor a bias:

- decays: every ``kernel`` (Dense and EinsumDense: attention q/k/v/output, FFN, output head);
- does not: the token and position embeddings (rank 2, excluded as the reference runs were
  made), biases (the attention's per-head q/k/v biases are rank 2 too), norm gains and shifts
  (γ, β, RMS scale), DyT's α and the ReZero gates (rank 0).

Decaying γ/β would pull every norm toward zero gain and confound each norm comparison, so the
rule is tested over every norm in the registry (``tests/test_train.py``).
"""

from __future__ import annotations

import math

import keras

NOT_DECAYED = ("embeddings", "bias")  # rank >= 2 variables that keep their size


def decays(variable) -> bool:
    """Whether weight decay applies to ``variable`` (the rule in the module docstring)."""
    return len(variable.shape) >= 2 and variable.name not in NOT_DECAYED


def decay_groups(variables) -> dict:
    """Tensors and parameters that decay and that do not, e.g. for meta.json."""
    groups = {"decayed": {"tensors": 0, "params": 0}, "not_decayed": {"tensors": 0, "params": 0}}
    for v in variables:
        group = groups["decayed" if decays(v) else "not_decayed"]
        group["tensors"] += 1
        group["params"] += math.prod(v.shape)
    return groups


class AdamW(keras.optimizers.AdamW):
    """Keras' AdamW that applies weight decay by ``decays`` to the variables it is built on."""

    def build(self, var_list):
        self.exclude_from_weight_decay(var_list=[v for v in var_list if not decays(v)])
        super().build(var_list)


def make_schedule(train_cfg) -> keras.optimizers.schedules.LearningRateSchedule:
    """Linear warm-up from 0 to ``lr``, then cosine decay to ``lr * min_lr_ratio`` (or constant)."""
    t = train_cfg
    alpha = t.min_lr_ratio if t.decay == "cosine" else 1.0
    if t.warmup_steps:
        return keras.optimizers.schedules.CosineDecay(
            0.0, decay_steps=max(t.steps - t.warmup_steps, 1), alpha=alpha,
            warmup_target=t.lr, warmup_steps=t.warmup_steps)
    return keras.optimizers.schedules.CosineDecay(t.lr, decay_steps=t.steps, alpha=alpha)


def make_optimizer(train_cfg) -> AdamW:
    """AdamW on the schedule; weight decay ``train.weight_decay`` on the variables ``decays``."""
    return AdamW(learning_rate=make_schedule(train_cfg), weight_decay=train_cfg.weight_decay,
                 beta_1=0.9, beta_2=0.95, epsilon=1e-8)
