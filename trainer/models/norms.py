"""The normalization registry: one name -> one Keras layer.

Every norm is called as ``norm(x, padding_mask=mask, training=training)`` with ``x`` (B, T, C)
and ``mask`` (B, T) float (1 = real token, 0 = pad). Token-wise norms ignore the mask because they
never look at other tokens; the batch norms differ exactly in what they do with it:

- ``batch``        statistics over batch x time, pads included (the naive choice)
- ``masked_batch`` statistics over real tokens only; running statistics updated from them only
- ``sync_batch``   ``masked_batch`` with the sums all-reduced across replicas (tf.distribute)

All norms compute in float32, whatever the compute dtype: statistics of bfloat16 activations lose
too many bits (the same reason TF Model Garden keeps LayerNorm in float32).

``affine=False`` (``model.norm_affine``) drops the learnable per-feature gain and bias (γ, β;
RMSNorm's scale) of every norm: LN then gives every token the same L2 norm sqrt(C). DyT keeps
its α; ``none`` has nothing to drop.

Each norm class declares what the tests expect of it, so that no test keeps its own table of
the norms: ``affine_weights``, the names of the weights ``affine=False`` drops, and ``lacks``,
the norm contract's verdicts (``evaluate-norm``'s properties, trainer/telemetry/contract.py,
as ``trainer.evaluate.report.flatten`` names them) that it does not have. A per-token norm
lacks none.
"""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from trainer.choices import Norm
from trainer.models import plugin
from trainer.norm_names import plugin_target

# model.norm -> layer class; its keys are exactly the rows of trainer.norm_names.NORM_TABLE
# (trainer.choices.Norm, checked at the end of this module), the vocabulary the config validates
# against without TensorFlow.
NORMS: dict[Norm, type[keras.layers.Layer]] = {}


def register(name: Norm):
    """Class decorator adding a norm layer to the registry under ``name``."""

    def wrap(cls):
        cls = keras.saving.register_keras_serializable(package="trainer")(cls)
        NORMS[Norm(name)] = cls
        return cls

    return wrap


def make_norm(name: str, *, epsilon: float = 1e-5, momentum: float = 0.99,
              dyt_alpha: float = 0.5, affine: bool = True,
              name_prefix: str = "norm") -> keras.layers.Layer:
    """Build the norm registered as ``name``, or the norm from outside the lab that ``name``
    specifies (``FILE.py:Class``, ``package.module:Class``: ``trainer.models.plugin``); an
    unknown name lists the valid ones."""
    if name not in NORMS:
        if plugin_target(name):
            return plugin.build(name, name_prefix, epsilon=epsilon, momentum=momentum,
                                affine=affine)
        raise KeyError(Norm.unknown(name, "norm"))
    cls = NORMS[name]
    kwargs = {"epsilon": epsilon, "momentum": momentum, "dyt_alpha": dyt_alpha}
    return cls(**{k: v for k, v in kwargs.items() if k in cls.accepts}, affine=affine,
               name=name_prefix)


class _Norm(keras.layers.Layer):
    """Base: float32 compute, (x, mask, training) call signature, config round trip;
    ``affine``: whether the norm has its learnable γ/β (every subclass honours it)."""

    accepts: tuple[str, ...] = ()
    affine_weights: tuple[str, ...] = ("gamma", "beta")  # what affine=False drops
    lacks: frozenset[str] = frozenset()  # the contract's verdicts it fails (module docstring)

    def __init__(self, affine: bool = True, **kwargs):
        kwargs.setdefault("dtype", "float32")  # norms keep float32 under mixed precision
        super().__init__(**kwargs)
        self.affine = bool(affine)

    def get_config(self):
        return {**super().get_config(), "affine": self.affine}


class _KerasTokenNorm(_Norm):
    """A per-token keras norm computed in float32; the mask is irrelevant to it."""

    accepts = ("epsilon",)
    keras_class: type[keras.layers.Layer]
    inner_name: str

    def __init__(self, epsilon: float = 1e-5, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.inner = self.make_inner()

    def make_inner(self) -> keras.layers.Layer:
        return self.keras_class(epsilon=self.epsilon, center=self.affine, scale=self.affine,
                                dtype="float32", name=self.inner_name)

    def build(self, input_shape):
        self.inner.build(input_shape)

    def call(self, x, padding_mask=None, training=None):
        return self.inner(ops.cast(x, "float32"))

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


# What a norm with batch statistics in training mode (running ones at inference) lacks: in
# training mode other sequences and later tokens enter every token's output, and the two modes
# differ; at inference it is per token like the others.
BATCH_STATISTICS = frozenset({"causal.training_mode", "batch_invariant.training",
                              "train_equals_inference"})


@register(Norm.layer)
class LayerNorm(_KerasTokenNorm):
    """LayerNorm: each token normalized over its own features (keras LayerNormalization).

    Two tokens (one sequence of length 2, 4 features) you can check by hand: a dominant feature
    is damped (mean 2.5, std 4.33: 10 -> 1.73), and a nearly constant token is re-expanded to
    unit spread (std 0.0071, so +/-0.01 -> +/-1.29; epsilon = 1e-5 adds to the variance 5e-5,
    which is why it is not 1.41). Each row uses only its own numbers:

    >>> import numpy as np
    >>> ln = make_norm("layer")
    >>> x = np.array([[[10.0, 0.0, 0.0, 0.0], [1.0, 1.01, 0.99, 1.0]]], "float32")
    >>> print(np.round(np.asarray(ln(x)), 3))
    [[[ 1.732 -0.577 -0.577 -0.577]
      [ 0.     1.291 -1.291  0.   ]]]
    """

    keras_class, inner_name = keras.layers.LayerNormalization, "ln"


@register(Norm.rms)
class RMSNorm(_KerasTokenNorm):
    """RMSNorm: x / rms(x) * gamma, per token, no centring (keras RMSNormalization)."""

    keras_class, inner_name = keras.layers.RMSNormalization, "rms"
    affine_weights = ("scale",)

    def make_inner(self):  # keras' RMSNormalization always has a scale: none without affine
        if self.affine:
            return self.keras_class(epsilon=self.epsilon, dtype="float32", name=self.inner_name)
        return None

    def build(self, input_shape):
        if self.inner is not None:
            self.inner.build(input_shape)

    def call(self, x, padding_mask=None, training=None):
        if self.inner is not None:
            return self.inner(ops.cast(x, "float32"))
        return ops.rms_normalization(ops.cast(x, "float32"), axis=-1, epsilon=self.epsilon)


@register(Norm.dyt)
class DynamicTanh(_Norm):
    """DyT (Zhu et al. 2025): gamma * tanh(alpha * x) + beta, alpha a learnable scalar."""

    accepts = ("dyt_alpha",)

    def __init__(self, dyt_alpha: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        self.dyt_alpha = dyt_alpha

    def build(self, input_shape):
        dim = input_shape[-1]
        self.alpha = self.add_weight(name="alpha", shape=(),
                                     initializer=keras.initializers.Constant(self.dyt_alpha))
        if self.affine:
            self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer="ones")
            self.beta = self.add_weight(name="beta", shape=(dim,), initializer="zeros")

    def call(self, x, padding_mask=None, training=None):
        y = ops.tanh(self.alpha * ops.cast(x, "float32"))
        return self.gamma * y + self.beta if self.affine else y

    def get_config(self):
        return {**super().get_config(), "dyt_alpha": self.dyt_alpha}


@register(Norm.none)
class Identity(_Norm):
    """No normalization: the residual stream is left as it is."""

    affine_weights = ()

    def call(self, x, padding_mask=None, training=None):
        return ops.cast(x, "float32")


@register(Norm.batch)
class BatchNorm(_Norm):
    """BatchNorm over batch x time with pads included in the statistics (the naive choice).

    Deliberately no mask: a pad token counts like a real one, which is what most code does when it
    drops ``BatchNormalization`` into a Transformer. The masked variants below are the fix.
    """

    accepts = ("epsilon", "momentum")
    lacks = BATCH_STATISTICS | {"padding_invariant.training"}  # pads enter the statistics

    def __init__(self, epsilon: float = 1e-5, momentum: float = 0.99, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.momentum = momentum
        self.inner = keras.layers.BatchNormalization(
            axis=-1, epsilon=epsilon, momentum=momentum, center=self.affine, scale=self.affine,
            dtype="float32", name="bn")

    def build(self, input_shape):
        self.inner.build(input_shape)

    def call(self, x, padding_mask=None, training=None):
        return self.inner(ops.cast(x, "float32"), training=training)

    def moments(self, x, mask=None):
        """The (mean, variance) this layer uses in training mode: over every token, pads too."""
        x = ops.cast(x, "float32")
        return ops.mean(x, axis=(0, 1)), ops.var(x, axis=(0, 1))

    @property
    def running_moments(self):
        return self.inner.moving_mean, self.inner.moving_variance

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "momentum": self.momentum}


@register(Norm.masked_batch)
class MaskedBatchNorm(_Norm):
    """BatchNorm whose statistics (and running-statistic updates) come from real tokens only.

    Written out rather than wrapping keras ``BatchNormalization(mask=...)``: keras attaches the
    mask to the output tensor, and it then silently turns into a key-padding mask inside the next
    ``MultiHeadAttention`` for this variant only, which would confound the ablation.
    """

    accepts = ("epsilon", "momentum")
    lacks = BATCH_STATISTICS
    synchronized = False

    def __init__(self, epsilon: float = 1e-5, momentum: float = 0.99, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon
        self.momentum = momentum

    def build(self, input_shape):
        dim = input_shape[-1]
        if self.affine:
            self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer="ones")
            self.beta = self.add_weight(name="beta", shape=(dim,), initializer="zeros")
        # "mean": under tf.distribute each replica assigns its own statistics; averaging them is
        # the least-wrong merge for masked_batch and exact for sync_batch (all replicas agree).
        self.moving_mean = self.add_weight(name="moving_mean", shape=(dim,), initializer="zeros",
                                           trainable=False, aggregation="mean")
        self.moving_variance = self.add_weight(name="moving_variance", shape=(dim,),
                                               initializer="ones", trainable=False,
                                               aggregation="mean")

    def _sum_over_replicas(self, value):
        if not self.synchronized:
            return value
        ctx = tf.distribute.get_replica_context()
        if ctx is None or ctx.num_replicas_in_sync == 1:
            return value
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)

    def moments(self, x, mask=None):
        """(mean, biased variance) over the real tokens (of every replica when synchronized).

        Two passes (mean first, then squared deviations) rather than E[x^2] - E[x]^2, which
        cancels catastrophically in float32 when the residual stream has a large mean.
        """
        x = ops.cast(x, "float32")
        w = ops.ones(ops.shape(x)[:2]) if mask is None else ops.cast(mask, "float32")
        w = w[..., None]  # (B, T, 1)
        sums = self._sum_over_replicas(
            ops.concatenate([ops.sum(w, axis=(0, 1)), ops.sum(w * x, axis=(0, 1))]))
        count = ops.maximum(sums[0], 1.0)
        mean = sums[1:] / count
        var = self._sum_over_replicas(ops.sum(w * ops.square(x - mean), axis=(0, 1))) / count
        return mean, var

    def call(self, x, padding_mask=None, training=None):
        x = ops.cast(x, "float32")
        if training and self.trainable:  # a frozen BN runs on its running statistics, as keras'
            mean, var = self.moments(x, padding_mask)
            m = self.momentum
            self.moving_mean.assign(m * self.moving_mean + (1 - m) * mean)
            self.moving_variance.assign(m * self.moving_variance + (1 - m) * var)
        else:
            mean, var = self.moving_mean, self.moving_variance
        y = (x - mean) * ops.rsqrt(var + self.epsilon)
        return y * self.gamma + self.beta if self.affine else y

    @property
    def running_moments(self):
        return self.moving_mean, self.moving_variance

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon, "momentum": self.momentum}


@register(Norm.sync_batch)
class SyncBatchNorm(MaskedBatchNorm):
    """``masked_batch`` whose sums are all-reduced across replicas: the global batch's moments.

    Keras 3's ``BatchNormalization(synchronized=True)`` skips the all-reduce on its masked path
    (each replica normalizes with its own statistics), so the sums are all-reduced here: count and
    sum(w*x), then sum(w*(x - mean)^2). On one device it is exactly ``masked_batch``.
    """

    synchronized = True


Norm.require_keys(NORMS, "the norm registry")
BATCH_NORMS = tuple(k for k, v in NORMS.items() if hasattr(v, "moments"))
