"""Count-based baselines a language model must beat: unigram and add-k smoothed bigram.

Both are cross-entropies (nats per token) of the *same* evaluation tokens the runs' eval loss is
measured on (the fixed validation batches of ``data.eval_batches``), and under ``"test"`` of the
test batches the final test loss is measured on (what verdicts read), with counts taken from the
train split's windows as the model sees them (input id -> target id):

- unigram: p(t) = (c(t) + k) / (N + k V): what a model that learned token frequencies alone
  reaches. A run whose eval loss sits there has not used its context at all ("at the plateau").
- bigram:  p(t | s) = (c(s, t) + k) / (c(s) + k V): one token of context, from a table.

k is chosen from ``K_GRID`` by the cross-entropy on a held-out tenth of the train windows (never on
validation), then the counts are refit on the whole train split.

``baselines_for(cfg.data)`` caches the result next to the tokenized data; ``ensure_baselines``
writes ``RESULTS_DIR/baselines.json`` so tables and findings read it without the corpus.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from trainer import cache, rundir
from trainer.atomic import read_json, write_json
from trainer.choices import EmbeddedCorpus

K_GRID = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)
HELD_OUT = 10  # every 10th train window is held out to choose k
PLATEAU_MARGIN = 0.05  # nats: a final eval loss within this of the unigram value is "at plateau"
FILE = rundir.BASELINES


def _pairs(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(input id, target id) of every position of the given windows."""
    idx = np.repeat(starts, lengths) + (np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths))
    return flat[idx].astype(np.int64), flat[idx + 1].astype(np.int64)


def _unigram_ce(train_t, eval_t, vocab: int, k: float) -> float:
    counts = np.bincount(train_t, minlength=vocab).astype(np.float64)
    p = (counts + k) / (counts.sum() + k * vocab)
    return float(-np.log(p[eval_t]).mean())


def _bigram_ce(train_s, train_t, eval_s, eval_t, vocab: int, k: float) -> float:
    ctx = np.bincount(train_s, minlength=vocab).astype(np.float64)
    codes = np.unique(train_s * vocab + train_t, return_counts=True)
    query = eval_s * vocab + eval_t
    pos = np.searchsorted(codes[0], query)
    pos = np.minimum(pos, len(codes[0]) - 1)
    joint = np.where(codes[0][pos] == query, codes[1][pos], 0).astype(np.float64)
    p = (joint + k) / (ctx[eval_s] + k * vocab)
    return float(-np.log(p).mean())


def compute(train_pairs: tuple[np.ndarray, np.ndarray], eval_pairs: tuple[np.ndarray, np.ndarray],
            vocab: int, held_out_mask: np.ndarray) -> dict:
    """Unigram and bigram cross-entropy of ``eval_pairs`` with counts from ``train_pairs``.

    ``held_out_mask`` marks the train pairs used (only) to choose each model's k.
    """
    s, t = train_pairs
    es, et = eval_pairs
    fit, held = ~held_out_mask, held_out_mask
    k_uni = min(K_GRID, key=lambda k: _unigram_ce(t[fit], t[held], vocab, k))
    k_bi = min(K_GRID, key=lambda k: _bigram_ce(s[fit], t[fit], s[held], t[held], vocab, k))
    return {"unigram": _unigram_ce(t, et, vocab, k_uni),
            "bigram": _bigram_ce(s, t, es, et, vocab, k_bi),
            "unigram_k": k_uni, "bigram_k": k_bi, "vocab_size": vocab,
            "eval_tokens": int(len(et)), "train_tokens": int(len(t))}


def _eval_pairs(batches: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(input id, target id) of every real position of the evaluation batches."""
    mask = np.concatenate([b["mask"].ravel() for b in batches]) > 0
    eval_s = np.concatenate([b["inputs"].ravel() for b in batches])[mask].astype(np.int64)
    eval_t = np.concatenate([b["targets"].ravel() for b in batches])[mask].astype(np.int64)
    return eval_s, eval_t


def from_corpus(corpus) -> dict:
    """Baselines of a prepared ``trainer.data.Corpus`` on its evaluation batches."""
    flat = corpus._ids["train"][0]
    starts, lengths, _ = corpus._windows["train"]
    train = _pairs(flat, starts, lengths)
    held = np.repeat(np.arange(len(starts)) % HELD_OUT == HELD_OUT - 1, lengths)
    out = compute(train, _eval_pairs(corpus.eval_batches("validation")), corpus.vocab_size, held)
    test = compute(train, _eval_pairs(corpus.eval_batches("test")), corpus.vocab_size, held)
    out["test"] = {k: test[k] for k in ("unigram", "bigram", "eval_tokens")}
    return {**out, "dataset_fingerprint": corpus.fingerprint,
            "tokenizer_hash": corpus.tokenizer_hash, "eval_batches": int(corpus.data_cfg.eval_batches)}


def baselines_for(data_cfg) -> dict:
    """Baselines for a ``cfg.data`` node (prepares the corpus; cached beside its tokens)."""
    from trainer.data import prepare

    corpus = prepare(data_cfg)
    key = f"{corpus.fingerprint}-{corpus.tokenizer_hash}-{int(data_cfg.eval_batches)}-{corpus.max_len}"
    path = cache.root(data_cfg.cache_dir) / cache.BASELINES / f"{key}.json"
    cached = read_json(path)
    if cached and "test" in cached:  # older files lack the test split's values
        return cached
    out = from_corpus(corpus)
    write_json(path, out)
    return out


def data_key(cfg) -> str:
    """What the baselines depend on, as one string: data config minus nothing-changing keys.

    ``data.corpus`` enters only when it is not ``wikipedia``: configs saved before the key
    existed read Wikipedia, and keep sharing their key (and baselines.json) with today's."""
    d = dict(cfg.data)
    d.pop("cache_dir", None)
    d.pop("tokens_per_batch", None)
    if d.get("corpus", EmbeddedCorpus.wikipedia) == EmbeddedCorpus.wikipedia:
        d.pop("corpus", None)
    return json.dumps(d, sort_keys=True, default=str)


def _ensure(path: Path, data_cfg, key: str) -> dict | None:
    saved = read_json(path)
    if saved.get("data") == key and "test" in saved:  # older files lack the test split's values
        return saved
    try:
        out = {**baselines_for(data_cfg), "data": key}
    except Exception as e:  # noqa: BLE001 - tables must still be written without the corpus
        print(f"warning: no unigram/bigram baselines for {path.parent}: {e}")
        return None
    write_json(path, out)
    return out


def ensure_baselines(root: Path, runs) -> dict | None:
    """Baselines of the runs' data, computed once and then read from ``baselines.json``: in
    ``root`` when every run shares its data (returned), else in each run directory (None is
    returned; ``read_run_baselines`` finds them)."""
    keys = {data_key(r.cfg) for r in runs}
    if len(keys) == 1:
        return _ensure(Path(root) / FILE, runs[0].cfg.data, keys.pop())
    for run in runs:
        _ensure(Path(run.path) / FILE, run.cfg.data, data_key(run.cfg))
    return None


def read_run_baselines(run_path: Path, root: Path | None = None) -> dict | None:
    """The baselines that apply to one run: its own file, else its results root's."""
    for path in (Path(run_path) / FILE, *([Path(root) / FILE] if root else [])):
        found = read_json(path)
        if found:
            return found
    return None


def or_unigram(loss: float | None, baselines: dict) -> float | None:
    """A diverged run's loss (inf) read as the unigram loss of the same tokens (what a model
    that learned nothing scores); any other loss as it is."""
    return baselines.get("unigram") if loss is not None and math.isinf(loss) else loss


def at_plateau(loss: float | None, baselines: dict | None) -> bool:
    """Whether a final eval loss is within ``PLATEAU_MARGIN`` nats of the unigram cross-entropy."""
    if loss is None or not baselines or not math.isfinite(loss):
        return False
    return abs(loss - baselines["unigram"]) <= PLATEAU_MARGIN
