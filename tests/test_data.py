"""Data pipeline: splits, tokenizer, windows/buckets, masks, deterministic schedules, file errors."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from tests.conftest import token_cross_entropy
from trainer.config import ConfigError, load_config
from trainer.data import Corpus, DataError, prepare
from trainer.data import sources
from trainer.data.batching import make_windows
from trainer.data.tfdata import train_dataset


def data_cfg(cache, *overrides):
    return load_config(None, [f"data.cache_dir={cache}", *overrides]).data


@pytest.fixture(scope="session")
def corpus_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("normlab-cache")


@pytest.fixture(scope="session")
def corpus(corpus_cache) -> Corpus:
    """The embedded Wikipedia sample with a small vocabulary and the default buckets."""
    return prepare(data_cfg(corpus_cache, "data.vocab_size=512"), seed=0)


def _texts(c: Corpus, split: str) -> list[str]:
    return sources.texts_of(c.splits[split])


# ------------------------------------------------------------------------------ embedded source
def test_embedded_split_deterministic_and_disjoint(corpus, tmp_path):
    dd = sources.load_splits(data_cfg(tmp_path / "other"))
    texts = {s: sources.texts_of(dd[s]) for s in sources.SPLITS}
    assert sources.fingerprint(texts) == corpus.fingerprint
    for s in sources.SPLITS:
        assert texts[s] == _texts(corpus, s)
        assert len(texts[s]) > 0, s
    # The split rule, recomputed here from the article boundaries: the articles ordered by
    # sha256 of the title, the first 5 % to validation, the next 5 % to test, the rest to train;
    # each split holds its whole articles, paragraphs in corpus order.
    articles = sources.extract_articles()
    order = sorted(articles, key=lambda a: hashlib.sha256(a[0].encode("utf-8")).hexdigest())
    n = round(0.05 * len(articles))
    owner = {title: "validation" for title, _ in order[:n]}
    owner |= {title: "test" for title, _ in order[n:2 * n]}
    for s in sources.SPLITS:
        expected = [p for title, paras in articles if owner.get(title, "train") == s for p in paras]
        assert texts[s] == expected, s
    assert len(articles) > 100 and n >= 5  # ~106 articles: every split holds several


def test_embedded_paragraphs_plausible(corpus):
    words = np.array([len(t.split()) for s in sources.SPLITS for t in _texts(corpus, s)])
    # Observed: 5610 paragraphs (4813/251/546), median 65 words, p90 ~146, max 557.
    assert 3000 < len(words) < 20000
    assert 30 <= np.median(words) <= 150
    assert words.min() >= 4
    assert all(not t.startswith(("==", "*", "|", "{")) and "'''" not in t
               for t in _texts(corpus, "train"))


# ------------------------------------------------------------------------------ tokenizer
def test_tokenizer_cached_deterministic_and_round_trips(corpus, corpus_cache):
    tok_files = list((corpus_cache / "tokenizers").glob("*.json"))
    assert len(tok_files) == 1
    mtime = tok_files[0].stat().st_mtime_ns
    again = prepare(data_cfg(corpus_cache, "data.vocab_size=512"))
    assert again.tokenizer_hash == corpus.tokenizer_hash
    assert tok_files[0].stat().st_mtime_ns == mtime  # loaded, not retrained and rewritten
    from trainer.data.tokenizer import tokenizer_hash, train_tokenizer

    retrained = train_tokenizer(_texts(corpus, "train"), 512)
    assert retrained.to_str() == corpus.tokenizer.to_str()
    assert tokenizer_hash(retrained) == corpus.tokenizer_hash
    assert corpus.vocab_size == 512 == corpus.tokenizer.get_vocab_size()
    assert [corpus.tokenizer.token_to_id(t) for t in ("[PAD]", "[BOS]", "[EOS]")] == [0, 1, 2]
    for text in _texts(corpus, "validation")[:50] + ["naïve café — 東京  x\ttabs\n"]:
        ids = corpus.tokenizer.encode(text).ids
        assert corpus.tokenizer.decode(ids) == text
        assert 0 not in ids


def test_vocab_and_max_len_limits(tmp_path):
    with pytest.raises(ConfigError, match="vocab_size"):  # caught before any data work
        prepare(data_cfg(tmp_path, "data.vocab_size=200"))
    with pytest.raises(DataError, match="max_len"):
        prepare(data_cfg(tmp_path, "data.max_len=4", "data.buckets=[4]"))


# ------------------------------------------------------------------------------ batching
def _real_rows(batch):
    for row in range(batch["inputs"].shape[0]):
        n = int(batch["mask"][row].sum())
        if n:
            yield tuple(batch["inputs"][row, :n]) + (int(batch["targets"][row, n - 1]),)


def test_buckets_cover_every_window(corpus):
    # Reference windows straight from the tokenizer, independent of the Corpus index.
    tok = corpus.tokenizer
    ref = []
    for text in _texts(corpus, "train"):
        ids = [corpus.bos_id] + tok.encode(text).ids + [corpus.eos_id]
        for k in range(0, len(ids) - 1, corpus.max_len):
            ref.append(tuple(ids[k:k + corpus.max_len + 1]))
    assert any(len(w) == corpus.max_len + 1 for w in ref)  # long texts really were split
    seen = set()
    shapes = set(corpus.bucket_shapes())
    for batch in corpus.epoch_batches("train", epoch=0, seed=0):
        assert batch["inputs"].shape in shapes
        assert batch["inputs"].dtype == np.int32 and batch["mask"].dtype == np.float32
        seen.update(_real_rows(batch))
    assert seen == set(ref)
    assert sorted(map(tuple, corpus.windows("train"))) == sorted(ref)


def test_masks_and_shift(corpus):
    for batch in corpus.epoch_batches("train", 1, 3)[:40] + corpus.eval_batches(max_batches=0):
        x, y, m = batch["inputs"], batch["targets"], batch["mask"]
        lengths = m.sum(1).astype(int)
        # mask is a prefix of ones: its row sum is the row's length
        assert np.array_equal(m, (np.arange(x.shape[1])[None] < lengths[:, None]).astype(np.float32))
        assert np.all(x[m == 0] == 0) and np.all(y[m == 0] == 0)
        assert np.all(y[m == 1] != 0)  # a real target is never the pad id
        for row, n in enumerate(lengths):
            if n:  # all-pad eval filler rows have nothing to shift
                assert np.array_equal(x[row, 1:n], y[row, :n - 1])
        # rows are in the smallest bucket that fits them (all-pad eval filler rows aside)
        L = x.shape[1]
        smaller = [b for b in corpus.buckets if b < L]
        if smaller:
            assert lengths.max() > max(smaller)


def _np_masked_mean_ce(logits, targets, mask):
    return np.where(mask > 0, token_cross_entropy(logits, targets), 0.0).sum() / mask.sum()


def test_pads_do_not_change_loss(corpus):
    batch = next(b for b in corpus.epoch_batches() if (b["mask"] == 0).any())
    rng = np.random.default_rng(0)
    logits = rng.normal(size=batch["inputs"].shape + (corpus.vocab_size,)).astype(np.float32)
    noisy = logits.copy()
    noisy[batch["mask"] == 0] = rng.normal(scale=50, size=noisy[batch["mask"] == 0].shape)
    base = _np_masked_mean_ce(logits, batch["targets"], batch["mask"])
    assert base == pytest.approx(_np_masked_mean_ce(noisy, batch["targets"], batch["mask"]), rel=1e-6)
    assert base != pytest.approx(_np_masked_mean_ce(noisy, batch["targets"], np.ones_like(batch["mask"])))
    from trainer.train.step import masked_loss  # the trainer's own loss (imports TensorFlow)

    noisy[batch["mask"] == 0] = np.inf  # not even non-finite logits at pads may leak in
    s1, n1 = masked_loss(logits, batch["targets"], batch["mask"])
    s2, n2 = masked_loss(noisy, batch["targets"], batch["mask"])
    assert float(n1) == float(n2) == batch["mask"].sum()
    assert float(s1) == pytest.approx(float(s2), rel=1e-5)
    assert float(s1) / float(n1) == pytest.approx(base, rel=1e-4)


def test_train_batch_deterministic_and_resumable(corpus):
    n = corpus.batches_per_epoch
    epoch1 = corpus.epoch_batches("train", epoch=1, seed=7)
    for step in (n, n + 1, 2 * n - 1):
        got = corpus.train_batch(step, seed=7)
        for k in ("inputs", "targets", "mask"):
            assert np.array_equal(got[k], epoch1[step - n][k])
    a, b = corpus.train_batch(5, seed=7), corpus.train_batch(5, seed=8)
    assert not (a["inputs"].shape == b["inputs"].shape and np.array_equal(a["inputs"], b["inputs"]))
    first = [corpus.train_batch(s, seed=7)["inputs"] for s in range(3)]
    second = [corpus.train_batch(s, seed=7)["inputs"] for s in range(3)]
    assert all(np.array_equal(p, q) for p, q in zip(first, second))
    # windows are reshuffled within buckets, not just batch order: batch contents differ
    def contents(epoch, seed):
        return {frozenset(_real_rows(b)) for b in corpus.epoch_batches("train", epoch, seed)}

    assert contents(1, 7) != contents(1, 8)
    assert contents(0, 7) != contents(1, 7)
    # epochs differ in order
    assert any(not np.array_equal(x["inputs"], y["inputs"]) for x, y in
               zip(corpus.epoch_batches("train", 0, 7), epoch1) if x["inputs"].shape == y["inputs"].shape)


def test_train_dataset_matches_train_batch(corpus):
    ds = train_dataset(corpus, seed=3, start_step=corpus.batches_per_epoch - 2).take(4)
    for i, batch in enumerate(ds.as_numpy_iterator()):
        want = corpus.train_batch(corpus.batches_per_epoch - 2 + i, seed=3)
        assert all(np.array_equal(batch[k], want[k]) for k in want)
    assert i == 3


def test_eval_batches_fixed_and_complete(corpus, corpus_cache):
    full = corpus.eval_batches("validation", max_batches=0)
    rows = [r for b in full for r in _real_rows(b)]
    assert len(rows) == len(set(rows))  # no window counted twice in an evaluation
    assert sorted(rows) == sorted(map(tuple, corpus.windows("validation")))
    other = prepare(data_cfg(corpus_cache, "data.vocab_size=512"), seed=99)
    again = other.eval_batches("validation", max_batches=3)
    assert len(again) == 3
    assert all(np.array_equal(x["inputs"], y["inputs"]) for x, y in zip(again, full))


def test_stats_and_pad_fraction(corpus):
    st = corpus.stats()
    assert st["batches_per_epoch"] == len(corpus.epoch_batches()) == corpus.batches_per_epoch
    assert st["examples"]["train"] == len(corpus.splits["train"])
    assert sum(st["bucket_histogram"].values()) == st["windows"]["train"]
    assert st["windows"]["train"] > st["examples"]["train"]
    budget, buckets = corpus.data_cfg.tokens_per_batch, list(corpus.data_cfg.buckets)
    assert corpus.bucket_shapes() == [(budget // length, length) for length in buckets]
    assert buckets[-1] == corpus.max_len == 256
    print("embedded stats:", json.dumps(st))
    assert 0 < st["pad_fraction"] < 0.25


def test_window_lengths_match_the_windows(corpus):
    for split in ("train", "validation"):
        lengths = corpus.window_lengths(split)
        windows = corpus.windows(split)  # each window holds its n inputs plus the last target
        assert lengths.tolist() == [len(w) - 1 for w in windows]
        assert 1 <= lengths.min() and lengths.max() <= corpus.max_len
    lengths[:] = 0  # a copy: the corpus is unchanged
    assert corpus.window_lengths("validation").min() >= 1


def test_windows_split_long_sequences():
    offsets = np.array([0, 2, 3, 13, 22])  # examples of 2, 1, 10, 9 ids
    starts, lengths = make_windows(offsets, 4)
    # ex 1 (one id, no position) has no window; 9 and 8 positions give 4+4+1 and 4+4.
    assert starts.tolist() == [0, 3, 7, 11, 13, 17]
    assert lengths.tolist() == [1, 4, 4, 1, 4, 4]


# ------------------------------------------------------------------------------ files source
def _files_cfg(tmp_path, files, *extra):
    return data_cfg(tmp_path / "cache", "data.source=files", f"data.files={files}",
                    "data.vocab_size=300", "data.max_len=16", "data.buckets=[8,16]",
                    "data.tokens_per_batch=64", *extra)


def test_files_text_and_json(tmp_path):
    lines = [f"line number {i} with some words in it" for i in range(60)]
    (tmp_path / "a.txt").write_text("\n".join(lines[:30]) + "\n\n   \n")
    (tmp_path / "b.txt").write_text("\n".join(lines[30:]) + "\n")
    c = prepare(_files_cfg(tmp_path, tmp_path / "*.txt"))
    got = sum((_texts(c, s) for s in sources.SPLITS), [])
    assert sorted(got) == sorted(lines)  # blank lines dropped, nothing else lost
    assert len(_texts(c, "validation")) == 3 and len(_texts(c, "test")) == 3
    assert c.train_batch(0)["inputs"].shape in c.bucket_shapes()

    rows = [{"body": t, "id": i} for i, t in enumerate(lines)] + [{"body": "  ", "id": -1}]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "v.jsonl").write_text(json.dumps({"body": "held out text", "id": 0}))
    files = f"{{train: {tmp_path / 'd.jsonl'}, validation: [{tmp_path / 'v.jsonl'}]}}"
    auto = _files_cfg(tmp_path, files, "data.text_column=body")  # format from the extension
    assert auto.format == "json"
    cj = prepare(auto)
    assert _texts(cj, "validation") == ["held out text"]
    assert sorted(_texts(cj, "train") + _texts(cj, "test")) == sorted(lines)


@pytest.mark.parametrize("files, fmt", [("a.txt", "text"), ("a.jsonl", "json"),
                                        ("a.JSON.gz", "json"), ("a.parquet", "parquet"),
                                        ("{train: a.ndjson, validation: [b.jsonl]}", "json")])
def test_files_format_follows_the_extension(files, fmt):
    assert load_config(None, ["data.source=files", f"data.files={files}"]).data.format == fmt


@pytest.mark.parametrize("files, message", [("a.csv", "cannot tell the format of 'a.csv'"),
                                            ("[a.txt, b.jsonl]", "mix formats")])
def test_files_format_that_cannot_be_inferred_is_one_error(files, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["data.source=files", f"data.files={files}"])
    named = load_config(None, ["data.source=files", f"data.files={files}", "data.format=text"])
    assert named.data.format == "text"  # a named format is taken as given


def test_files_errors(tmp_path):
    with pytest.raises(DataError, match="data file not found: .*missing.txt"):
        prepare(_files_cfg(tmp_path, tmp_path / "missing.txt"))
    (tmp_path / "d.jsonl").write_text(json.dumps({"body": "x y z", "id": 1}) + "\n")
    with pytest.raises(DataError, match="text column 'text' not found.*available columns: .*body"):
        prepare(_files_cfg(tmp_path, tmp_path / "d.jsonl", "data.format=json"))
    (tmp_path / "zero.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n\t\n")
    for name in ("zero.txt", "blank.txt"):
        with pytest.raises(DataError, match="(split|files).*empty") as err:
            prepare(_files_cfg(tmp_path, tmp_path / name))
        assert "\n" not in str(err.value)
    (tmp_path / "bad.txt").write_bytes(b"good line\n\xff\xfe\xfa bad bytes\n")
    with pytest.raises(DataError, match="bad.txt|utf-8|decode") as err:
        prepare(_files_cfg(tmp_path, tmp_path / "bad.txt"))
    assert "\n" not in str(err.value)


def test_cache_dir_from_env_unless_the_config_names_one(tmp_path, monkeypatch):
    from trainer import cache

    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path / "envcache"))
    assert cache.root(load_config(None, []).data.cache_dir) == tmp_path / "envcache"
    assert os.path.isdir(tmp_path / "envcache")
    own = load_config(None, [f"data.cache_dir={tmp_path / 'own'}"]).data.cache_dir
    assert cache.root(own) == tmp_path / "own"


def test_hub_source_local_dir_carves_splits(tmp_path, monkeypatch):
    """source=hub goes through load_dataset(name); a local folder stands in for the hub offline."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
    repo = tmp_path / "toy"
    repo.mkdir()
    rows = [{"content": f"sentence {i} about nothing much"} for i in range(40)] + [{"content": ""}]
    (repo / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    cfg = data_cfg(tmp_path / "cache", "data.source=hub", f"data.name={repo}",
                   "data.text_column=content", "data.validation_fraction=0.1", "data.test_fraction=0.2")
    dd = sources.load_splits(cfg)
    sizes = {s: len(dd[s]) for s in sources.SPLITS}
    assert sizes == {"train": 28, "validation": 4, "test": 8}
    texts = {s: sources.texts_of(dd[s]) for s in sources.SPLITS}
    assert sorted(sum(texts.values(), [])) == sorted(r["content"] for r in rows[:-1])
    assert texts == {s: sources.texts_of(d) for s, d in sources.load_splits(cfg).items()}


def test_parallel_prepares_share_one_cache(tmp_path, corpus):
    """Sweep variants prepare concurrently: both must succeed and agree (atomic cache writes)."""
    import subprocess
    import sys

    code = ("import sys; from trainer.config import ConfigError, load_config; from trainer.data import prepare; "
            "c = prepare(load_config(None, sys.argv[1:]).data); print(c.fingerprint, c.tokenizer_hash)")
    args = [sys.executable, "-c", code, f"data.cache_dir={tmp_path}", "data.vocab_size=512"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = [subprocess.Popen(args, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-500:] for _, e in outs]
    assert outs[0][0] == outs[1][0] == f"{corpus.fingerprint} {corpus.tokenizer_hash}\n"
    assert not [p for p in tmp_path.rglob(".*tmp-*")]  # no temp leftovers


def test_sources_are_the_config_vocabulary():
    from trainer.choices import Source
    from trainer.data.sources import LOADERS

    assert set(LOADERS) == set(Source)
