"""The training batches as a ``tf.data.Dataset``, for the training loop.

Apart from ``corpus`` so that the data package itself never imports TensorFlow: tables and
baselines (``trainer.results``) prepare a corpus without it.
"""

from __future__ import annotations


def train_dataset(corpus, seed: int | None = None, start_step: int = 0, steps: int | None = None):
    """``tf.data.Dataset`` yielding ``corpus.train_batch(step, seed)`` for step = start_step, ... .

    Infinite unless ``steps`` is given. Shapes are (None, None) in the signature; the actual
    batches only ever have the shapes in ``corpus.bucket_shapes()``.
    """
    import tensorflow as tf

    def gen():
        step = start_step
        while steps is None or step < start_step + steps:
            yield corpus.train_batch(step, seed)
            step += 1

    signature = {"inputs": tf.TensorSpec((None, None), tf.int32),
                 "targets": tf.TensorSpec((None, None), tf.int32),
                 "mask": tf.TensorSpec((None, None), tf.float32)}
    return tf.data.Dataset.from_generator(gen, output_signature=signature).prefetch(2)
