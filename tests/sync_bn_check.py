"""Helper for tests/test_norms.py: batch-norm statistics under MirroredStrategy on 2 CPUs.

Run as a script in a fresh process (logical devices must be configured before TensorFlow
initializes them). Prints one JSON line of max |difference| figures; the test asserts on them.
Replica i gets sequences [2i, 2i+2) of a (4, 6, 8) batch whose pads hold large values, so any
statistic that counts a pad, or only sees one replica, is visibly off.
"""

import json

import trainer

tf = trainer.import_tensorflow_quietly()
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from trainer.models.norms import make_norm  # noqa: E402

rng = np.random.default_rng(0)
x = (rng.normal(size=(4, 6, 8)) * np.arange(1, 5)[:, None, None] + np.arange(4)[:, None, None])
mask = np.ones((4, 6))
mask[1, 3:] = 0
mask[3, 2:] = 0
x = np.where(mask[..., None] > 0, x, 100.0).astype("float32")
mask = mask.astype("float32")

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    layers = {
        "sync_batch": make_norm("sync_batch", momentum=0.0),
        "masked_batch": make_norm("masked_batch", momentum=0.0),
        "batch": make_norm("batch", momentum=0.0),
        "keras_sync_masked": keras.layers.BatchNormalization(synchronized=True, momentum=0.0,
                                                             epsilon=1e-5),
        "keras_sync_unmasked": keras.layers.BatchNormalization(synchronized=True, momentum=0.0,
                                                               epsilon=1e-5),
    }
    for layer in layers.values():
        layer.build((None, 6, 8))


def shard(ctx):
    i = ctx.replica_id_in_sync_group
    return tf.constant(x[2 * i:2 * i + 2]), tf.constant(mask[2 * i:2 * i + 2])


@tf.function
def step(inputs):
    def replica_fn(xs, ms):
        return {
            "sync_batch": layers["sync_batch"](xs, padding_mask=ms, training=True),
            "masked_batch": layers["masked_batch"](xs, padding_mask=ms, training=True),
            "batch": layers["batch"](xs, padding_mask=ms, training=True),
            "keras_sync_masked": layers["keras_sync_masked"](xs, training=True, mask=ms > 0),
            "keras_sync_unmasked": layers["keras_sync_unmasked"](xs, training=True),
        }

    return strategy.run(replica_fn, args=inputs)


out = step(strategy.experimental_distribute_values_from_function(shard))
per_replica = {k: np.concatenate([t.numpy() for t in strategy.experimental_local_results(v)])
               for k, v in out.items()}

# Single-device references on the global batch (and on each half, for per-replica statistics).
def single(name, xs, ms, **kw):
    layer = make_norm(name, momentum=0.0)
    return np.asarray(layer(xs, padding_mask=ms, training=True, **kw))


global_masked = single("masked_batch", x, mask)
global_naive = single("batch", x, mask)
halves_masked = np.concatenate([single("masked_batch", x[i:i + 2], mask[i:i + 2]) for i in (0, 2)])
halves_naive = np.concatenate([single("batch", x[i:i + 2], mask[i:i + 2]) for i in (0, 2)])
real = mask > 0
w = mask[..., None].astype("float64")
np_mean = (x * w).sum((0, 1)) / w.sum()


def diff(a, b):
    return float(np.abs(a[real] - b[real]).max())


print(json.dumps({
    "replicas": strategy.num_replicas_in_sync,
    "sync_vs_global_masked": diff(per_replica["sync_batch"], global_masked),
    "sync_moving_mean_vs_numpy": float(np.abs(
        layers["sync_batch"].moving_mean.numpy() - np_mean).max()),
    "masked_vs_global_masked": diff(per_replica["masked_batch"], global_masked),
    "masked_vs_halves_masked": diff(per_replica["masked_batch"], halves_masked),
    "batch_vs_global_naive": diff(per_replica["batch"], global_naive),
    "batch_vs_halves_naive": diff(per_replica["batch"], halves_naive),
    "keras_sync_masked_vs_global_masked": diff(per_replica["keras_sync_masked"], global_masked),
    "keras_sync_masked_vs_halves_masked": diff(per_replica["keras_sync_masked"], halves_masked),
    "keras_sync_unmasked_vs_global_naive": diff(per_replica["keras_sync_unmasked"], global_naive),
}))
