"""``prepare``: source -> splits -> BPE tokenizer -> token ids -> ``Corpus`` (batches on demand)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from trainer.cache import root as cache_root

from . import batching, sources, tokenizer
from .sources import SPLITS, DataError

MIN_MAX_LEN = 8


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """Hide datasets' progress bars during prepare without changing the caller's setting for good."""
    import datasets

    was = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was:
            datasets.enable_progress_bars()


class Corpus:
    """Tokenized splits with deterministic, statically shaped batches.

    Attributes: ``tokenizer`` (tokenizers.Tokenizer), ``vocab_size`` (actual), ``pad_id``/``bos_id``/
    ``eos_id``, ``fingerprint`` (data), ``tokenizer_hash``, ``max_len``, ``buckets``, ``batch_sizes``,
    ``splits`` (the DatasetDict of texts), ``seed`` (default seed of ``train_batch``).
    """

    pad_id, bos_id, eos_id = tokenizer.PAD_ID, tokenizer.BOS_ID, tokenizer.EOS_ID

    def __init__(self, data_cfg: Any, splits, tok, encoded: dict, fingerprint: str,
                 tok_hash: str, seed: int = 0):
        self.data_cfg = data_cfg
        self.splits = splits
        self.tokenizer = tok
        self.vocab_size = tok.get_vocab_size()
        self.fingerprint = fingerprint
        self.tokenizer_hash = tok_hash
        self.max_len = int(data_cfg.max_len)
        self.buckets = [int(b) for b in data_cfg.buckets]
        self.batch_sizes = batching.batch_sizes(self.buckets, int(data_cfg.tokens_per_batch))
        self.seed = seed
        self._ids, self._windows = {}, {}
        for split, (flat, offsets) in encoded.items():
            starts, lengths = batching.make_windows(offsets, self.max_len)
            self._ids[split] = (flat, offsets)
            self._windows[split] = (starts, lengths, batching.assign_buckets(lengths, self.buckets))
        self.batches_per_epoch = self.num_batches("train")
        self._epoch_cache: tuple | None = None
        self._eval_cache: dict = {}

    # ------------------------------------------------------------------ windows and schedules
    def num_batches(self, split: str = "train") -> int:
        """Batches in one training-style epoch of ``split`` (independent of seed and epoch)."""
        bucket_of = self._windows[split][2]
        counts = np.bincount(bucket_of, minlength=len(self.buckets))
        return int(sum(-(-c // s) for c, s in zip(counts, self.batch_sizes)))

    def window_lengths(self, split: str = "train") -> np.ndarray:
        """Every window's real length (tokens it predicts), in example order (a copy)."""
        return self._windows[split][1].copy()

    def windows(self, split: str = "train") -> list[np.ndarray]:
        """Every window's n+1 ids (inputs plus final target), in example order."""
        flat = self._ids[split][0]
        starts, lengths, _ = self._windows[split]
        return [batching.window_ids(flat, starts, lengths, i) for i in range(len(starts))]

    def _schedule(self, split: str, epoch: int, seed: int):
        rng = np.random.default_rng([seed, epoch])
        return batching.epoch_schedule(self._windows[split][2], self.batch_sizes, rng)

    def _build(self, split: str, bucket: int, rows: np.ndarray) -> dict[str, np.ndarray]:
        starts, lengths, _ = self._windows[split]
        return batching.build_batch(self._ids[split][0], starts, lengths, rows, self.buckets[bucket])

    def epoch_batches(self, split: str = "train", epoch: int = 0, seed: int = 0) -> list[dict]:
        """All batches of one epoch, shuffled with ``np.random.default_rng([seed, epoch])``."""
        return [self._build(split, b, rows) for b, rows in self._schedule(split, epoch, seed)]

    def train_batch(self, step: int, seed: int | None = None) -> dict[str, np.ndarray]:
        """The training batch at global ``step``: same data for the same (seed, step), resumable."""
        seed = self.seed if seed is None else seed
        epoch, index = divmod(int(step), self.batches_per_epoch)
        if self._epoch_cache is None or self._epoch_cache[:2] != (seed, epoch):
            # Only the schedule (window indices) is cached; a batch is cheap to materialise.
            self._epoch_cache = (seed, epoch, self._schedule("train", epoch, seed))
        bucket, rows = self._epoch_cache[2][index]
        return self._build("train", bucket, rows)

    def eval_batches(self, split: str = "validation", max_batches: int | None = None) -> list[dict]:
        """A fixed list of batches over ``split`` (same for every run and seed); 0 = all batches.

        Each window appears at most once; a bucket's last batch is completed with all-pad rows.
        """
        if max_batches is None:
            max_batches = int(self.data_cfg.eval_batches)
        key = (split, max_batches)
        if key not in self._eval_cache:
            sched = batching.eval_schedule(self._windows[split][2], self.batch_sizes)
            if max_batches > 0:
                sched = sched[:max_batches]
            self._eval_cache[key] = [self._build(split, b, rows) for b, rows in sched]
        return self._eval_cache[key]

    def bucket_shapes(self) -> list[tuple[int, int]]:
        """Every (batch, length) shape a batch can have: one per configured bucket."""
        return [(B, L) for B, L in zip(self.batch_sizes, self.buckets)]

    # ------------------------------------------------------------------ reporting
    def stats(self) -> dict:
        """Counts, train pad fraction over one epoch (seed 0), batches and tokens per epoch."""
        _, lengths, bucket_of = self._windows["train"]
        sched = self._schedule("train", 0, 0)
        real = int(sum(lengths[rows].sum() for _, rows in sched))
        padded = int(sum(len(rows) * self.buckets[b] for b, rows in sched))
        hist = np.bincount(bucket_of, minlength=len(self.buckets))
        return {
            "examples": {s: int(len(self._ids[s][1]) - 1) for s in SPLITS},
            "windows": {s: int(len(self._windows[s][0])) for s in SPLITS},
            "target_tokens": {s: int(self._windows[s][1].sum()) for s in SPLITS},
            "pad_fraction": 1.0 - real / padded if padded else 0.0,
            "batches_per_epoch": self.batches_per_epoch,
            "tokens_per_epoch": padded,
            "real_tokens_per_epoch": real,
            "bucket_histogram": {int(L): int(c) for L, c in zip(self.buckets, hist)},
        }


def prepare(data_cfg: Any, seed: int = 0, tok=None) -> Corpus:
    """Load, split, tokenize (cached) and index ``data_cfg`` (the ``cfg.data`` node) into a Corpus.

    ``seed`` only sets the Corpus' default training-order seed; splits and tokenizer never depend
    on it, so every variant of a sweep sees the same data. ``tok``: a tokenizer to encode with
    (a trained run's own, ``RUN_DIR/tokenizer.json``) instead of the one trained on the data.
    """
    if int(data_cfg.max_len) < MIN_MAX_LEN:
        raise DataError(f"data.max_len={data_cfg.max_len} is too small to be useful; use >= {MIN_MAX_LEN}")
    vocab_size = int(data_cfg.vocab_size)  # at least MIN_VOCAB: trainer.config validates it
    cache = cache_root(data_cfg.cache_dir)
    with _quiet_datasets():
        splits = sources.load_splits(data_cfg)
    # Every pass over the texts streams batches from the Arrow tables: a large local corpus
    # never exists as one Python list (hash, tokenizer training and encoding read it in turn).
    fp = sources.fingerprint_splits(splits)
    if tok is None:
        tok, _ = tokenizer.load_or_train(cache, fp, sources.iter_text_batches(splits["train"]),
                                         vocab_size)
    tok_hash = tokenizer.tokenizer_hash(tok)
    path = tokenizer.tokens_path(cache, fp, tok_hash)
    encoded = tokenizer.load_encoded(path, SPLITS)
    if encoded is None:
        encoded = {s: tokenizer.encode_batches(tok, sources.iter_text_batches(splits[s]))
                   for s in SPLITS}
        tokenizer.save_encoded(path, encoded)
    return Corpus(data_cfg, splits, tok, encoded, fp, tok_hash, seed)
