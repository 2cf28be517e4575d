"""``runtime.strategy`` -> a ``tf.distribute.Strategy``; ``runtime.mixed_precision`` -> the Keras
dtype policy a run computes under (``precision``, for the training loop and the bench alike)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import tensorflow as tf

from trainer.choices import ConfigError, Strategy


def make_strategy(name: str) -> tf.distribute.Strategy:
    """auto: TPU if one is attached, several GPUs -> mirrored, else the default strategy."""
    name = Strategy.parse(name, "runtime.strategy")
    if name == Strategy.auto:
        if _tpu_attached():
            name = Strategy.tpu
        elif len(tf.config.list_logical_devices("GPU")) > 1:
            name = Strategy.mirrored
        else:
            name = Strategy.default
    return STRATEGIES[name]()


def _mirrored() -> tf.distribute.Strategy:
    """All GPUs; on a CPU-only host, all logical CPU devices."""
    gpus = tf.config.list_logical_devices("GPU")
    devices = gpus or tf.config.list_logical_devices("CPU")
    return tf.distribute.MirroredStrategy([d.name for d in devices])


def _tpu() -> tf.distribute.Strategy:
    resolver = _tpu_resolver()
    if resolver is None:
        raise ConfigError("runtime.strategy=tpu but no TPU was found")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


# runtime.strategy -> builder; the keys are exactly trainer.choices.Strategy (auto resolves to
# one of the others in make_strategy). multi_worker reads the cluster from TF_CONFIG.
STRATEGIES = Strategy.require_keys({
    Strategy.auto: None, Strategy.default: tf.distribute.get_strategy,
    Strategy.mirrored: _mirrored, Strategy.tpu: _tpu,
    Strategy.multi_worker: tf.distribute.MultiWorkerMirroredStrategy}, "the strategies")


def _tpu_attached() -> bool:
    # Asking TPUClusterResolver on a machine without a TPU queries the GCE metadata server
    # over the network; look for the signs of a TPU VM first.
    return bool(os.environ.get("TPU_NAME")) or Path("/dev/accel0").exists() or Path("/dev/vfio/0").exists()


def _tpu_resolver():
    try:
        return tf.distribute.cluster_resolver.TPUClusterResolver()
    except (ValueError, RuntimeError, tf.errors.NotFoundError):
        return None


def compute_dtype(mixed_precision: bool) -> str:
    """The dtype the model computes in: bfloat16 under mixed precision, else float32."""
    return "bfloat16" if mixed_precision else "float32"


@contextlib.contextmanager
def precision(cfg):
    """Run the block under ``cfg``'s Keras dtype policy, the previous one restored after:
    ``mixed_bfloat16`` (bfloat16 compute, float32 variables; norms and the head stay float32,
    trainer.models) when ``runtime.mixed_precision``, else float32."""
    import keras

    mixed = bool(cfg.runtime.mixed_precision)
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if mixed else "float32")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
