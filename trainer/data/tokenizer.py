"""Byte-level BPE tokenizer (HF ``tokenizers``), trained on the train split and cached as JSON.

Ids 0/1/2 are ``[PAD]``/``[BOS]``/``[EOS]``. No post-processor adds them: ``encode`` of a prompt
returns only its text tokens, and ``encode_splits`` wraps each training example itself.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from trainer.config import MIN_VOCAB  # the specials + the 256-symbol byte alphabet

from .sources import DataError, atomic_write

SPECIALS = ("[PAD]", "[BOS]", "[EOS]")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
# Bump when training settings change: part of the tokenizer cache key.
TOKENIZER_VERSION = "bbpe-v1"


def tokenizer_hash(tok) -> str:
    """Short sha256 of the tokenizer's JSON: identifies the exact vocabulary and merges."""
    return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()[:16]


def train_tokenizer(texts: list[str], vocab_size: int):
    """Train a byte-level BPE of ``vocab_size`` tokens on ``texts`` (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < MIN_VOCAB:
        raise DataError(f"data.vocab_size={vocab_size} cannot hold {len(SPECIALS)} special tokens "
                        f"+ 256 byte tokens; use >= {MIN_VOCAB}")
    tok = Tokenizer(models.BPE())
    # add_prefix_space=False keeps decode(encode(text)) == text exactly.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    for i, name in enumerate(SPECIALS):  # the ids the rest of the lab hard-codes
        if tok.token_to_id(name) != i:
            raise DataError(f"tokenizer put {name} at id {tok.token_to_id(name)}, expected {i}")
    return tok


def load_or_train(cache: Path, fingerprint: str, texts: list[str], vocab_size: int):
    """The tokenizer for (data fingerprint, vocab size): loaded from the cache, else trained and saved."""
    from tokenizers import Tokenizer

    path = cache / "tokenizers" / f"{fingerprint}-{TOKENIZER_VERSION}-{vocab_size}.json"
    if path.is_file():
        return Tokenizer.from_file(str(path)), path
    tok = train_tokenizer(texts, vocab_size)
    atomic_write(path, lambda tmp: tok.save(tmp))
    return tok, path


def encode_texts(tok, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Encode texts as [BOS] ids [EOS]; returns (flat int32 ids, int64 offsets of len(texts)+1)."""
    encs = tok.encode_batch_fast(texts, add_special_tokens=False) if texts else []
    lengths = np.fromiter((len(e.ids) + 2 for e in encs), dtype=np.int64, count=len(encs))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.empty(offsets[-1], dtype=np.int32)
    for e, start, end in zip(encs, offsets[:-1], offsets[1:]):
        flat[start] = BOS_ID
        flat[start + 1:end - 1] = e.ids
        flat[end - 1] = EOS_ID
    return flat, offsets


def tokens_path(cache: Path, fingerprint: str, tok_hash: str) -> Path:
    """Where the encoded splits of (data fingerprint, tokenizer hash) are cached."""
    return cache / "tokens" / f"{fingerprint}-{tok_hash}.npz"


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

