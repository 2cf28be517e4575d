"""``runtime.strategy`` -> a ``tf.distribute.Strategy``."""

from __future__ import annotations

import os
from pathlib import Path

import tensorflow as tf

from trainer.config import ConfigError


def make_strategy(name: str) -> tf.distribute.Strategy:
    """auto: TPU if one is attached, several GPUs -> mirrored, else the default strategy."""
    if name == "auto":
        if _tpu_attached():
            name = "tpu"
        elif len(tf.config.list_logical_devices("GPU")) > 1:
            name = "mirrored"
        else:
            name = "default"
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":  # all GPUs; on a CPU-only host, all logical CPU devices
        gpus = tf.config.list_logical_devices("GPU")
        devices = gpus or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if name == "multi_worker":  # cluster layout from the TF_CONFIG environment variable
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = _tpu_resolver()
        if resolver is None:
            raise ConfigError("runtime.strategy=tpu but no TPU was found")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ConfigError(f"unknown runtime.strategy '{name}'")


def _tpu_attached() -> bool:
    # Asking TPUClusterResolver on a machine without a TPU queries the GCE metadata server
    # over the network; look for the signs of a TPU VM first.
    return bool(os.environ.get("TPU_NAME")) or Path("/dev/accel0").exists() or Path("/dev/vfio/0").exists()


def _tpu_resolver():
    try:
        return tf.distribute.cluster_resolver.TPUClusterResolver()
    except (ValueError, RuntimeError, tf.errors.NotFoundError):
        return None
