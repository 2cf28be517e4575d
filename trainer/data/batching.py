"""Windows, length buckets and deterministic batch schedules (pure numpy, no TensorFlow).

A tokenized example of n+1 ids has n positions (inputs = ids[:-1], targets = ids[1:]). Examples
longer than ``max_len`` positions are cut into consecutive windows of ``max_len`` positions that
share one boundary id, so every target is trained on exactly once and no text is dropped.

Each window goes to the smallest bucket L >= its length; every batch of bucket L has the static
shape [B_L, L] with B_L = tokens_per_batch // L. A training epoch shuffles windows inside each
bucket, completes the last batch of a bucket by wrapping around to that bucket's first shuffled
windows (a bucket with fewer than B_L windows is filled by repeating them; buckets are never
merged), then shuffles the batch order. Evaluation instead pads its last batch per bucket with
all-pad rows (mask 0), so no window is counted twice in an evaluation loss.
"""

from __future__ import annotations

import numpy as np

from trainer.data.tokenizer import PAD_ID
EVAL_SEED = 20240917  # fixed: evaluation batches are the same for every run and seed


def make_windows(offsets: np.ndarray, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(start id offset, number of positions) of every window of the examples in ``offsets``.

    ``offsets`` has len(examples)+1 entries into the flat id array. Window k of an example
    starts at its id k*max_len and covers min(max_len, n - k*max_len) positions.
    """
    n_pos = np.diff(offsets) - 1
    n_win = np.where(n_pos >= 1, -(-n_pos // max_len), 0)  # ceil; < 1 position: no window
    ex = np.repeat(np.arange(len(n_pos)), n_win)
    k = np.arange(len(ex)) - np.repeat(np.cumsum(n_win) - n_win, n_win)
    starts = offsets[:-1][ex] + k * max_len
    lengths = np.minimum(max_len, n_pos[ex] - k * max_len)
    return starts.astype(np.int64), lengths.astype(np.int64)


def assign_buckets(lengths: np.ndarray, buckets: list[int]) -> np.ndarray:
    """Index of the smallest bucket that holds each window length."""
    return np.searchsorted(np.asarray(buckets), lengths, side="left")


def batch_sizes(buckets: list[int], tokens_per_batch: int) -> list[int]:
    """B_L = tokens_per_batch // L for every bucket L."""
    return [max(1, tokens_per_batch // L) for L in buckets]


def epoch_schedule(bucket_of: np.ndarray, sizes: list[int], rng: np.random.Generator):
    """Training schedule: a list of (bucket index, window indices [B_L]) in shuffled order."""
    # A bucket's last batch wraps around to its first windows: every batch is a static [B_L, L].
    return _schedule(bucket_of, sizes, rng, lambda perm, n: perm[np.arange(n) % len(perm)])


def eval_schedule(bucket_of: np.ndarray, sizes: list[int]):
    """Evaluation schedule: every window once; row index -1 is an all-pad filler row."""
    # A fixed shuffle makes any prefix of the batch list a fair sample of the split.
    return _schedule(bucket_of, sizes, np.random.default_rng(EVAL_SEED), _filler_rows)


def _filler_rows(perm: np.ndarray, n: int) -> np.ndarray:
    rows = np.full(n, -1, dtype=np.int64)
    rows[:len(perm)] = perm
    return rows


def _schedule(bucket_of, sizes, rng, fill):
    """Each bucket's windows shuffled, made ``fill(perm, n)`` rows long (a whole number of
    batches) and cut into batches; then the batches of all buckets shuffled together."""
    batches = []
    for b, size in enumerate(sizes):
        members = np.flatnonzero(bucket_of == b)
        if len(members) == 0:
            continue
        perm = members[rng.permutation(len(members))]
        n_batches = -(-len(perm) // size)
        rows = fill(perm, n_batches * size)
        batches += [(b, rows[i * size:(i + 1) * size]) for i in range(n_batches)]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def build_batch(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                rows: np.ndarray, length: int) -> dict[str, np.ndarray]:
    """Materialise windows ``rows`` (-1 = pad row) as inputs/targets int32 and mask float32 [B, L]."""
    rows = np.asarray(rows)
    real = rows >= 0
    safe = np.where(real, rows, 0)
    n = np.where(real, lengths[safe], 0)
    pos = np.arange(length)
    valid = pos[None, :] < n[:, None]
    idx = starts[safe][:, None] + pos[None, :]
    idx = np.where(valid, idx, 0)  # keep gathers in range; masked out below
    inputs = np.where(valid, flat[idx], PAD_ID).astype(np.int32)
    targets = np.where(valid, flat[idx + valid], PAD_ID).astype(np.int32)
    return {"inputs": inputs, "targets": targets, "mask": valid.astype(np.float32)}


def window_ids(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, i: int) -> np.ndarray:
    """The n+1 ids of window ``i`` (its inputs plus the final target)."""
    return flat[starts[i]:starts[i] + lengths[i] + 1]
