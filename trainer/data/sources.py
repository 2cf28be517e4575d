"""Text sources -> a ``datasets.DatasetDict`` with train/validation/test splits and one "text" column.

Three sources (``data_cfg.source``): ``embedded`` (a corpus shipped inside a pinned package, no
network: ``data_cfg.corpus`` picks the Wikipedia sample of the gensim wheel or the Python source
of docutils), ``hub`` (``datasets.load_dataset(name, config)``) and ``files`` (local
text/json/parquet files). Every failure a user can cause is raised as a one-line ``DataError``.
"""

from __future__ import annotations

import bz2
import glob
import hashlib
import importlib.util
import os
import re
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from trainer import cache
from trainer.atomic import atomic_dir
from trainer.choices import EmbeddedCorpus, Source
from trainer.faults import ProjectError


SPLITS = ("train", "validation", "test")
# Bump when the embedded extraction/cleaning changes: it is part of the on-disk cache key.
EXTRACT_VERSION = "wiki-v2"
EMBEDDED_FILE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
MIN_PARAGRAPH_CHARS = 20
# The package whose .py files are the python corpus (pinned exactly in setup.cfg). Bump
# CODE_VERSION when the chunking changes: like the package's version, it is in the cache key.
CODE_PACKAGE = "docutils"
CODE_VERSION = "code-v1"
TEXT_BATCH = 2048  # texts per batch when streaming a split (hashing, tokenizer training, encoding)


class DataError(ProjectError, ValueError):
    """A data problem the user can fix; the message is one line."""


def stable_hash(key: str) -> str:
    """sha256 hex of a string: stable across processes, unlike the built-in ``hash``."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def fingerprint(texts: dict) -> str:
    """Short sha256 of every split's texts in order: identifies the exact data a run saw.

    ``texts`` maps each split to texts or to an iterable of batches (lists) of texts
    (``iter_text_batches``): the hash is the same either way, so large corpora stream.
    """
    h = hashlib.sha256()
    for split in SPLITS:
        h.update(f"[{split}]".encode())
        for item in texts[split]:
            for text in ([item] if isinstance(item, str) else item):
                h.update(text.encode("utf-8"))
                h.update(b"\0")  # separator, so ["ab"] and ["a", "b"] differ
    return h.hexdigest()[:16]


def fingerprint_splits(splits) -> str:
    """``fingerprint`` of a DatasetDict, read batch by batch (never the whole text in memory)."""
    return fingerprint({s: iter_text_batches(splits[s]) for s in SPLITS})


def texts_of(ds) -> list[str]:
    """The "text" column as a plain list (respecting any select/split indices over the table)."""
    return list(ds.with_format(None)[:]["text"]) if len(ds) else []


def iter_text_batches(ds, batch_size: int = TEXT_BATCH) -> Iterator[list[str]]:
    """The "text" column in order, as lists of at most ``batch_size`` texts (streams from Arrow)."""
    if len(ds) == 0:
        return
    for batch in ds.with_format(None).select_columns(["text"]).iter(batch_size=batch_size):
        yield batch["text"]


def _ds(texts: list[str]):
    import datasets

    return datasets.Dataset.from_dict({"text": texts},
                                      features=datasets.Features({"text": datasets.Value("string")}))


def _make(splits: dict[str, list[str]]):
    import datasets

    return datasets.DatasetDict({s: _ds(splits.get(s, [])) for s in SPLITS})


# ---------------------------------------------------------------------------------- embedded
_HEADING = re.compile(r"^\s*=+.*=+\s*$")
_QUOTES = re.compile(r"'{2,}")  # wiki bold/italic markup that filter_wiki leaves behind
_SPACES = re.compile(r"[ \t]+")
_MARKUP_START = ("*", "#", ";", ":", "|", "!", "{", "}", "<")


def _paragraphs(wikitext: str) -> list[str]:
    """Clean paragraphs of one article: blank-line blocks minus headings, lists and tables."""
    from gensim.corpora.wikicorpus import filter_wiki

    out = []
    for block in re.split(r"\n\s*\n", filter_wiki(wikitext)):
        # Quotes go first: table cells come out of filter_wiki as lines like '''*word'''.
        lines = [_QUOTES.sub("", ln).strip() for ln in block.splitlines()]
        lines = [ln for ln in lines if ln and not _HEADING.match(ln) and not ln.startswith(_MARKUP_START)]
        text = _SPACES.sub(" ", " ".join(lines)).strip()
        # A real paragraph has prose: long enough and mostly letters (drops stray symbols/captions).
        letters = sum(c.isalpha() for c in text)
        if len(text) >= MIN_PARAGRAPH_CHARS and letters >= 0.5 * len(text) and len(text.split()) >= 4:
            out.append(text)
    return out


def _embedded_path() -> str:
    from gensim.test.utils import datapath

    path = datapath(EMBEDDED_FILE)
    if not os.path.isfile(path):
        raise DataError(f"data file not found: {path} (the gensim wheel lacks its test data)")
    return path


def extract_articles() -> list[tuple[str, list[str]]]:
    """(title, paragraphs) for each main-namespace, non-redirect article of the gensim sample."""
    from gensim.corpora.wikicorpus import extract_pages

    articles = []
    with bz2.open(_embedded_path(), "rb") as f:
        for title, text, _pageid in extract_pages(f, filter_namespaces=("0",)):
            if text.lstrip().lower().startswith("#redirect"):
                continue
            paras = _paragraphs(text)
            if paras:
                articles.append((title, paras))
    return articles


def split_articles(titles: list[str], val_frac: float, test_frac: float) -> dict[str, list[int]]:
    """Document indices per split: order by sha256(title), first slice -> validation, next -> test.

    Whole documents (Wikipedia articles, source files by path) go to one split so none leaks
    between train and evaluation. A positive fraction always gets at least one document so small
    samples still have every split.
    """
    order = sorted(range(len(titles)), key=lambda i: stable_hash(titles[i]))
    n = len(order)
    n_val = max(1, round(val_frac * n)) if val_frac > 0 else 0
    n_test = max(1, round(test_frac * n)) if test_frac > 0 else 0
    if n - n_val - n_test < 1:
        raise DataError(f"too few documents ({n}) for validation/test fractions {val_frac}/{test_frac}")
    val, test = order[:n_val], order[n_val:n_val + n_test]
    train = order[n_val + n_test:]
    return {"train": sorted(train), "validation": sorted(val), "test": sorted(test)}


# A run of blank lines before a line at column 0: the file's top-level units (the module
# docstring, the imports, each def or class whole with its inner blank lines) become examples.
_TOP_LEVEL_BREAK = re.compile(r"\n(?:[ \t]*\n)+(?=\S)")


def _code_root() -> tuple[Path, str]:
    """The installed CODE_PACKAGE's directory and version (found, not imported)."""
    try:
        version = metadata.version(CODE_PACKAGE)
        spec = importlib.util.find_spec(CODE_PACKAGE)
    except (metadata.PackageNotFoundError, ImportError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"data.corpus=python reads the source of the {CODE_PACKAGE} package, which "
                        f"is not installed (pip install -e . installs the pinned version)")
    return Path(next(iter(spec.submodule_search_locations))), version


def extract_code_files() -> list[tuple[str, list[str]]]:
    """(path, top-level chunks) of every .py file of CODE_PACKAGE, in path order: the text as
    written (indentation, comments, docstrings), blank-line runs between top-level units dropped."""
    root, _ = _code_root()
    files = []
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        chunks = [c for c in _TOP_LEVEL_BREAK.split(path.read_text(encoding="utf-8")) if c.strip()]
        if chunks:
            files.append((f"{CODE_PACKAGE}/{path.relative_to(root).as_posix()}", chunks))
    return files


def _code_key() -> str:
    return f"{CODE_VERSION}-{CODE_PACKAGE}-{_code_root()[1]}"


# data.corpus -> (cache key: what the extracted text depends on, extract: (name, examples) per
# document); the keys are exactly trainer.choices.EmbeddedCorpus.
CORPORA = EmbeddedCorpus.require_keys({
    EmbeddedCorpus.wikipedia: (lambda: EXTRACT_VERSION, extract_articles),
    EmbeddedCorpus.python: (_code_key, extract_code_files)}, "the embedded corpora")


def _embedded(data_cfg: Any, root: Path):
    import datasets

    # A config saved before data.corpus existed (a run directory's, read as it is) is Wikipedia.
    corpus = getattr(data_cfg, "corpus", None) or EmbeddedCorpus.wikipedia
    key, extract = CORPORA[EmbeddedCorpus.parse(corpus, "data.corpus")]
    vf, tf = float(data_cfg.validation_fraction), float(data_cfg.test_fraction)
    final = root / f"embedded-{key()}-v{vf:g}-t{tf:g}"
    if not final.is_dir():
        documents = extract()
        idx = split_articles([t for t, _ in documents], vf, tf)
        dd = _make({s: [p for i in ids for p in documents[i][1]] for s, ids in idx.items()})
        with atomic_dir(final) as tmp:
            dd.save_to_disk(str(tmp))
    return datasets.load_from_disk(str(final))


# ---------------------------------------------------------------------------------- hub / files
def _check_files(files: Any) -> None:
    """Raise 'data file not found' for any path or glob that matches nothing."""
    items = files.items() if isinstance(files, dict) else [("train", files)]
    for split, item in items:
        patterns = [item] if isinstance(item, (str, os.PathLike)) else item
        if not isinstance(patterns, (list, tuple)) or not patterns:
            raise DataError(f"data.files: expected a path, a list or {{split: path(s)}}, got {item!r} "
                            f"for split '{split}'")
        matched = []
        for pattern in patterns:
            found = glob.glob(os.path.expanduser(str(pattern)))
            if not found:
                raise DataError(f"data file not found: {pattern}")
            matched += found
        # datasets fails on all-empty input with an obscure schema error: say what it means.
        if all(os.path.isfile(f) and os.path.getsize(f) == 0 for f in matched):
            raise DataError(f"data files for split '{split}' are empty (0 bytes): {', '.join(matched)}")


def _first_line(exc: BaseException) -> str:
    """The innermost cause's first line: datasets wraps the real error (e.g. UnicodeDecodeError)."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _carve(splits: dict, data_cfg: Any) -> dict:
    """Fill missing validation/test splits from train (deterministic: seed 0).

    Both fractions are of the original train size; a positive fraction gets at least one row.
    """
    total = len(splits["train"])
    for name, frac in (("validation", data_cfg.validation_fraction), ("test", data_cfg.test_fraction)):
        if name in splits:
            continue
        train = splits["train"]
        n = max(1, round(frac * total)) if frac > 0 else 0
        if n == 0 or len(train) - n < 1:
            splits[name] = train.select([], keep_in_memory=True)
            continue
        # Dataset.train_test_split(test_size=n, seed=0, shuffle=True), written out so that the
        # index mappings stay in memory (no cache files next to the user's data).
        perm = np.random.default_rng(0).permutation(len(train))
        splits[name] = train.select(perm[:n], keep_in_memory=True)
        splits["train"] = train.select(perm[n:], keep_in_memory=True)
    return splits


def _loaded(dd, data_cfg: Any, origin: str):
    """Pick the splits, check the text column, drop blank texts; one-line errors."""
    col = data_cfg.text_column
    splits = dict(dd)
    if "train" not in splits:
        raise DataError(f"{origin}: no 'train' split (found: {', '.join(splits) or 'none'})")
    for name, ds in splits.items():
        if col not in ds.column_names:
            raise DataError(f"{origin}: text column '{col}' not found in split '{name}'; "
                            f"available columns: {', '.join(ds.column_names)}")
    clean = {}
    for name, ds in splits.items():
        if name not in SPLITS:
            continue
        ds = ds.select_columns([col]).rename_column(col, "text") if col != "text" else ds.select_columns(["text"])
        # Streams over the Arrow table and only builds an indices mapping (kept in memory: 8 bytes
        # a row, and no cache files for parallel preparers to race on); the texts stay on disk.
        clean[name] = ds.filter(_non_blank, batched=True, batch_size=TEXT_BATCH,
                                keep_in_memory=True)
    if len(clean["train"]) == 0:
        raise DataError(f"{origin}: the train split is empty (no non-blank texts in column '{col}')")
    import datasets

    carved = _carve(clean, data_cfg)
    return datasets.DatasetDict({s: carved[s] for s in SPLITS})


def _non_blank(batch: dict) -> list[bool]:
    return [isinstance(t, str) and bool(t.strip()) for t in batch["text"]]


def _hub(data_cfg: Any, root: Path):  # the hub keeps its own cache
    import datasets

    origin = f"hub dataset {data_cfg.name}" + (f"/{data_cfg.config}" if data_cfg.config else "")
    try:
        dd = datasets.load_dataset(data_cfg.name, data_cfg.config)
    except Exception as e:  # network, unknown name, ...: the user needs one line, not a traceback
        raise DataError(f"{origin}: could not load ({_first_line(e)})") from e
    return _loaded(dd, data_cfg, origin)


def _files(data_cfg: Any, root: Path):
    import datasets
    from omegaconf import OmegaConf

    files = data_cfg.files
    if OmegaConf.is_config(files):
        files = OmegaConf.to_container(files, resolve=True)
    _check_files(files)
    origin = f"{data_cfg.format} files {files}"
    try:
        # Our own HF cache dir keeps generated Arrow files with the rest of the lab's cache.
        dd = datasets.load_dataset(str(data_cfg.format), data_files=files, cache_dir=str(root / cache.HF))
    except FileNotFoundError as e:
        raise DataError(f"data file not found: {e.filename or files}") from e
    except Exception as e:  # bad encoding / malformed JSON surface wrapped in DatasetGenerationError
        raise DataError(f"{origin}: unreadable ({_first_line(e)})") from e
    return _loaded(dd, data_cfg, origin)


def load_splits(data_cfg: Any):
    """Load ``data_cfg.source`` as a DatasetDict with non-empty "text" rows in train/validation/test."""
    return LOADERS[Source.parse(data_cfg.source, "data.source")](data_cfg,
                                                                 cache.root(data_cfg.cache_dir))


# data.source -> loader(data_cfg, cache root); the keys are exactly trainer.choices.Source.
LOADERS = Source.require_keys({Source.embedded: _embedded, Source.hub: _hub,
                               Source.files: _files}, "the data loaders")
