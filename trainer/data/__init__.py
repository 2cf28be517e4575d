"""Data pipeline: text sources -> byte-level BPE -> length-bucketed, deterministic batches.

``prepare(cfg.data, seed)`` returns a ``Corpus``; every user-fixable problem raises ``DataError``
with a one-line message.

Modules: ``sources`` (embedded / hub / files -> train/validation/test text), ``tokenizer``
(byte-level BPE, cached), ``batching`` (windows, length buckets, deterministic schedules; numpy),
``corpus`` (``prepare()``: all of it -> ``Corpus``), ``tfdata`` (the training batches as a
``tf.data.Dataset``: the package's only TensorFlow).
"""

from .corpus import Corpus, prepare
from .sources import DataError

__all__ = ["Corpus", "DataError", "prepare"]
