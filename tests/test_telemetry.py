"""Telemetry: every contract tag exists with sane values, probes tell LN from BN, HParams parse."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import plugin_data_pb2

from tests.conftest import TINY, tiny_spec
from trainer.config import load_config
from trainer.results.events import read_scalars
from trainer.models.norms import make_norm
from trainer.telemetry.probes import SATURATION_X
from trainer.telemetry.probes import dyt_saturation, mean_pairwise_cosine
from trainer.train.loop import run_training

ROOT = Path(__file__).resolve().parents[1]
LAYERS = 2
TRAIN_TAGS = ["loss", "learning_rate", "grad_norm/global", "update_ratio/global", "nonfinite",
              "tokens_per_sec", "pad_fraction"] + [
    f"{family}/block_{i}/{stat}" for i in range(LAYERS)
    for family in ("activation", "activation_normed") for stat in ("rms", "token_mean", "token_std")
] + [f"{tag}/block_{i}" for i in range(LAYERS)
     for tag in ("grad_norm", "grad_norm/ffn_out", "update_ratio")]
EVAL_TAGS = ["loss", "perplexity", "loss_train_mode", "probe/batch_invariance",
             "probe/batch_invariance_inference"] + [
    f"probe/token_cosine/block_{i}" for i in range(LAYERS)]


# Its module-scoped runs are built once: every test here goes to the same xdist worker
# (--dist loadgroup, setup.cfg), not once per worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_telemetry")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("telemetry")
    out = {}
    for norm in ("layer", "batch", "dyt"):
        cfg = load_config(None, [*TINY, f"model.num_layers={LAYERS}", f"model.norm={norm}"])
        run_training(cfg, root / f"norm={norm}", argv=["test"], progress=False)
        out[norm] = root / f"norm={norm}"
    return out


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_required_tags_exist_and_are_finite(runs, norm):
    train, ev = read_scalars(runs[norm] / "train"), read_scalars(runs[norm] / "eval")
    bn_tags = [f"probe/bn_stat_drift/block_{i}" for i in range(LAYERS)]
    for tag in TRAIN_TAGS:
        assert tag in train, tag
        assert all(math.isfinite(v) for _, v in train[tag]), tag
    for tag in EVAL_TAGS + (bn_tags if norm == "batch" else []):
        assert tag in ev, tag
        assert all(math.isfinite(v) for _, v in ev[tag]), tag
    if norm == "layer":
        assert not any(t.startswith("probe/bn_stat_drift") for t in ev)
    assert all(v == 0.0 for _, v in train["nonfinite"])
    for tag in [t for t in train if t.startswith(("grad_norm", "update_ratio", "activation"))
                and not t.endswith("token_mean")]:
        # the learning rate warms up from 0, so step 0 moves nothing
        first = 1 if tag.startswith("update_ratio") else 0
        assert all(v > 0 for s, v in train[tag] if s >= first), tag
    assert train["update_ratio/global"][0][1] == 0.0
    assert all(0 < v < 1 for _, v in train["update_ratio/global"][1:])
    for i in range(LAYERS):
        assert all(-1 <= v <= 1 for _, v in ev[f"probe/token_cosine/block_{i}"])


DYT_TAGS = [f"probe/dyt_saturation/block_{i}{where}" for i in range(LAYERS)
            for where in ("", "/ffn")] + ["probe/dyt_saturation/final"]


def test_dyt_saturation_probe_only_for_dyt(runs):
    dyt, ln = read_scalars(runs["dyt"] / "eval"), read_scalars(runs["layer"] / "eval")
    for tag in DYT_TAGS:  # every DyT layer: each block's two norms and the final norm
        assert [s for s, _ in dyt[tag]] == [0, 3, 6], tag  # step 0: the value at init
        assert all(0.0 <= v <= 1.0 for _, v in dyt[tag]), tag
    assert not any(t.startswith("probe/dyt_saturation") for t in ln)


def test_summary_keeps_each_probes_last_and_maximum_value(runs):
    summary = json.loads((runs["dyt"] / "summary.json").read_text())
    curves = read_scalars(runs["dyt"] / "eval")
    probes, maxima = summary["probes"], summary["probes_max"]
    assert set(DYT_TAGS) <= set(probes) and set(maxima) == set(probes)
    for tag, last in probes.items():
        values = [v for _, v in curves[tag]]
        assert last == pytest.approx(values[-1], rel=1e-6, abs=1e-12), tag
        assert maxima[tag] == pytest.approx(max(values), rel=1e-6, abs=1e-12), tag
        assert maxima[tag] >= last, tag


def test_dyt_saturation_reads_each_layer_with_its_own_alpha():
    """The FFN and final probes read their own layer's alpha: with the same inputs, a large
    alpha at one location saturates there only."""
    import keras

    from trainer.models import CausalLM, model_config
    from trainer.telemetry.probes import ProbeBatch, run_probes

    keras.utils.set_random_seed(0)
    model = CausalLM(model_config(num_layers=1, dim=16, num_heads=2, ffn_dim=32, norm="dyt",
                                  embed_scale=1.0 / (0.02 * 2 ** 0.5), dyt_alpha=0.01,
                                  dyt_alpha_ffn=1e3), 40, 16)
    model.build((None, 16))
    rng = np.random.default_rng(0)
    batch = {"inputs": rng.integers(3, 40, (4, 16)).astype("int32"),
             "mask": np.ones((4, 16), np.float32)}
    scalars, _ = run_probes(model, ProbeBatch([batch], 16))
    assert scalars["probe/dyt_saturation/block_0"] == 0.0  # |0.01 x| < 3 for a stream of std 1
    assert scalars["probe/dyt_saturation/final"] == 0.0
    assert scalars["probe/dyt_saturation/block_0/ffn"] > 0.9  # |1000 x| > 3 nearly everywhere


def test_dyt_saturation_counts_tails_of_the_current_alpha():
    layer = make_norm("dyt", dyt_alpha=0.5)
    x = np.full((2, 4, 8), 0.1, np.float32)
    mask = np.ones((2, 4), np.float32)
    layer(x, padding_mask=mask)  # builds alpha
    assert dyt_saturation(layer, x, mask) == 0.0
    assert dyt_saturation(layer, x * 1e4, mask) == 1.0
    edge = np.full_like(x, 1.1 * SATURATION_X / 0.5)  # just past the threshold at alpha 0.5
    assert dyt_saturation(layer, edge, mask) == 1.0
    layer.alpha.assign(0.4)  # the learned alpha moved: the same inputs are back inside
    assert dyt_saturation(layer, edge, mask) == 0.0
    pads = x.copy()
    pads[1, 2:] = 1e4  # huge values only at padded positions do not count
    mask[1, 2:] = 0.0
    assert dyt_saturation(layer, pads, mask) == 0.0
    pads[0, 0, :4] = 1e4  # half the features of one of 6 real tokens
    assert dyt_saturation(layer, pads, mask) == pytest.approx(4 / (6 * 8))


def test_layer_norm_output_is_standardised_per_token(runs):
    train = read_scalars(runs["layer"] / "train")
    for i in range(LAYERS):
        # gamma = 1, beta = 0 at init and barely moved after a few steps
        assert train[f"activation_normed/block_{i}/token_std"][0][1] == pytest.approx(1.0, abs=0.02)
        assert abs(train[f"activation_normed/block_{i}/token_mean"][0][1]) < 0.02
    # the stream itself (embeddings ~ N(0, 0.02)) is far from unit scale: the norm did that
    assert train["activation/block_0/token_std"][0][1] < 0.5


def test_probes_separate_layer_from_batch_norm(runs):
    ln, bn = read_scalars(runs["layer"] / "eval"), read_scalars(runs["batch"] / "eval")
    assert max(v for _, v in ln["probe/batch_invariance"]) < 1e-4
    assert min(v for _, v in bn["probe/batch_invariance"]) > 1e-3
    for probes in (ln, bn):  # running statistics make inference batch-invariant for both
        assert max(v for _, v in probes["probe/batch_invariance_inference"]) < 1e-4
    # BN: train and inference mode are different functions, and the loop's curves show it
    assert any(abs(a - b) > 1e-3 for (_, a), (_, b) in zip(bn["loss"], bn["loss_train_mode"]))


def test_trained_layer_norm_model_is_the_same_function_in_both_modes(runs):
    """The loop logs LN's train-mode loss by reusing its inference program (so its two curves
    are equal by construction); here a real training-mode forward of the trained model must
    give the inference-mode logits, and BN's must not."""
    from trainer.analysis.batch_size import full_windows
    from trainer.telemetry.probes import frozen_state
    from trainer.train.checkpoint import restore_trained

    diffs = {}
    for norm in ("layer", "batch"):
        _, corpus, model = restore_trained(runs[norm])
        batch = full_windows(corpus, 4)
        with frozen_state(model):
            train = model(batch["inputs"], padding_mask=batch["mask"], training=True)
        infer = model(batch["inputs"], padding_mask=batch["mask"], training=False)
        diffs[norm] = float(np.max(np.abs(np.asarray(train) - np.asarray(infer))))
    assert diffs["layer"] < 1e-5 and diffs["batch"] > 1e-3, diffs


def test_activation_histograms_written(runs):
    acc = EventAccumulator(str(runs["layer"] / "eval"), size_guidance={"tensors": 0})
    acc.Reload()
    for i in range(LAYERS):
        events = acc.Tensors(f"activation/block_{i}")
        assert len(events) >= 2  # one per evaluation


def test_hparams_session_and_layout_per_run(runs):
    for norm, run in runs.items():
        acc = EventAccumulator(str(run), size_guidance={"tensors": 0})
        acc.Reload()
        content = acc.PluginTagToContent("hparams")
        sessions = [plugin_data_pb2.HParamsPluginData.FromString(c).session_start_info
                    for c in content.values()
                    if plugin_data_pb2.HParamsPluginData.FromString(c).HasField("session_start_info")]
        assert len(sessions) == 1
        assert sessions[0].hparams["norm"].string_value == norm
        assert sessions[0].hparams["num_layers"].number_value == LAYERS
        assert "custom_scalars__config__" in acc.PluginTagToContent("custom_scalars")
        raw = acc.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0]
        layout = layout_pb2.Layout.FromString(raw)
        titles = [c.title for cat in layout.category for c in cat.chart]
        assert "grad_norm" in titles and len(titles) >= 5


def test_mean_pairwise_cosine_against_brute_force():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 6, 5))
    mask = np.array([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4], float)
    expect = []
    for b in range(3):
        n = int(mask[b].sum())
        u = x[b, :n] / np.linalg.norm(x[b, :n], axis=-1, keepdims=True)
        cos = u @ u.T
        expect.append((cos.sum() - n) / (n * (n - 1)))
    assert mean_pairwise_cosine(x, mask) == pytest.approx(np.mean(expect), rel=1e-9)
    same = np.repeat(x[:, :1], 6, axis=1)  # every token the same vector: total collapse
    assert mean_pairwise_cosine(same, np.ones((3, 6))) == pytest.approx(1.0)


@pytest.mark.slow
def test_sweep_hparams_table_has_one_session_per_run(tmp_path):
    # two axes swept, two runs (the diagonal of the 2 x 2 grid): each run its own session
    spec = tiny_spec(tmp_path / "spec.yaml",
                     "  model.norm: [layer, rms]\n  model.residual: [true, false]\n",
                     "exclude:\n  - {model.norm: layer, model.residual: false}\n"
                     "  - {model.norm: rms, model.residual: true}\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "trainer", "sweep", "--config", str(spec),
                           "--out", str(out), "--parallel", "2"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = sorted(p.name for p in out.iterdir() if (p / "config.yaml").exists())
    assert runs == ["norm=layer,residual=true", "norm=rms,residual=false"]
    sessions = {}
    for run in runs:
        acc = EventAccumulator(str(out / run))
        acc.Reload()
        for c in acc.PluginTagToContent("hparams").values():
            data = plugin_data_pb2.HParamsPluginData.FromString(c)
            if data.HasField("session_start_info"):
                sessions[run] = dict(data.session_start_info.hparams)
    assert sorted(sessions) == runs
    acc = EventAccumulator(str(out))  # the experiment config at the sweep root
    acc.Reload()
    experiment = [plugin_data_pb2.HParamsPluginData.FromString(c).experiment
                  for c in acc.PluginTagToContent("hparams").values()]
    assert any({h.name for h in e.hparam_infos} >= {"norm", "residual"} for e in experiment)
    # what TensorBoard's hparams backend serves: the swept axes first (checked by default)
    from tensorboard.plugins.hparams.backend_context import _sort_and_reduce_to_hparams_limit

    served = [e for e in experiment if e.hparam_infos][0]
    _sort_and_reduce_to_hparams_limit(served)
    assert [h.name for h in served.hparam_infos][:2] == ["norm", "residual"]
    table = (out / "summary.csv").read_text().splitlines()
    assert len(table) == 1 + len(runs)


def test_tensorboard_command_serves_a_results_directory(runs, tmp_path):
    """`python -m trainer tensorboard DIR --port 0` starts the real TensorBoard, which lists the
    runs; a missing directory is one error line."""
    import urllib.request

    proc = subprocess.Popen([sys.executable, "-m", "trainer", "tensorboard", str(runs["layer"].parent),
                             "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # printed once the server listens
        url = first.split(" at ")[1].split()[0]
        listed = json.loads(urllib.request.urlopen(url + "data/runs", timeout=30).read())
        assert f"{runs['layer'].name}/train" in listed, listed
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    bad = subprocess.run([sys.executable, "-m", "trainer", "tensorboard", str(tmp_path / "nope")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr


def test_precise_bn_loss_is_a_recomputation_on_the_final_checkpoint(runs):
    """summary.json's final_eval_loss_precise_bn for a BN run: the eval loss of the last
    checkpoint with population statistics over the first PreciseBN training batches, recomputed
    here (numpy loss); the running-statistics loss is the same checkpoint's inference loss.
    LN runs have none."""
    from tests.conftest import mean_token_loss, restore_final_model
    from trainer.telemetry.precise_bn import BATCHES, population_statistics

    summary = json.loads((runs["batch"] / "summary.json").read_text())
    precise = summary["final_eval_loss_precise_bn"]
    assert precise is not None and math.isfinite(precise)
    cfg, corpus, model = restore_final_model(runs["batch"])
    batches = corpus.eval_batches("validation", cfg.data.eval_batches)
    assert summary["final_eval_loss"] == pytest.approx(mean_token_loss(model, batches), rel=1e-5)
    train_batches = [corpus.train_batch(i, cfg.train.seed) for i in range(BATCHES)]
    with population_statistics(model, train_batches):
        assert precise == pytest.approx(mean_token_loss(model, batches), rel=1e-5)
    assert abs(precise - summary["final_eval_loss"]) > 1e-3  # the statistics really changed
    for norm in ("layer", "dyt"):
        assert json.loads((runs[norm] / "summary.json").read_text())[
            "final_eval_loss_precise_bn"] is None


def test_hparams_table_columns_are_the_final_scalars(runs, tmp_path):
    """TensorBoard's own hparams backend, over the runs and the experiment config a sweep
    writes: every metric column has a value in every session, and it is the run's final one."""
    import shutil

    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import api_pb2, backend_context, list_session_groups

    from trainer.telemetry.tensorboard import HPARAM_METRICS, write_hparams_config
    from trainer.train.loop import HPARAM_KEYS

    for norm, run in runs.items():
        shutil.copytree(run, tmp_path / run.name, ignore=shutil.ignore_patterns("checkpoints"))
    write_hparams_config(tmp_path, [k.split(".")[-1] for k in HPARAM_KEYS], ("norm",))
    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(tmp_path))
    mux.Reload()
    tb = base_plugin.TBContext(logdir=str(tmp_path), multiplexer=mux,
                               data_provider=data_provider.MultiplexerDataProvider(mux, str(tmp_path)))
    request = api_pb2.ListSessionGroupsRequest(start_index=0, slice_size=100,
                                               allowed_statuses=api_pb2.Status.values())
    groups = list_session_groups.Handler(context.RequestContext(), backend_context.Context(tb), "",
                                         request).run().session_groups
    assert sorted(g.name for g in groups) == sorted(run.name for run in runs.values())
    for group in groups:
        (session,) = group.sessions
        values = {(m.name.group, m.name.tag): m.value for m in session.metric_values}
        assert sorted(values) == sorted(HPARAM_METRICS), group.name  # no column left empty
        summary = json.loads((tmp_path / session.name / "summary.json").read_text())
        train, ev = (read_scalars(tmp_path / session.name / g) for g in ("train", "eval"))
        for (g, tag), value in values.items():
            assert value == pytest.approx(({"train": train, "eval": ev}[g])[tag][-1][1], rel=1e-6)
        assert values[("eval", "loss")] == pytest.approx(summary["final_eval_loss"], rel=1e-6)
        assert values[("eval", "final/best_eval_loss")] == pytest.approx(summary["best_eval_loss"])
        assert values[("eval", "final/max_grad_norm")] == pytest.approx(summary["max_grad_norm"])
        assert values[("eval", "final/diverged_step")] == -1
        assert values[("eval", "probe/batch_invariance")] == pytest.approx(
            summary["probes"]["probe/batch_invariance"], rel=1e-6)
