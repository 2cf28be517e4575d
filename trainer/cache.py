"""The lab's one cache root and what lives under it.

The root is ``data.cache_dir`` when the config sets it, else ``$NORMLAB_CACHE``, else
``~/.cache/normlab``::

    ROOT/embedded-*/   the embedded corpus as a datasets.DatasetDict (trainer.data.sources)
    ROOT/hf/           Arrow files of data.source=files (datasets' own cache)
    ROOT/tokenizers/   trained BPE tokenizers (trainer.data.tokenizer)
    ROOT/tokens/       encoded splits
    ROOT/baselines/    unigram/bigram losses per data (trainer.results.baselines)
    ROOT/xla/          compiled XLA programs, one store per machine (trainer.compile_cache)
    ROOT/evaluate-norm/ the reference baseline reproduced per code version (trainer.evaluate)

Everything under it can be deleted at any time: it is rebuilt on demand.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "NORMLAB_CACHE"
DEFAULT = "~/.cache/normlab"
HF = "hf"
TOKENIZERS = "tokenizers"
TOKENS = "tokens"
BASELINES = "baselines"
XLA = "xla"


def root(cache_dir: str | os.PathLike | None = None, create: bool = True) -> Path:
    """The cache root for a config's ``data.cache_dir`` (None: ``$NORMLAB_CACHE``, else
    ``~/.cache/normlab``), created unless ``create`` is false."""
    path = Path(cache_dir or os.environ.get(ENV) or DEFAULT).expanduser()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path
