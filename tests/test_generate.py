"""End to end on one tiny trained run (BatchNorm: decoding must use running statistics): the
``generate`` command (text, json, errors), the samples in TensorBoard's Text tab, and the
``model.keras`` file a finished run leaves."""

from __future__ import annotations

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
from trainer.rundir import MODEL
from trainer.train.loop import run_training


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
