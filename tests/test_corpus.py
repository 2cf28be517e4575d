"""The embedded corpora (``data.corpus``): the python corpus (docutils' source) loads offline,
splits by file, keys its cache by the package's version, has baselines and trains; the default
(Wikipedia) keeps the data, cache key and baselines key every existing run was made with."""

from __future__ import annotations

import hashlib
import json
import re
import socket
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.conftest import TINY, run_cli, train_runs
from trainer.choices import EmbeddedCorpus
from trainer.config import ConfigError, load_config, to_yaml
from trainer.data import DataError, prepare, sources
from trainer.results import baselines
from trainer.train.rundir import RunDirError, inspect_run_dir

ROOT = Path(__file__).resolve().parents[1]

# Derived from the code before data.corpus existed (commit de9dc83, main's HEAD then): the
# default split's fingerprint, cache folder and the reference config's baselines key, printed by
# sources.fingerprint_splits(sources.load_splits(cfg.data)), the cache root's listing and
# baselines.data_key(cfg) for cfg = load_config("configs/reference.yaml").
WIKI_FINGERPRINT = "2b919062daa78449"
WIKI_FOLDER = "embedded-wiki-v2-v0.05-t0.05"
REFERENCE_DATA_KEY = (
    '{"buckets": "[64, 128]", "config": null, "eval_batches": 16, "files": null, "format": '
    '"text", "max_len": 128, "name": null, "source": "embedded", "test_fraction": 0.05, '
    '"text_column": "text", "validation_fraction": 0.05, "vocab_size": 259}')


def data_cfg(cache, *overrides):
    return load_config(None, [f"data.cache_dir={cache}", *overrides]).data


@pytest.fixture
def offline(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def code_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("code-cache")


@pytest.fixture(scope="module")
def code_splits(code_cache):
    return sources.load_splits(data_cfg(code_cache, "data.corpus=python"))


def _texts(dd) -> dict[str, list[str]]:
    return {s: sources.texts_of(dd[s]) for s in sources.SPLITS}


# ------------------------------------------------------------------------------ python corpus
def test_python_corpus_loads_offline_from_the_pinned_package(tmp_path, offline):
    dd = sources.load_splits(data_cfg(tmp_path, "data.corpus=python"))
    texts = _texts(dd)
    assert all(len(texts[s]) > 10 for s in sources.SPLITS)
    sizes = {s: sum(len(t.encode("utf-8")) for t in texts[s]) for s in sources.SPLITS}
    # Observed with docutils 0.21.2: 1555/63/66 chunks, 1.57 MB/52 kB/69 kB.
    assert 1_000_000 < sizes["train"] < 2_500_000 and sizes["validation"] > 20_000
    train = texts["train"]
    assert any(t.startswith("class ") and "\n    def " in t for t in train)  # indentation kept
    assert all(t.strip() for s in sources.SPLITS for t in texts[s])
    version = sources._code_root()[1]
    assert version == "0.21.2"  # setup.cfg pins it: the corpus must not change under the results
    assert [p.name for p in tmp_path.iterdir()] == [f"embedded-code-v1-docutils-{version}-v0.05-t0.05"]


def test_python_corpus_splits_by_file_deterministically(code_splits, code_cache, tmp_path):
    texts = _texts(code_splits)
    files = sources.extract_code_files()
    assert len(files) > 100 and files == sorted(files)
    # Every file's chunks, joined back, are the file minus its blank lines between top-level units.
    root = sources._code_root()[0]
    for name, chunks in files[:20]:
        raw = (root / name.split("/", 1)[1]).read_text(encoding="utf-8")
        assert "\n".join(chunks).rstrip("\n") == re.sub(r"\n(?:[ \t]*\n)+(?=\S)", "\n", raw).rstrip("\n")
    # The split rule, recomputed: files ordered by sha256 of their path, the first 5 % to
    # validation, the next 5 % to test, the rest to train; chunks in path order.
    order = sorted(files, key=lambda f: hashlib.sha256(f[0].encode("utf-8")).hexdigest())
    n = round(0.05 * len(files))
    owner = {name: "validation" for name, _ in order[:n]}
    owner |= {name: "test" for name, _ in order[n:2 * n]}
    for s in sources.SPLITS:
        assert texts[s] == [c for name, chunks in files if owner.get(name, "train") == s
                            for c in chunks], s
    # So each file's chunks lie in one split (docutils' language tables are near-copies of each
    # other, but no one file straddles train and evaluation).
    assert n >= 5 and len(texts["train"]) > 10 * len(texts["validation"])
    again = sources.load_splits(data_cfg(tmp_path, "data.corpus=python"))  # a fresh extraction
    assert sources.fingerprint_splits(again) == sources.fingerprint_splits(code_splits)
    assert sources.fingerprint_splits(code_splits) != WIKI_FINGERPRINT


def test_cache_key_names_the_package_version(code_cache, monkeypatch, tmp_path):
    """A different docutils release is a different cache folder, never the cached text."""
    real = sources.metadata.version
    monkeypatch.setattr(sources.metadata, "version",
                        lambda name: "9.9" if name == sources.CODE_PACKAGE else real(name))
    sources.load_splits(data_cfg(tmp_path, "data.corpus=python"))
    assert [p.name for p in tmp_path.iterdir()] == ["embedded-code-v1-docutils-9.9-v0.05-t0.05"]


def test_missing_package_is_one_data_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "CODE_PACKAGE", "no_such_package_for_normlab")
    with pytest.raises(DataError) as e:
        sources.load_splits(data_cfg(tmp_path, "data.corpus=python"))
    assert "\n" not in str(e.value) and "no_such_package_for_normlab" in str(e.value)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("source", [["data.source=files", "data.files=a.txt"],
                                    ["data.source=hub", "data.name=wikitext"]])
def test_python_corpus_with_another_source_is_one_error_line(tmp_path, source):
    with pytest.raises(ConfigError, match="data.corpus=python needs data.source=embedded"):
        load_config(None, [*source, "data.corpus=python"])
    workdir = tmp_path / "run"
    result = run_cli("train", "--workdir", workdir, *TINY, *source, "data.corpus=python")
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.returncode == 2 and len(lines) == 1 and "data.corpus" in lines[0], result.stderr
    assert not workdir.exists()


def test_corpora_are_the_config_vocabulary():
    assert set(sources.CORPORA) == set(EmbeddedCorpus)
    assert load_config(None).data.corpus == EmbeddedCorpus.wikipedia


# ------------------------------------------------------------------------------ the default
def test_default_corpus_keeps_its_data_and_cache_key(tmp_path):
    dd = sources.load_splits(data_cfg(tmp_path))
    assert sources.fingerprint_splits(dd) == WIKI_FINGERPRINT
    assert [p.name for p in tmp_path.iterdir()] == [WIKI_FOLDER]
    explicit = sources.load_splits(data_cfg(tmp_path, "data.corpus=wikipedia"))
    assert sources.fingerprint_splits(explicit) == WIKI_FINGERPRINT
    assert [p.name for p in tmp_path.iterdir()] == [WIKI_FOLDER]  # the same folder, reused


def test_baselines_key_unchanged_for_wikipedia_and_separate_for_python():
    ref = load_config(ROOT / "configs/reference.yaml")
    assert baselines.data_key(ref) == REFERENCE_DATA_KEY
    committed = ROOT / "results/reference/lr/baselines.json"
    if committed.is_file():  # what summarize matches: still this key, so no recomputation
        assert json.loads(committed.read_text())["data"] == REFERENCE_DATA_KEY
    # A run saved before the key existed (its config.yaml read as is) shares the key.
    old = OmegaConf.create(to_yaml(ref))
    del old.data["corpus"]
    assert baselines.data_key(old) == REFERENCE_DATA_KEY
    python = load_config(ROOT / "configs/reference.yaml", ["data.corpus=python"])
    assert '"corpus": "python"' in baselines.data_key(python)


def test_a_run_saved_before_the_key_is_the_same_config(tmp_path):
    cfg = load_config(ROOT / "configs/base.yaml", TINY)
    saved = to_yaml(cfg).replace("  corpus: wikipedia\n", "")  # as the runs before it were saved
    assert "corpus" not in saved
    (tmp_path / "config.yaml").write_text(saved)
    assert inspect_run_dir(tmp_path, cfg) == "resume"  # no summary yet: resumable, not refused
    with pytest.raises(RunDirError, match="different config"):
        inspect_run_dir(tmp_path, load_config(ROOT / "configs/base.yaml", [*TINY, "data.corpus=python"]))


# ------------------------------------------------------------------------------ baselines, a run
def test_python_corpus_baselines(code_cache):
    cfg = load_config(ROOT / "configs/reference.yaml", [f"data.cache_dir={code_cache}",
                                                         "data.corpus=python"])
    b = baselines.from_corpus(prepare(cfg.data))
    # Observed: unigram 3.254, bigram 2.480 nats per byte token on the validation bytes.
    assert 2.0 < b["bigram"] < b["unigram"] < 4.0 and b["eval_tokens"] > 40_000
    assert b["dataset_fingerprint"] == sources.fingerprint_splits(sources.load_splits(cfg.data))


def test_tiny_run_on_the_python_corpus(tmp_path):
    run = train_runs(tmp_path, {"python": ["data.corpus=python", "runtime.xla=false"]})["python"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 6
    assert 0 < summary["final_eval_loss"] < 10
    assert load_config(run / "config.yaml").data.corpus == "python"
