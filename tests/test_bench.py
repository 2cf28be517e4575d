"""``python -m trainer bench`` and ``python -m trainer.bench data``: well-formed reports (no timing asserts)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.bench import _bench_options, batch_model_flops
from trainer.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("throughput_vs_pad_to_max", "compilations", "pad_fraction", "telemetry_overhead", "mfu",
           "peak_rss")


def _run(args: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_bench_cli_writes_wellformed_json(tmp_path, tiny):
    # runtime.xla=false keeps this under a minute on 2 CPU cores (XLA compiles cost ~10 s each);
    # tracing counts are the same with and without XLA.
    out = tmp_path / "b.json"
    overrides = [o for o in tiny if o.startswith(("model.", "data."))]
    res = _run(["-m", "trainer", "bench", "--out", str(out), "--steps", "3", *overrides,
                "bench.profile=false", "bench.matmul_n=256", "runtime.xla=false"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "targets:" in res.stdout
    r = json.loads(out.read_text())
    for key in ("config", "device", "versions", "throughput", "pad_fraction", "step_time_s",
                "per_shape_step_time_s", "compile_count", "telemetry_overhead", "flops",
                "matmul_peak", "mfu", "peak_rss_bytes", "targets", "eval"):
        assert key in r, key
    assert r["config"]["model"]["dim"] == 32 and r["config"]["data"]["buckets"] == [16, 32]
    assert r["device"]["cpu_count"] >= 1 and r["device"]["tf_devices"]
    assert r["versions"]["tensorflow"]
    t = r["throughput"]
    for k in ("real_tokens_per_sec", "padded_tokens_per_sec", "pad_to_max_real_tokens_per_sec",
              "bucketed_over_pad_to_max"):
        assert _finite_positive(t[k]), k
    assert t["padded_tokens_per_sec"] >= t["real_tokens_per_sec"]
    assert 0 <= r["pad_fraction"] < 1
    st = r["step_time_s"]
    assert _finite_positive(st["median"]) and st["p10"] <= st["median"] <= st["p90"]
    assert st["n"] == 3
    assert r["per_shape_step_time_s"] and all(k.count("x") == 1 for k in r["per_shape_step_time_s"])
    cc = r["compile_count"]
    for k in ("train", "train_telemetry_off", "eval", "total", "bound"):
        assert isinstance(cc[k], int), k
    shared = cc["shared_update"]  # configs/base.yaml: one update program for every shape
    assert shared == 1 and cc["bound"] == 2 + cc["eval_shapes"] + shared
    assert cc["train"] == 2 + shared and 1 <= cc["eval"] <= cc["eval_shapes"]
    assert cc["total"] <= cc["bound"] and cc["pad_to_max_train"] == 1 + shared
    assert math.isfinite(r["telemetry_overhead"]["overhead_every_step"])
    assert "definition" in r["telemetry_overhead"]
    f = r["flops"]
    assert _finite_positive(f["flops_per_token"]) and "6" in f["formula"]
    assert f["matmul_params"] < f["num_params"]  # embeddings and norms are not matmul params
    assert _finite_positive(r["matmul_peak"]["gflops_best"])
    assert _finite_positive(r["mfu"])
    assert _finite_positive(r["peak_rss_bytes"])
    run = r["train_run"]  # the peak RSS is a real training run's, which met every shape
    assert run["peak_rss_bytes"] == r["peak_rss_bytes"] and run["compile_count"]["train"] == 3
    assert _finite_positive(r["bench_process_peak_rss_gib"])
    assert set(r["targets"]) == set(TARGETS)
    for name, tg in r["targets"].items():
        assert {"measured", "target", "pass"} <= set(tg), name
        assert isinstance(tg["pass"], bool) and math.isfinite(tg["measured"]), name
    assert r["targets"]["compilations"]["pass"]


def test_bench_bad_option_is_one_line_error(tmp_path):
    res = _run(["-m", "trainer", "bench", "--out", str(tmp_path / "b.json"), "bench.nope=1"],
               timeout=120)
    assert res.returncode == 2
    assert "unknown bench option" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "b.json").exists()


def test_bench_options_split():
    opts, rest = _bench_options(["model.dim=8", "bench.profile=false", "bench.matmul_n=64"])
    assert rest == ["model.dim=8"] and opts["profile"] is False and opts["matmul_n"] == 64
    with pytest.raises(ConfigError):
        _bench_options(["bench.profile=maybe"])


def _xla_dot_flops(hlo: str) -> int:
    """2 * output size * contracted size, summed over every dot of XLA's optimized HLO."""
    shapes = {m.group(1): [int(x) for x in m.group(2).split(",") if x] for m in
              re.finditer(r"^\s*(?:ROOT )?%(\S+) = \w+\[([\d,]*)\]", hlo, re.M)}
    total = 0
    for m in re.finditer(r"^\s*(?:ROOT )?%\S+ = \w+\[([\d,]*)\]\S* dot\(%([^,)]+), %[^,)]+\),"
                         r".*?lhs_contracting_dims=\{([\d,]*)\}", hlo, re.M):
        out = [int(x) for x in m.group(1).split(",") if x]
        k = np.prod([shapes[m.group(2)][int(i)] for i in m.group(3).split(",") if i])
        total += 2 * int(np.prod(out)) * int(k)
    return total


def test_model_flops_match_the_matmuls_xla_compiles():
    """An independent count: the dots in XLA's optimized HLO of one forward+backward equal the
    formula with the attention term doubled (XLA computes the full T x T scores; the formula
    counts the causal half, PaLM's MFU convention)."""
    import tensorflow as tf

    from trainer.bench import matmul_params
    from trainer.config import load_config
    from trainer.models import build_model

    cfg = load_config("configs/base.yaml", ["model.num_layers=2", "model.dim=32",
                                            "model.num_heads=2", "model.ffn_dim=64"])
    vocab, t, b = 300, 16, 4
    model = build_model(cfg.model, vocab, t)
    tokens, mask = tf.zeros((b, t), tf.int32), tf.ones((b, t), tf.float32)

    @tf.function(jit_compile=True)
    def grads(tokens, mask):
        with tf.GradientTape() as tape:
            logits = model(tokens, padding_mask=mask, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(tokens, logits))
        return tape.gradient(loss, model.trainable_variables)

    model(tokens, padding_mask=mask)
    hlo = grads.experimental_get_compiler_ir(tokens, mask)(stage="optimized_hlo")
    n, layers, d = matmul_params(model), 2, 32
    causal = batch_model_flops(np.ones((b, t)), n, layers, d)
    attention = causal - 6 * n * b * t
    assert _xla_dot_flops(hlo) == causal + attention


def test_model_flops_count_real_tokens_only():
    full = batch_model_flops(np.ones((2, 4), np.float32), 100, 2, 8)
    half = batch_model_flops(np.array([[1, 1, 0, 0], [1, 1, 0, 0]], np.float32), 100, 2, 8)
    one = batch_model_flops(np.array([[1, 1, 0, 0]], np.float32), 100, 2, 8)
    assert half == 2 * one and half < full  # pads add nothing; a sequence's cost is its own


def test_bench_data_streaming_small(tmp_path):
    out = tmp_path / "d.json"
    res = _run(["-m", "trainer.bench", "data", "--mb", "1", "--vocab-size", "512", "--out", str(out),
                "--workdir", str(tmp_path)])
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["file_bytes"] >= 1_000_000
    for phase in ("cold", "warm"):
        run = r["runs"][phase]
        assert _finite_positive(run["peak_rss_gib"]) and _finite_positive(run["wall_s"])
        assert run["train_tokens"] > 100_000
    assert r["runs"]["cold"]["train_tokens"] == r["runs"]["warm"]["train_tokens"]
    assert set(r["targets"]["data_stream_rss"]) >= {"measured", "target", "pass"}


def test_run_rss_is_the_runs_own_not_the_bench_process(tiny, monkeypatch):
    """A child forked from a big process inherits its RSS high-water mark across exec; the
    measured training run must report its own peak, not this process's."""
    from trainer.bench import measure_run_rss, peak_rss_bytes

    monkeypatch.chdir(ROOT)
    ballast = np.ones(1 << 28, np.float32)  # 1 GiB resident here, far above a tiny run
    overrides = [o for o in tiny if not o.startswith("train.steps")] + ["runtime.xla=false"]
    run = measure_run_rss("configs/base.yaml", overrides, steps=3)
    assert 0 < run["peak_rss_bytes"] < peak_rss_bytes() - 256 * 2**20, ballast.nbytes
    assert run["steps"] == 3 and run["command"][:4] == ["python", "-m", "trainer", "train"]
