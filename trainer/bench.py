"""``python -m trainer bench``: a performance report of one config, as JSON.

Everything but step 7 runs in one process, in this order:

1. matmul peak: a 2048x2048 @ 2048x2048 fp32 XLA matmul (best of a few reps) -> GFLOP/s. MFU is
   measured against this number, not against a datasheet.
2. bucketed stream, telemetry as in ``runtime.telemetry`` (on by default): the real train step
   (``make_train_step``, XLA per ``runtime.xla``) over ``corpus.train_batch(step, seed)`` for
   consecutive steps. One batch of every bucket shape is run first (compilation, not timed).
   The timed region of a step is what the training loop pays: the call, the host reads of
   loss/tokens/nonfinite/grad-norm every step, and of every metric on log steps.
3. the same with ``telemetry=False`` -> telemetry overhead.
4. eval step over the fixed eval batches -> eval compile count.
5. a profile of one shape: forward only / forward+backward / full step.
6. pad-to-max: the same model on ``data.buckets=[max_len]`` (one static shape, the usual
   hand-written pipeline), prepared through the same ``Corpus`` -> headline ratio.
7. peak RSS: ``python -m trainer train`` with the same config in a child process, for as many
   steps as the stream needs to show every bucket shape (``measure_run_rss``).

``python -m trainer.bench data --mb 200`` is the data-streaming check (``bench_data``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

import trainer

FLOPS_FORMULA = (
    "training model FLOPs of a batch = sum over real tokens of 6*N + 6*n_layers*d*n_seq, "
    "N = non-embedding matmul parameters (attention q/k/v/o kernels, FFN kernels, output head "
    "kernel; no biases, norms or embeddings), n_seq = real length of the token's sequence "
    "(causal attention: QK^T and AV cost 2*2*d*(t+1) per token at position t forward, averaged "
    "over a sequence -> 2*d*n forward, x3 for forward+backward). Pads count as no model FLOPs. "
    "flops_per_token reports 6*N + 6*n_layers*d*T with T the token-weighted mean real length.")
TELEMETRY_NOTE = (
    "The train step computes telemetry (per-block grad norms, update ratios, stream stats) on "
    "EVERY step inside the compiled function; the loop only reads it every log_every steps, "
    "so the read is cheap but the compute is paid every step. overhead_every_step = "
    "t_step(telemetry on) / t_step(telemetry off) - 1 (median-of-shapes weighted by the stream, "
    "i.e. ratio of mean step times over the same batches). overhead_log_steps_only_projected = "
    "overhead_every_step / log_every: what a design pays that runs a telemetry-off step on "
    "ordinary steps and the telemetry-on step only on log steps (at the cost of up to "
    "len(buckets) extra compilations).")
GIB = 1024 ** 3


# ---------------------------------------------------------------------------------- helpers
def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux ru_maxrss is in KiB, macOS in bytes)."""
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def _pct(xs, q) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if len(xs) else float("nan")


def _dist(xs) -> dict:
    return {"median": _pct(xs, 50), "p10": _pct(xs, 10), "p90": _pct(xs, 90),
            "iqr": _pct(xs, 75) - _pct(xs, 25), "mean": float(np.mean(xs)) if len(xs) else None,
            "n": len(xs)}


def _versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for name in ("tensorflow", "keras", "numpy", "datasets", "tokenizers", "omegaconf"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _device_info(tf) -> dict:
    return {"tf_devices": [d.name for d in tf.config.list_logical_devices()],
            "physical_devices": [f"{d.device_type}:{d.name}" for d in tf.config.list_physical_devices()],
            "cpu_count": os.cpu_count(),
            "sched_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "machine": platform.machine(), "processor": platform.processor() or None,
            "platform": platform.platform()}


def matmul_peak(tf, n: int = 2048, reps: int = 5) -> dict:
    """fp32 XLA matmul of two n x n matrices: best-of and median GFLOP/s over ``reps`` runs."""
    a = tf.random.stateless_normal((n, n), seed=(1, 2))
    b = tf.random.stateless_normal((n, n), seed=(3, 4))
    mm = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=True)
    mm(a, b).numpy()  # compile
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mm(a, b).numpy()
        times.append(time.perf_counter() - t0)
    flops = 2.0 * n ** 3
    return {"n": n, "reps": reps, "gflops_best": flops / min(times) / 1e9,
            "gflops_median": flops / float(np.median(times)) / 1e9,
            "note": "fp32, tf.function(jit_compile=True), includes the device->host copy of the result"}


def matmul_params(model) -> int:
    """Non-embedding matmul parameters: every ``kernel`` variable (attention, FFN, head)."""
    return int(sum(int(np.prod(v.shape)) for v in model.trainable_variables
                   if v.path.rsplit("/", 1)[-1] == "kernel"))


def batch_model_flops(mask: np.ndarray, n_matmul: int, n_layers: int, dim: int) -> float:
    """Training model FLOPs of one batch (see FLOPS_FORMULA): real tokens only."""
    n = mask.sum(axis=1).astype(np.float64)
    return float(6.0 * n_matmul * n.sum() + 6.0 * n_layers * dim * (n ** 2).sum())


# ---------------------------------------------------------------------------------- measurements
def _build(cfg, corpus, tf):
    import keras

    from trainer.models import build_model
    from trainer.train.loop import make_optimizer

    keras.utils.set_random_seed(cfg.train.seed)
    model = build_model(cfg.model, corpus.vocab_size, corpus.max_len)
    optimizer = make_optimizer(cfg.train)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _to_tensors(tf, batch: dict) -> dict:
    return {k: tf.constant(v) for k, v in batch.items()}


def _shape_key(batch) -> str:
    B, L = batch["inputs"].shape
    return f"{int(B)}x{int(L)}"


def measure_train(cfg, corpus, *, telemetry: bool, steps: int, tf, model_flops=None) -> dict:
    """Warm up every bucket shape, then time ``steps`` consecutive stream steps."""
    from trainer.train.step import make_train_step

    model, optimizer = _build(cfg, corpus, tf)
    step_fn = make_train_step(model, optimizer, clip_norm=cfg.train.clip_norm,
                              telemetry=telemetry, xla=cfg.runtime.xla,
                              shared_update=cfg.runtime.shared_update)
    seed = cfg.train.seed
    log_every = int(cfg.train.log_every)

    # Warm-up: the first batch of every shape in the stream.
    t0 = time.perf_counter()
    seen = first_batch_of_every_shape(corpus, seed)
    for _, b in seen.values():
        float(step_fn(_to_tensors(tf, b))["loss"])
    warmup_s = time.perf_counter() - t0
    traces_after_warmup = step_fn.experimental_get_tracing_count()

    n_matmul = matmul_params(model)
    times, real, padded, flops, data_times = [], 0.0, 0.0, 0.0, []
    per_shape: dict[str, list[float]] = {}
    for s in range(steps):
        td = time.perf_counter()
        batch = corpus.train_batch(s, seed)
        tensors = _to_tensors(tf, batch)
        data_times.append(time.perf_counter() - td)
        t0 = time.perf_counter()
        out = step_fn(tensors)
        # What the loop reads every step (the float() is also the sync point) ...
        float(out["loss"]), float(out["tokens"]), float(out["nonfinite"])
        float(out["grad_norm/global"])
        if s % log_every == 0:  # ... and on log steps every metric
            {k: np.asarray(v) for k, v in out.items()}
        dt = time.perf_counter() - t0
        times.append(dt)
        per_shape.setdefault(_shape_key(batch), []).append(dt)
        real += float(batch["mask"].sum())
        padded += float(batch["mask"].size)
        flops += batch_model_flops(batch["mask"], n_matmul, cfg.model.num_layers, cfg.model.dim)
    total = float(sum(times))
    return {
        "telemetry": telemetry,
        "steps_timed": steps,
        "warmup_s": warmup_s,
        "warmup_shapes": sorted(seen),
        "real_tokens_per_sec": real / total,
        "padded_tokens_per_sec": padded / total,
        "pad_fraction_timed": 1.0 - real / padded,
        "step_time_s": _dist(times),
        "per_shape_step_time_s": {k: _dist(v) for k, v in sorted(per_shape.items(),
                                                               key=lambda kv: int(kv[0].split("x")[1]))},
        "data_time_per_step_s": _dist(data_times),
        "model_flops_per_sec": flops / total,
        "total_time_s": total,
        "compile_count": int(step_fn.experimental_get_tracing_count()),
        "compile_count_after_warmup": int(traces_after_warmup),
        "matmul_params": n_matmul,
        "num_params": int(model.count_params()),
        "_model": model, "_optimizer": optimizer, "_step": step_fn,
    }


def first_batch_of_every_shape(corpus, seed: int) -> dict[str, tuple[int, dict]]:
    """Shape key -> (step, batch): the stream's first batch of that shape (one epoch scanned)."""
    seen: dict[str, tuple[int, dict]] = {}
    for s in range(corpus.batches_per_epoch):
        b = corpus.train_batch(s, seed)
        seen.setdefault(_shape_key(b), (s, b))
        if len(seen) == len(corpus.buckets):
            break
    return seen


def measure_run_rss(config_path: str, overrides: list[str], steps: int) -> dict:
    """Peak RSS of a real training run (``python -m trainer train``) in a child process.

    ``steps`` is where the stream has shown every bucket shape: by then the run has compiled
    every train and eval program it will ever hold, and later steps reuse the same memory.
    """
    with tempfile.TemporaryDirectory(prefix="normlab-bench-") as tmp:
        cmd = [sys.executable, "-m", "trainer", "train", "--config", str(config_path),
               "--workdir", tmp, "--quiet", *overrides, f"train.steps={steps}"]
        t0 = time.perf_counter()
        # Through a small intermediate interpreter: a child forked straight from this (large)
        # process starts with its resident pages counted, and Linux keeps that high-water
        # mark across exec, so the run's ru_maxrss would read at least this process's RSS.
        hop = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"
        proc = subprocess.run([sys.executable, "-c", hop, *cmd], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"training child failed: {proc.stderr.strip()[-500:]}")
        summary = json.loads((Path(tmp) / "summary.json").read_text())
    return {"command": ["python", *("<tmp>" if c == tmp else c for c in cmd[1:])], "steps": steps,
            "wall_s": time.perf_counter() - t0, "compile_count": summary["compile_count"],
            "peak_rss_bytes": int(summary["peak_rss_mb"] * 1024 * 1024)}


def measure_eval(cfg, corpus, model, tf) -> dict:
    from trainer.train.step import make_eval_step

    eval_step = make_eval_step(model, xla=cfg.runtime.xla)
    batches = corpus.eval_batches("validation", cfg.data.eval_batches or None)
    shapes = sorted({_shape_key(b) for b in batches})
    for b in batches:  # compile every shape
        float(eval_step(_to_tensors(tf, b))["loss_sum"])
    t0 = time.perf_counter()
    tokens = 0.0
    for b in batches:
        tokens += float(eval_step(_to_tensors(tf, b))["tokens"])
    dt = time.perf_counter() - t0
    return {"batches": len(batches), "shapes": shapes, "compile_count":
            int(eval_step.experimental_get_tracing_count()),
            "real_tokens_per_sec": tokens / dt if dt else None}


def profile_shape(cfg, corpus, model, steps: dict, tf, reps: int = 5) -> dict:
    """Forward / forward+backward / full step (telemetry off and on) on the most common shape.

    ``steps`` holds the already compiled train steps {"off": fn, "on": fn} (the model's weights
    move under them; the timing does not care).
    """
    from trainer.train.step import masked_loss

    counts: dict[str, int] = {}
    first: dict[str, dict] = {}
    for s in range(min(corpus.batches_per_epoch, 200)):
        b = corpus.train_batch(s, cfg.train.seed)
        k = _shape_key(b)
        counts[k] = counts.get(k, 0) + 1
        first.setdefault(k, b)
    key = max(counts, key=counts.get)
    batch = _to_tensors(tf, first[key])
    xla = cfg.runtime.xla
    variables = model.trainable_variables

    def fwd(b):
        logits = model(b["inputs"], padding_mask=b["mask"], training=True)
        ls, c = masked_loss(logits, b["targets"], b["mask"])
        return ls / tf.maximum(c, 1.0)

    def fwd_bwd(b):
        with tf.GradientTape() as tape:
            loss = fwd(b)
        return tf.linalg.global_norm(tape.gradient(loss, variables))

    fns = {"forward": tf.function(fwd, jit_compile=xla),
           "forward_backward": tf.function(fwd_bwd, jit_compile=xla),
           "full_step_telemetry_off": steps["off"], "full_step_telemetry_on": steps["on"]}
    out = {"shape": key}
    for name, fn in fns.items():
        r = fn(batch)
        np.asarray(r if not isinstance(r, dict) else r["loss"])
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            r = fn(batch)
            np.asarray(r if not isinstance(r, dict) else r["loss"])
            ts.append(time.perf_counter() - t0)
        out[name + "_s"] = float(np.median(ts))
    out["backward_s_est"] = out["forward_backward_s"] - out["forward_s"]
    out["optimizer_and_clip_s_est"] = out["full_step_telemetry_off_s"] - out["forward_backward_s"]
    out["telemetry_s_est"] = out["full_step_telemetry_on_s"] - out["full_step_telemetry_off_s"]
    return out


def _target(measured, target, passed, unit: str = "", note: str = "") -> dict:
    d = {"measured": measured, "target": target, "pass": bool(passed)}
    if unit:
        d["unit"] = unit
    if note:
        d["note"] = note
    return d


# ---------------------------------------------------------------------------------- bench
BENCH_OPTIONS = {"profile": True, "pad_to_max": True, "matmul_n": 2048}


def _bench_options(overrides: list[str]) -> tuple[dict, list[str]]:
    """Split ``bench.<option>=value`` overrides (options of this report) from config overrides."""
    from trainer.config import ConfigError

    opts, rest = dict(BENCH_OPTIONS), []
    for item in overrides:
        if not item.startswith("bench."):
            rest.append(item)
            continue
        key, _, value = item[len("bench."):].partition("=")
        if key not in opts or not value:
            raise ConfigError(f"unknown bench option '{item}'; valid: "
                              + ", ".join(f"bench.{k}=<{type(v).__name__}>" for k, v in opts.items()))
        if isinstance(opts[key], bool):
            if value.lower() not in ("true", "false"):
                raise ConfigError(f"bench.{key} must be true or false, got '{value}'")
            opts[key] = value.lower() == "true"
        else:
            try:
                opts[key] = int(value)
            except ValueError:
                raise ConfigError(f"bench.{key} must be an integer, got '{value}'") from None
    return opts, rest


def bench(config_path: str, overrides: list[str], out: Path, steps: int) -> dict:
    """Measure ``config_path`` + ``overrides``; print a summary, write JSON to ``out``, return it.

    Overrides ``bench.profile=false``, ``bench.pad_to_max=false`` and ``bench.matmul_n=N`` tune
    the report itself (quick smoke runs); every other override is a config override.
    """
    from omegaconf import OmegaConf

    from trainer.config import ConfigError, load_config, to_dict
    from trainer.data import prepare
    from trainer.memory import keep_large_blocks
    from trainer.train.rundir import write_json

    keep_large_blocks()  # as a training run does: measure the allocator the runs use
    if steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {steps}")
    tf = trainer.import_tensorflow_quietly()
    opts, cfg_overrides = _bench_options(list(overrides))
    cfg = load_config(config_path, cfg_overrides)
    phases = {}
    t_start = time.perf_counter()
    tf.config.experimental.enable_op_determinism()  # as the training loop does

    t0 = time.perf_counter()
    corpus = prepare(cfg.data, seed=cfg.train.seed)
    prepare_s = phases["prepare"] = time.perf_counter() - t0
    stats = corpus.stats()

    def timed(name, fn, *a, **k):
        t = time.perf_counter()
        r = fn(*a, **k)
        phases[name] = time.perf_counter() - t
        return r

    peak = timed("matmul_peak", matmul_peak, tf, opts["matmul_n"])
    telemetry = bool(cfg.runtime.telemetry)
    main = timed("train_bucketed", measure_train, cfg, corpus, telemetry=telemetry, steps=steps, tf=tf)
    other = timed("train_bucketed_other_telemetry", measure_train, cfg, corpus,
                  telemetry=not telemetry, steps=steps, tf=tf)
    on, off = (main, other) if telemetry else (other, main)
    ev = timed("eval", measure_eval, cfg, corpus, main["_model"], tf)
    prof = (timed("profile", profile_shape, cfg, corpus, main["_model"],
                  {"on": on["_step"], "off": off["_step"]}, tf) if opts["profile"] else None)

    # Pad-to-max: one static shape [tokens_per_batch // max_len, max_len], same Corpus code.
    pm_cfg = OmegaConf.merge(cfg, {"data": {"buckets": [int(cfg.data.max_len)]}})
    pm_corpus = prepare(pm_cfg.data, seed=cfg.train.seed)
    if opts["pad_to_max"]:
        pm = timed("train_pad_to_max", measure_train, pm_cfg, pm_corpus, telemetry=telemetry,
                   steps=steps, tf=tf)
    else:  # smoke runs: the bucketed run stands in (ratio 1 by construction, marked as skipped)
        pm = dict(main)
    for r in (on, off, pm):
        for k in ("_model", "_optimizer", "_step"):
            r.pop(k, None)
    # The default run's memory, in its own process (this one holds three models and more).
    run_steps = max(max(s for s, _ in first_batch_of_every_shape(corpus, cfg.train.seed).values())
                    + 1, int(cfg.train.warmup_steps))
    run = timed("train_run_rss", measure_run_rss, config_path, cfg_overrides, run_steps)

    n_buckets = len(corpus.buckets)
    n_eval_shapes = len(ev["shapes"])
    shared = int(bool(cfg.runtime.shared_update))  # the one shape-independent update program
    bound = n_buckets + n_eval_shapes + shared
    compiles = on["compile_count"] + ev["compile_count"]
    overhead = on["total_time_s"] / off["total_time_s"] - 1.0
    log_every = int(cfg.train.log_every)
    overhead_proj = overhead / log_every
    ratio = main["real_tokens_per_sec"] / pm["real_tokens_per_sec"]
    mfu = main["model_flops_per_sec"] / (peak["gflops_best"] * 1e9)
    rss = run["peak_rss_bytes"]
    lengths = corpus._windows["train"][1].astype(np.float64)  # real length of every window
    mean_len = float((lengths ** 2).sum() / lengths.sum())  # token-weighted
    n_matmul = main["matmul_params"]
    L, d = int(cfg.model.num_layers), int(cfg.model.dim)

    report = {
        "config": to_dict(cfg),
        "command": {"config_path": str(config_path), "overrides": list(overrides), "steps": steps},
        "bench_options": opts,
        "phase_s": phases,
        "device": _device_info(tf),
        "versions": _versions(),
        "xla": bool(cfg.runtime.xla),
        "prepare_s": prepare_s,
        "buckets": corpus.buckets,
        "bucket_shapes": [list(s) for s in corpus.bucket_shapes()],
        "pad_fraction": stats["pad_fraction"],
        "bucket_histogram": stats["bucket_histogram"],
        "throughput": {
            "real_tokens_per_sec": main["real_tokens_per_sec"],
            "padded_tokens_per_sec": main["padded_tokens_per_sec"],
            "pad_to_max_real_tokens_per_sec": pm["real_tokens_per_sec"],
            "pad_to_max_padded_tokens_per_sec": pm["padded_tokens_per_sec"],
            "bucketed_over_pad_to_max": ratio,
            "telemetry": telemetry,
        },
        "step_time_s": main["step_time_s"],
        "per_shape_step_time_s": main["per_shape_step_time_s"],
        "compile_count": {"train": on["compile_count"], "train_telemetry_off": off["compile_count"],
                          "eval": ev["compile_count"], "total": compiles,
                          "bound": bound, "buckets": n_buckets, "eval_shapes": n_eval_shapes,
                          "shared_update": shared,
                          "pad_to_max_train": pm["compile_count"],
                          "note": "tracing counts of the tf.functions; with jit_compile each trace "
                                  "is one XLA compilation. total = train + eval."},
        "telemetry_overhead": {"overhead_every_step": overhead,
                               "overhead_log_steps_only_projected": overhead_proj,
                               "log_every": log_every,
                               "step_time_on_s": on["step_time_s"],
                               "step_time_off_s": off["step_time_s"],
                               "real_tokens_per_sec_on": on["real_tokens_per_sec"],
                               "real_tokens_per_sec_off": off["real_tokens_per_sec"],
                               "definition": TELEMETRY_NOTE},
        "flops": {"matmul_params": n_matmul, "num_params": main["num_params"],
                  "mean_real_seq_len_token_weighted": mean_len,
                  "flops_per_token": 6.0 * n_matmul + 6.0 * L * d * mean_len,
                  "model_flops_per_sec": main["model_flops_per_sec"],
                  "formula": FLOPS_FORMULA},
        "matmul_peak": peak,
        "mfu": mfu,
        "peak_rss_bytes": rss,
        "peak_rss_gib": rss / GIB,
        "train_run": run,
        "bench_process_peak_rss_gib": peak_rss_bytes() / GIB,
        "eval": ev,
        "profile": prof,
        "runs": {"bucketed": main, "bucketed_other_telemetry": other, "pad_to_max": pm},
        "pad_to_max": {"shape": [list(s) for s in pm_corpus.bucket_shapes()],
                       "pad_fraction": pm_corpus.stats()["pad_fraction"]},
    }
    report["targets"] = {
        "throughput_vs_pad_to_max": _target(ratio, 2.0, ratio >= 2.0, "x",
                                            "bucketed real tokens/s / pad-to-max real tokens/s"
                                            + ("" if opts["pad_to_max"] else
                                               " (SKIPPED: bench.pad_to_max=false)")),
        "compilations": _target(compiles, bound, compiles <= bound, "count",
                                "train + eval tracing counts <= len(buckets) + eval shapes"
                                + (" + 1 shared update program" if shared else "")),
        "pad_fraction": _target(stats["pad_fraction"], 0.10, stats["pad_fraction"] <= 0.10,
                                "fraction", "train epoch pad fraction, " + str(cfg.data.source)),
        "telemetry_overhead": _target(overhead, 0.05, overhead <= 0.05, "fraction",
                                      "current design: telemetry computed every step; "
                                      f"log-steps-only design projects {overhead_proj:.4f}"),
        "mfu": _target(mfu, 0.45, mfu >= 0.45, "fraction",
                       "model FLOPs/s / measured fp32 XLA matmul peak (best of reps)"),
        "peak_rss": _target(rss / GIB, 3.0, rss / GIB <= 3.0, "GiB",
                            f"ru_maxrss of `trainer train` with this config for {run_steps} "
                            "steps: every train and eval shape compiled"),
    }
    report["wall_s"] = time.perf_counter() - t_start
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report)
    print(summary_text(report, out))
    return report


def summary_text(r: dict, out: Path) -> str:
    t = r["throughput"]
    lines = [f"bench {r['command']['config_path']} {' '.join(r['command']['overrides'])}".rstrip(),
             f"  buckets {r['buckets']}  pad fraction {r['pad_fraction']:.3f}  xla={r['xla']}",
             f"  real tokens/s {t['real_tokens_per_sec']:,.0f}  padded tokens/s "
             f"{t['padded_tokens_per_sec']:,.0f}  (telemetry={t['telemetry']})",
             f"  pad-to-max real tokens/s {t['pad_to_max_real_tokens_per_sec']:,.0f}  "
             f"ratio {t['bucketed_over_pad_to_max']:.2f}x",
             f"  step time median {r['step_time_s']['median'] * 1e3:.1f} ms  p10 "
             f"{r['step_time_s']['p10'] * 1e3:.1f}  p90 {r['step_time_s']['p90'] * 1e3:.1f}",
             f"  compilations {r['compile_count']['total']} (bound {r['compile_count']['bound']})",
             f"  telemetry overhead {r['telemetry_overhead']['overhead_every_step'] * 100:.1f}% "
             f"every step, {r['telemetry_overhead']['overhead_log_steps_only_projected'] * 100:.1f}% "
             f"projected log-steps-only",
             f"  matmul peak {r['matmul_peak']['gflops_best']:.1f} GFLOP/s  model "
             f"{r['flops']['model_flops_per_sec'] / 1e9:.1f} GFLOP/s  MFU {r['mfu'] * 100:.1f}%",
             f"  peak RSS {r['peak_rss_gib']:.2f} GiB (training run, {r['train_run']['steps']} "
             f"steps); bench process {r['bench_process_peak_rss_gib']:.2f} GiB",
             "  targets:"]
    for name, tg in r["targets"].items():
        m = tg["measured"]
        lines.append(f"    [{'PASS' if tg['pass'] else 'FAIL'}] {name}: "
                     f"{m:.4g} vs {tg['target']}")
    lines.append(f"  wrote {out}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- data streaming
def _write_text_file(path: Path, size_mb: int, seed: int = 0) -> int:
    """~size_mb MB of paragraphs of the embedded corpus, shuffled per pass, one per line."""
    from trainer.config import load_config
    from trainer.data import sources

    cfg = load_config(None, [])
    splits = sources.load_splits(cfg.data)
    paras = [t.replace("\n", " ") for s in sources.SPLITS for t in sources.texts_of(splits[s])]
    rng = np.random.default_rng(seed)
    target = size_mb * 1_000_000
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            for i in rng.permutation(len(paras)):
                line = paras[i] + "\n"
                f.write(line)
                written += len(line.encode("utf-8"))
                if written >= target:
                    break
    return written


def _child_prepare(file: str, cache: str, vocab: int, conn) -> None:
    from trainer.config import load_config
    from trainer.data import prepare

    t0 = time.perf_counter()
    cfg = load_config(None, ["data.source=files", f"data.files={file}", f"data.cache_dir={cache}",
                             f"data.vocab_size={vocab}"])
    corpus = prepare(cfg.data)
    st = corpus.stats()
    conn.send({"prepare_s": time.perf_counter() - t0, "peak_rss_bytes": peak_rss_bytes(),
               "train_tokens": st["target_tokens"]["train"], "examples": st["examples"],
               "pad_fraction": st["pad_fraction"]})
    conn.close()


def bench_data(size_mb: int, out: Path, vocab_size: int = 8192, workdir: str | None = None) -> dict:
    """Tokenise a generated ~size_mb MB text file (cold cache) and report peak RSS and time.

    ``prepare`` runs in a fresh child process; RSS is the child's ru_maxrss and, sampled every
    0.1 s with psutil, the sum over the child and all its descendants (datasets workers).
    A second prepare in another child measures the warm-cache path.
    """
    import multiprocessing as mp

    import psutil

    from trainer.train.rundir import write_json

    tmp = Path(tempfile.mkdtemp(prefix="normlab-bench-data-", dir=workdir))
    text = tmp / "corpus.txt"
    t0 = time.perf_counter()
    nbytes = _write_text_file(text, size_mb)
    gen_s = time.perf_counter() - t0
    ctx = mp.get_context("spawn")
    runs = {}
    for phase in ("cold", "warm"):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_child_prepare, args=(str(text), str(tmp / "cache"), vocab_size, child))
        t0 = time.perf_counter()
        p.start()
        proc = psutil.Process(p.pid)
        peak_sum = 0
        result = None
        while p.is_alive() and result is None:
            try:
                rss = proc.memory_info().rss + sum(c.memory_info().rss
                                                   for c in proc.children(recursive=True))
                peak_sum = max(peak_sum, rss)
            except psutil.Error:
                pass
            if parent.poll(0.1):
                result = parent.recv()
        p.join()
        if result is None:
            raise RuntimeError(f"data bench: prepare failed (exit code {p.exitcode})")
        result["wall_s"] = time.perf_counter() - t0
        result["peak_rss_sampled_tree_bytes"] = peak_sum
        result["peak_rss_gib"] = max(peak_sum, result["peak_rss_bytes"]) / GIB
        runs[phase] = result
    worst = max(r["peak_rss_gib"] for r in runs.values())
    report = {"size_mb": size_mb, "file_bytes": nbytes, "generate_s": gen_s, "vocab_size": vocab_size,
              "runs": runs, "cpu_count": os.cpu_count(), "versions": _versions(),
              "targets": {"data_stream_rss": _target(worst, 2.0, worst <= 2.0, "GiB",
                                                     "peak RSS of prepare (cold and warm cache)")}}
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report)
    c = runs["cold"]
    print(f"data bench {size_mb} MB: cold prepare {c['wall_s']:.1f} s, peak RSS {c['peak_rss_gib']:.2f} "
          f"GiB; warm {runs['warm']['wall_s']:.1f} s, {runs['warm']['peak_rss_gib']:.2f} GiB; "
          f"{c['train_tokens']:,} train tokens -> "
          f"[{'PASS' if worst <= 2.0 else 'FAIL'}] RSS <= 2 GiB; wrote {out}")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.bench")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("data", help="data-streaming check: tokenise a generated text file")
    d.add_argument("--mb", type=int, default=200, help="size of the generated text file")
    d.add_argument("--vocab-size", type=int, default=8192)
    d.add_argument("--out", default="bench_data.json")
    d.add_argument("--workdir", default=None, help="where the temp file and cache go")
    args = p.parse_args(argv)
    if args.command == "data":
        bench_data(args.mb, Path(args.out), args.vocab_size, args.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
