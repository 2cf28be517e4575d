"""Data pipeline: text sources -> byte-level BPE -> length-bucketed, deterministic batches.

``prepare(cfg.data, seed)`` returns a ``Corpus``; every user-fixable problem raises ``DataError``
with a one-line message.
"""

from .corpus import Corpus, prepare
from .sources import DataError

__all__ = ["Corpus", "DataError", "prepare"]
