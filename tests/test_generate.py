"""End to end on one tiny trained run (BatchNorm: decoding must use running statistics): the
``generate`` command (text, json, errors), the samples in TensorBoard's Text tab, the
``model.keras`` file a finished run leaves, and a self-contained run directory: its tokenizer
and prompts let ``generate`` and ``model.keras`` work with no data (an empty data cache, every
dataset load an error) and the analyses encode with the run's own tokenizer."""

from __future__ import annotations

import hashlib
import json
import shutil

import keras
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from tests.conftest import TINY
from trainer.__main__ import main
from trainer.train.checkpoint import restore_trained as restore
from trainer.config import ConfigError, load_config
from trainer.generate import encode_prompts
from trainer.models import CausalLM
from trainer.rundir import META, MODEL, PROMPT_COUNT, PROMPTS, SUMMARY, TOKENIZER
from trainer.train.checkpoint import restore_model
from trainer.train.loop import run_training
from trainer.train.rundir import load_prompts


# Its module-scoped runs are built once: every test here goes to the same xdist worker
# (--dist loadgroup, setup.cfg), not once per worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_generate")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    cfg = load_config("configs/base.yaml", [*TINY, "model.norm=batch", "train.samples=3"])
    path = tmp_path_factory.mktemp("runs") / "tiny_bn"
    assert run_training(cfg, path, argv=["test"], progress=False)["status"] == "completed"
    return path


def _generate(capsys, *argv) -> tuple[int, str, str]:
    code = main(["generate", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _samples(run_dir) -> dict[int, np.ndarray]:
    """The ``samples`` text summaries of the eval run, read with TensorBoard's own loader."""
    acc = EventAccumulator(str(run_dir / "eval"), size_guidance={"tensors": 0})
    acc.Reload()
    assert acc.SummaryMetadata("samples").plugin_data.plugin_name == "text"
    return {e.step: tensor_util.make_ndarray(e.tensor_proto) for e in acc.Tensors("samples")}


def test_samples_are_in_the_text_tab_at_every_evaluation(run_dir, capsys):
    samples = _samples(run_dir)
    assert sorted(samples) == [0, 3, 6]  # train.eval_every=3 over 6 steps, and step 0
    prompts = [p.decode() for p, _ in samples[6]]
    assert samples[6].shape == (3, 2) and all(p.strip() for p in prompts)
    assert all([p.decode() for p, _ in samples[s]] == prompts for s in samples)  # fixed prompts
    # The last evaluation saw the weights of the last checkpoint: `generate` (restored, XLA)
    # continues the same default prompts the same way (the run has 4 of them; the first 3).
    code, out, _ = _generate(capsys, run_dir, "--max-new-tokens", 32, "--format", "json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 4
    assert [[r["prompt"], r["continuation"]] for r in rows[:3]] == \
        [[p.decode(), c.decode()] for p, c in samples[6]]


def test_samples_change_no_training_number(run_dir, tmp_path):
    off = load_config("configs/base.yaml", [*TINY, "model.norm=batch", "train.samples=0"])
    summary = run_training(off, tmp_path / "off", argv=["test"], progress=False)
    on = json.loads((run_dir / "summary.json").read_text())
    for key in ("final_eval_loss", "final_eval_loss_train_mode", "final_eval_loss_precise_bn",
                "best_eval_loss", "max_grad_norm", "probes", "loss_spike_steps"):
        assert summary[key] == on[key], key
    with pytest.raises(KeyError):
        _samples(tmp_path / "off")


def test_generate_prints_text_and_json(run_dir, capsys):
    args = [run_dir, "--prompt", "The city", "--prompt", "In 1990 the", "--max-new-tokens", 5]
    code, text, _ = _generate(capsys, *args)
    assert code == 0 and text.count("\n---\n") == 2 and text.startswith("> The city\n")
    code, out, _ = _generate(capsys, *args, "--format", "json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["prompt"] for r in rows] == ["The city", "In 1990 the"]
    for r in rows:
        assert set(r) == {"prompt", "continuation", "prompt_ids", "continuation_ids"}
        assert r["prompt_ids"][0] == 1 and 0 < len(r["continuation_ids"]) <= 5
        assert r["continuation"] in text  # the text format shows the same continuation
    # Continuous batching: one slot, the second request waits for the first: same output.
    _, one_slot, _ = _generate(capsys, *args, "--format", "json", "--batch-size", 1)
    assert one_slot == out
    # Sampling is seeded: the same seed gives the same text, another seed (almost surely) not.
    sampled = [_generate(capsys, *args, "--temperature", 1.5, "--seed", s)[1] for s in (1, 1, 2)]
    assert sampled[0] == sampled[1] != sampled[2]


def test_generate_errors_are_one_line(run_dir, tmp_path, capsys):
    bare = tmp_path / "no_checkpoint"
    bare.mkdir()
    shutil.copy(run_dir / "config.yaml", bare / "config.yaml")
    cases = [([bare], "has no checkpoint"),
             ([tmp_path / "missing"], "not a run directory"),
             ([run_dir, "--prompt", ""], "prompt 1 is empty"),
             ([run_dir, "--prompt", "ok", "--prompt", "   "], "prompt 2 is empty"),
             ([run_dir, "--prompt", "word " * 40], "data.max_len = 32"),
             ([run_dir, "--max-new-tokens", 0], "--max-new-tokens")]
    for argv, message in cases:
        code, out, err = _generate(capsys, *argv)
        assert code == 2 and out == "" and message in err, (argv, err)
        assert err.startswith("error: ") and err.count("\n") == 1


def test_a_prompt_the_tokenizer_maps_to_nothing_is_refused(run_dir):
    from tokenizers import Regex, Tokenizer, normalizers

    _, corpus, _ = restore(run_dir)
    tok = Tokenizer.from_str(corpus.tokenizer.to_str())
    tok.normalizer = normalizers.Replace(Regex(r"\d"), "")  # a tokenizer that drops digits
    assert encode_prompts(["a1"], tok, 1, 32)[0][0] == 1
    with pytest.raises(ConfigError, match="prompt 2 .* maps to no tokens"):
        encode_prompts(["a1", "2024"], tok, 1, 32)


def test_the_final_model_opens_with_keras_load_model(run_dir):
    _, corpus, model = restore(run_dir)  # the last checkpoint, through the training code
    loaded = keras.saving.load_model(run_dir / MODEL)
    assert type(loaded) is CausalLM and loaded.config == model.config
    tokens = corpus.eval_batches("validation", 1)[0]
    for training in (False, True):  # BN: running statistics and batch statistics
        expected = model(tokens["inputs"], padding_mask=tokens["mask"], training=training)
        got = loaded(tokens["inputs"], padding_mask=tokens["mask"], training=training)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))


def _no_data(monkeypatch, tmp_path):
    """An empty data cache, datasets and the hub offline, and loading any data an error (every
    ``prepare`` reads its texts through ``sources.load_splits``); returns the cache."""
    import trainer.data.sources

    cache = tmp_path / "empty-cache"
    cache.mkdir()
    monkeypatch.setenv("NORMLAB_CACHE", str(cache))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def forbidden(*args, **kwargs):
        raise AssertionError("the data was loaded")

    monkeypatch.setattr(trainer.data.sources, "load_splits", forbidden)
    return cache


def test_generate_reads_only_the_run_directory(run_dir, tmp_path, monkeypatch, capsys):
    cache = _no_data(monkeypatch, tmp_path)
    code, out, err = _generate(capsys, run_dir, "--prompt", "The history of", "--max-new-tokens", 4)
    assert (code, err) == (0, "") and out.startswith("> The history of\n")
    # Without --prompt: the fixed validation prompts, from prompts.json.
    code, out, err = _generate(capsys, run_dir, "--max-new-tokens", 4, "--format", "json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert (code, err) == (0, "") and [r["prompt_ids"] for r in rows] == load_prompts(run_dir)
    assert len(rows) == PROMPT_COUNT
    assert list(cache.iterdir()) == []  # nothing prepared, nothing cached


def test_the_run_directory_holds_the_tokenizer_and_prompts_of_training(run_dir):
    from tokenizers import Tokenizer

    from trainer.data import prepare
    from trainer.telemetry.samples import sample_prompts

    corpus = prepare(load_config(run_dir / "config.yaml").data)  # the one training used
    saved = Tokenizer.from_file(str(run_dir / TOKENIZER))
    text = "The history of Zürich, 1848\u20131990: naïve cafés & 12,345 ½ steps."
    assert saved.encode(text).ids == corpus.tokenizer.encode(text).ids
    assert saved.to_str() == corpus.tokenizer.to_str()
    digest = hashlib.sha256((run_dir / TOKENIZER).read_bytes()).hexdigest()
    assert digest[:16] == json.loads((run_dir / META).read_text())["tokenizer_hash"]
    assert load_prompts(run_dir) == sample_prompts(corpus, PROMPT_COUNT)


def test_a_run_begun_before_runs_saved_their_tokenizer_gets_it_on_resume(run_dir, tmp_path,
                                                                          capsys):
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    for name in (TOKENIZER, PROMPTS, SUMMARY):  # as such a run was, stopped after its last checkpoint
        (old / name).unlink()
    # generate falls back to preparing the data, and says so in one line
    args = ["--prompt", "The city", "--max-new-tokens", 3, "--format", "json"]
    code, before, err = _generate(capsys, old, *args)
    assert code == 0 and err.startswith("note: ") and TOKENIZER in err and err.count("\n") == 1
    run_training(load_config(old / "config.yaml"), old, argv=["test"], progress=False)
    for name in (TOKENIZER, PROMPTS):
        assert (old / name).read_bytes() == (run_dir / name).read_bytes(), name
    code, after, err = _generate(capsys, old, *args)
    assert (code, err, after) == (0, "", before)


def test_the_final_model_loads_with_no_data(run_dir, tmp_path, monkeypatch):
    cache = _no_data(monkeypatch, tmp_path)
    loaded = keras.saving.load_model(run_dir / MODEL)  # trainer.models is imported
    cfg, text, model = restore_model(run_dir)
    ids = np.array(encode_prompts(["The history of"], text.tokenizer, text.bos_id, text.max_len))
    mask = np.ones_like(ids, dtype="float32")
    np.testing.assert_array_equal(np.asarray(loaded(ids, padding_mask=mask, training=False)),
                                  np.asarray(model(ids, padding_mask=mask, training=False)))
    assert text.vocab_size == loaded.vocab_size and list(cache.iterdir()) == []


def test_an_analysis_encodes_with_the_runs_own_tokenizer(run_dir, tmp_path, monkeypatch):
    """restore_trained prepares the data for its text only: with an empty cache no tokenizer is
    trained (a hub dataset's analysis tokenizes as its run did), and the ids are the run's."""
    import trainer.data.tokenizer

    cache = tmp_path / "empty-cache"
    monkeypatch.setenv("NORMLAB_CACHE", str(cache))

    def forbidden(*args, **kwargs):
        raise AssertionError("a tokenizer was trained")

    monkeypatch.setattr(trainer.data.tokenizer, "train_tokenizer", forbidden)
    _, corpus, _ = restore(run_dir)
    assert corpus.tokenizer_hash == json.loads((run_dir / META).read_text())["tokenizer_hash"]
    assert corpus.tokenizer.to_str() == (run_dir / TOKENIZER).read_text(encoding="utf-8")
    assert corpus.eval_batches("test", 1) and not (cache / "tokenizers").exists()
