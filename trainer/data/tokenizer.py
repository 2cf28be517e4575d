"""Byte-level BPE tokenizer (HF ``tokenizers``), trained on the train split and cached as JSON.

Ids 0/1/2 are ``[PAD]``/``[BOS]``/``[EOS]``. No post-processor adds them: ``encode`` of a prompt
returns only its text tokens, and ``encode_batches`` wraps each training example itself.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from trainer import cache as cache_layout
from trainer.atomic import atomic_write

from .sources import DataError

SPECIALS = ("[PAD]", "[BOS]", "[EOS]")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
# Bump when training settings change: part of the tokenizer cache key.
TOKENIZER_VERSION = "bbpe-v1"
ENCODE_BATCH = 2048  # texts encoded at once


def tokenizer_hash(tok) -> str:
    """Short sha256 of the tokenizer's JSON: identifies the exact vocabulary and merges."""
    return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()[:16]


def train_tokenizer(texts, vocab_size: int):
    """Train a byte-level BPE of ``vocab_size`` tokens on ``texts`` (deterministic).

    ``texts``: a list of texts or an iterable of batches (lists) of texts, streamed.
    ``vocab_size`` is at least ``trainer.config.MIN_VOCAB`` (the config's validation checks it).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    # add_prefix_space=False keeps decode(encode(text)) == text exactly.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer,
                            length=len(texts) if isinstance(texts, (list, tuple)) else None)
    for i, name in enumerate(SPECIALS):  # the ids the rest of the lab hard-codes
        if tok.token_to_id(name) != i:
            raise DataError(f"tokenizer put {name} at id {tok.token_to_id(name)}, expected {i}")
    return tok


def load_or_train(cache: Path, fingerprint: str, texts, vocab_size: int):
    """The tokenizer for (data fingerprint, vocab size): loaded from the cache, else trained and saved.

    ``texts`` as in ``train_tokenizer``; a generator is not consumed when the cache hits.
    """
    from tokenizers import Tokenizer

    path = cache / cache_layout.TOKENIZERS / f"{fingerprint}-{TOKENIZER_VERSION}-{vocab_size}.json"
    if path.is_file():
        return Tokenizer.from_file(str(path)), path
    tok = train_tokenizer(texts, vocab_size)
    atomic_write(path, lambda tmp: tok.save(tmp))
    return tok, path


def encode_texts(tok, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Encode texts as [BOS] ids [EOS]; returns (flat int32 ids, int64 offsets of len(texts)+1)."""
    return encode_batches(tok, (texts[i:i + ENCODE_BATCH] for i in range(0, len(texts), ENCODE_BATCH)))


def encode_batches(tok, batches) -> tuple[np.ndarray, np.ndarray]:
    """``encode_texts`` over an iterable of batches of texts, one batch in memory at a time.

    Only the flat int32 ids (and one int64 length per text) accumulate: ``Encoding`` objects
    carry token strings and offsets (tens of bytes per token) and are dropped batch by batch.
    """
    chunks, lengths = [], []
    for texts in batches:
        if not texts:
            continue
        encs = tok.encode_batch_fast(list(texts), add_special_tokens=False)
        n = np.fromiter((len(e.ids) + 2 for e in encs), dtype=np.int64, count=len(encs))
        ends = np.cumsum(n)
        flat = np.empty(int(ends[-1]), dtype=np.int32)
        flat[ends - n] = BOS_ID
        flat[ends - 1] = EOS_ID
        for e, start, end in zip(encs, ends - n, ends):
            flat[start + 1:end - 1] = e.ids
        chunks.append(flat)
        lengths.append(n)
    n_all = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    offsets = np.zeros(len(n_all) + 1, dtype=np.int64)
    np.cumsum(n_all, out=offsets[1:])
    flat = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int32)
    return flat, offsets


def tokens_path(cache: Path, fingerprint: str, tok_hash: str) -> Path:
    """Where the encoded splits of (data fingerprint, tokenizer hash) are cached."""
    return cache / cache_layout.TOKENS / f"{fingerprint}-{tok_hash}.npz"


def load_encoded(path: Path, splits) -> dict | None:
    """{split: (flat ids, offsets)} from the cache, or None when absent."""
    if not path.is_file():
        return None
    with np.load(path) as z:
        return {s: (z[f"{s}_ids"], z[f"{s}_off"]) for s in splits}


def save_encoded(path: Path, encoded: dict) -> None:
    """Write the encoded splits atomically (parallel processes write identical content)."""
    arrays = {}
    for s, (flat, off) in encoded.items():
        arrays[f"{s}_ids"], arrays[f"{s}_off"] = flat, off

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append .npz to a bare name
            np.savez(f, **arrays)

    atomic_write(path, write)

