"""``python -m trainer bench [data|report]``: well-formed reports (no timing asserts), flags,
the interleaved telemetry median, and docs/performance.md's table against the committed JSON."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli

from trainer.bench import report
from trainer.bench.flops import batch_model_flops, matmul_params
from trainer.bench.throughput import median_overhead

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ("throughput_vs_pad_to_max", "compilations", "pad_fraction", "telemetry_overhead", "mfu",
           "peak_rss")
CPU_JSON = ROOT / "results" / "bench" / "cpu.json"


def _run(args: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def _finite_positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_bench_cli_writes_wellformed_json(tmp_path, tiny):
    # runtime.xla=false keeps this under a minute on 2 CPU cores (XLA compiles cost ~10 s each);
    # tracing counts are the same with and without XLA.
    out = tmp_path / "b.json"
    overrides = [o for o in tiny if o.startswith(("model.", "data."))]
    res = _run(["-m", "trainer", "bench", "--out", str(out), "--steps", "3", "--pairs", "2",
                "--no-profile", "--matmul-sizes", "128,256", *overrides, "runtime.xla=false"])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "targets:" in res.stdout
    r = json.loads(out.read_text())
    for key in ("config", "machine", "throughput", "pad_fraction", "step_time_s",
                "per_shape_step_time_s", "compile_count", "telemetry_overhead", "flops",
                "matmul_peak", "mfu", "peak_rss_bytes", "targets", "eval"):
        assert key in r, key
    assert r["config"]["model"]["dim"] == 32 and r["config"]["data"]["buckets"] == [16, 32]
    m = r["machine"]
    assert m["usable_cores"] >= 1 and m["cpu_model"] and m["tf_devices"]
    assert m["versions"]["tensorflow"] and m["versions"]["keras"]
    assert r["command"]["line"].startswith("python -m trainer bench --out ")
    t = r["throughput"]
    for k in ("real_tokens_per_sec", "padded_tokens_per_sec", "pad_to_max_real_tokens_per_sec",
              "bucketed_over_pad_to_max"):
        assert _finite_positive(t[k]), k
    assert t["padded_tokens_per_sec"] >= t["real_tokens_per_sec"]
    assert 0 <= r["pad_fraction"] < 1
    st = r["step_time_s"]
    assert _finite_positive(st["median"]) and st["p10"] <= st["median"] <= st["p90"]
    assert st["n"] == t["steps_timed"] == 4  # 2 pairs of ceil(3 / 2) steps each
    assert r["per_shape_step_time_s"] and all(k.count("x") == 1 for k in r["per_shape_step_time_s"])
    cc = r["compile_count"]
    for k in ("train", "train_telemetry_off", "eval", "total", "bound"):
        assert isinstance(cc[k], int), k
    shared = cc["shared_update"]  # configs/base.yaml: one update program for every shape
    assert shared == 1 and cc["bound"] == 2 + cc["eval_shapes"] + shared
    assert cc["train"] == 2 + shared and 1 <= cc["eval"] <= cc["eval_shapes"]
    assert cc["total"] <= cc["bound"] and cc["pad_to_max_train"] == 1 + shared
    tel = r["telemetry_overhead"]
    assert len(tel["pairs"]) == 2 and "definition" in tel
    for p in tel["pairs"]:  # every pair kept; the two halves timed the same stream steps
        assert _finite_positive(p["on_s"]) and _finite_positive(p["off_s"])
        assert p["steps"][1] - p["steps"][0] == 2
    ratios = [p["on_s"] / p["off_s"] for p in tel["pairs"]]
    assert tel["overhead_every_step"] == pytest.approx(statistics.median(ratios) - 1)
    f = r["flops"]
    assert _finite_positive(f["flops_per_token"]) and "6" in f["formula"]
    assert f["matmul_params"] < f["num_params"]  # embeddings and norms are not matmul params
    mp = r["matmul_peak"]
    assert [s["n"] for s in mp["sizes"]] == [128, 256]
    assert mp["gflops_best"] == max(s["gflops_best"] for s in mp["sizes"]) > 0
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
    table = report.markdown(r)  # a fresh report renders (every row, one per target)
    assert table.count("\n| ") == 1 + len(TARGETS)


@pytest.mark.parametrize("argv", [
    ["--pairs", "0"], ["--steps", "many"], ["--matmul-sizes", "1024,0"], ["--matmul-sizes", ""],
    ["--no-such-flag"], ["bench.profile=false"], ["data", "--mb", "-5"],
    ["data", "--vocab-size", "x"], ["report"]])
def test_bench_bad_flags_are_one_line_errors(tmp_path, argv):
    out = tmp_path / "b.json"
    res = _run(["-m", "trainer", "bench", *argv, "--out", str(out)] if argv[0] != "report"
               else ["-m", "trainer", "bench", *argv], timeout=120)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: python -m trainer bench"), lines
    assert not out.exists()


def test_python_m_trainer_bench_is_the_same_cli():
    res = _run(["-m", "trainer.bench", "data", "--mb", "0"], timeout=120)
    assert res.returncode == 2
    assert res.stderr.startswith("error: python -m trainer bench data: argument --mb")


def test_bench_report_of_a_missing_file_is_one_line(tmp_path):
    res = run_cli("bench", "report", tmp_path / "none.json")
    assert res.returncode == 2 and res.stderr.startswith("error: not a bench report")
    assert "Traceback" not in res.stderr


def test_overhead_is_the_median_of_per_pair_ratios():
    # Machine speed drifts by 10x across the pairs; each pair's own ratio is 1 + x.
    xs = [0.03, -0.01, 0.50, 0.02, 0.04]  # one noisy pair (0.50); median 0.03
    drift = [1.0, 3.0, 10.0, 0.5, 2.0]  # the noisy pair ran on the slowest stretch
    pairs = [{"on_s": d * (1 + x), "off_s": d} for x, d in zip(xs, drift)]
    assert median_overhead(pairs) == pytest.approx(0.03)
    # Ratio of totals (the old method) is pulled by where the drift fell: not 0.03.
    totals = sum(p["on_s"] for p in pairs) / sum(p["off_s"] for p in pairs) - 1
    assert abs(totals - 0.03) > 0.01
    # Even count: the mean of the two middle ratios.
    assert median_overhead([{"on_s": 1.1, "off_s": 1.0}, {"on_s": 2.6, "off_s": 2.0}]) \
        == pytest.approx(0.2)
    with pytest.raises(ValueError):
        median_overhead([])


def test_performance_table_is_generated_from_the_committed_json():
    r = json.loads(CPU_JSON.read_text())
    page = ROOT / report.PAGE
    block = report.readme_block(page.read_text(encoding="utf-8"), "cpu")
    assert block is not None, f"{report.PAGE} lacks the <!-- bench:cpu --> ... <!-- /bench -->"
    assert block == report.markdown(r), (f"{report.PAGE}'s table drifted from results/bench/"
                                         "cpu.json: python -m trainer bench report "
                                         f"results/bench/cpu.json --readme {report.PAGE}")
    assert set(r["targets"]) == set(TARGETS)


def test_report_command_prints_the_table_and_rewrites_a_block(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- bench:cpu -->\nstale\n<!-- /bench -->\nafter\n")
    res = _run(["-m", "trainer", "bench", "report", str(CPU_JSON), "--readme", str(readme)])
    assert res.returncode == 0, res.stderr
    table = report.markdown(json.loads(CPU_JSON.read_text()))
    assert res.stdout == table
    assert readme.read_text() == f"intro\n<!-- bench:cpu -->\n{table}<!-- /bench -->\nafter\n"


def test_markdown_marks_a_failed_target():
    r = json.loads(CPU_JSON.read_text())
    failing = {**r, "targets": {k: {**v, "pass": k != "mfu"} for k, v in r["targets"].items()}}
    rows = [ln for ln in report.markdown(failing).splitlines() if ln.startswith("| ")][1:]
    assert len(rows) == len(TARGETS)
    assert [ln.split(" | ")[0] for ln in rows if "FAIL" in ln] == ["| model-FLOPs utilisation"]


def test_versions_and_peak_rss_helpers():
    import tensorflow as tf

    from trainer.machine import peak_rss_mb, versions

    v = versions(("tensorflow", "surely-not-installed-pkg"))
    assert v == {"tensorflow": tf.__version__, "surely-not-installed-pkg": None}
    import psutil

    ballast = np.ones(1 << 26, np.float32)  # 256 MiB touched, resident now
    now = psutil.Process().memory_info().rss / 2**20
    assert now - 1 <= peak_rss_mb() < 64 * 1024, ballast.nbytes  # MiB, at least today's RSS


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


@pytest.mark.slow
def test_bench_data_streaming_small(tmp_path):
    out = tmp_path / "d.json"
    res = _run(["-m", "trainer", "bench", "data", "--mb", "1", "--vocab-size", "512", "--out", str(out),
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


@pytest.mark.slow
def test_run_rss_is_the_runs_own_not_the_bench_process(tiny, monkeypatch):
    """A child forked from a big process inherits its RSS high-water mark across exec; the
    measured training run must report its own peak, not this process's."""
    from trainer.bench.memory import measure_run_rss
    from trainer.machine import peak_rss_mb

    monkeypatch.chdir(ROOT)
    ballast = np.ones(1 << 28, np.float32)  # 1 GiB resident here, far above a tiny run
    overrides = [o for o in tiny if not o.startswith("train.steps")] + ["runtime.xla=false"]
    run = measure_run_rss("configs/base.yaml", overrides, steps=3)
    assert 0 < run["peak_rss_bytes"] < peak_rss_mb() * 2**20 - 256 * 2**20, ballast.nbytes
    assert run["steps"] == 3 and run["command"][:4] == ["python", "-m", "trainer", "train"]
