"""``python -m trainer bench``: a performance report of one config, as JSON.

Everything but the peak RSS runs in one process, in this order:

1. matmul peak: XLA matmuls in the model's compute dtype (float32; bfloat16 when
   ``runtime.mixed_precision``) at a few sizes (best of a few reps each) -> GFLOP/s. MFU is
   measured against the best of them, not against a datasheet.
2. the bucketed stream with telemetry on and off, interleaved (``throughput.interleaved``):
   the real train steps (``build_run``, XLA per ``runtime.xla``) over ``corpus.train_batch``;
   every bucket shape compiled first (not timed). -> tokens/s, step times, telemetry overhead.
3. eval step over the fixed eval batches -> eval compile count.
4. a profile of one shape: forward only / forward+backward / full step (``--no-profile``: off).
5. pad-to-max: the same model on ``data.buckets=[max_len]`` (one static shape, the usual
   hand-written pipeline), prepared through the same ``Corpus`` -> headline ratio.
6. peak RSS: ``python -m trainer train`` with the same config in a child process, for as many
   steps as the stream needs to show every bucket shape (``memory.measure_run_rss``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import trainer
from trainer.bench import flops, memory, profile, report, throughput
from trainer.machine import machine_identity, peak_rss_mb, versions


class Phases(dict):
    """Seconds per phase of the bench (``phase_s`` in the report)."""

    def run(self, name: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self[name] = time.perf_counter() - t0


def _with(cfg, **sections):
    from omegaconf import OmegaConf

    return OmegaConf.merge(cfg, sections)


def measure_bucketed(cfg, corpus, strategy, args, tf) -> tuple[dict, dict]:
    """Telemetry on and off over the same stream batches, interleaved in ``args.pairs`` pairs."""
    rec = {}
    for name, on in (("on", True), ("off", False)):
        c = _with(cfg, runtime={"telemetry": on})
        rec[name] = throughput.Recorder(throughput.build(c, corpus, strategy), c, tf)
        rec[name].warm_up(corpus, cfg.train.seed)
    pairs = throughput.interleaved(rec, corpus, cfg.train.seed, args.steps, args.pairs, tf)
    return rec, pairs


def measure_pad_to_max(cfg, strategy, args, tf) -> tuple[dict, object]:
    """The same model on one static shape [tokens_per_batch // max_len, max_len]."""
    from trainer.data import prepare

    pm_cfg = _with(cfg, data={"buckets": [int(cfg.data.max_len)]})
    pm_corpus = prepare(pm_cfg.data, seed=cfg.train.seed)
    rec = throughput.Recorder(throughput.build(pm_cfg, pm_corpus, strategy), pm_cfg, tf)
    rec.warm_up(pm_corpus, cfg.train.seed)
    throughput.sequential(rec, pm_corpus, cfg.train.seed, args.steps, tf)
    return rec.summary(bool(cfg.runtime.telemetry)), pm_corpus


def _compile_counts(corpus, train: dict, off: dict, ev: dict, pm: dict | None, cfg) -> dict:
    shared = int(bool(cfg.runtime.shared_update))  # the one shape-independent update program
    total = train["train"] + ev["compile_count"] + train["eval_train_mode"]
    return {"train": train["train"], "train_telemetry_off": off["train"],
            "eval": ev["compile_count"], "total": total,
            "bound": len(corpus.buckets) + len(ev["shapes"]) + shared,
            "buckets": len(corpus.buckets), "eval_shapes": len(ev["shapes"]),
            "shared_update": shared, "pad_to_max_train": pm["train"] if pm else None,
            "note": "tracing counts of the tf.functions (Run.compile_count); with jit_compile "
                    "each trace is one XLA compilation. total = train + eval."}


def machine_block(tf) -> dict:
    """The `machine` block of a report: identity (cores, CPU, accelerators), package versions."""
    return {**machine_identity(), "python": sys.version.split()[0], "versions": versions(),
            "tf_devices": [d.name for d in tf.config.list_logical_devices()]}


def _telemetry(pairs: dict, on: dict, off: dict, log_every: int) -> dict:
    return {**pairs, "overhead_log_steps_only_projected": pairs["overhead_every_step"] / log_every,
            "log_every": log_every, "definition": throughput.TELEMETRY_NOTE,
            "step_time_on_s": on["step_time_s"], "step_time_off_s": off["step_time_s"],
            "real_tokens_per_sec_on": on["real_tokens_per_sec"],
            "real_tokens_per_sec_off": off["real_tokens_per_sec"]}


def _flops(cfg, corpus, main: dict) -> dict:
    n_matmul = main["matmul_params"]
    return {"matmul_params": n_matmul, "num_params": main["num_params"],
            **flops.flops_per_token(corpus.window_lengths("train"), n_matmul,
                                    int(cfg.model.num_layers), int(cfg.model.dim)),
            "model_flops_per_sec": main["model_flops_per_sec"], "formula": flops.FLOPS_FORMULA}


def assemble(cfg, corpus, args, m: dict, tf) -> dict:
    """The report from the measurements ``m`` (see ``bench``)."""
    from trainer.config import to_dict

    main, on, off, pm = m["main"], m["on"], m["off"], m["pad_to_max"] or m["main"]
    ratio = main["real_tokens_per_sec"] / pm["real_tokens_per_sec"]
    peak, run = m["matmul_peak"], m["train_run"]
    r = {
        "config": to_dict(cfg), "command": args.command_record, "phase_s": dict(m["phases"]),
        "bench_options": {"profile": args.profile, "pad_to_max": args.pad_to_max,
                          "matmul_sizes": args.matmul_sizes, "pairs": args.pairs},
        "machine": machine_block(tf), "xla": bool(cfg.runtime.xla),
        "mixed_precision": bool(cfg.runtime.mixed_precision),
        "prepare_s": m["phases"]["prepare"], "buckets": corpus.buckets,
        "bucket_shapes": [list(s) for s in corpus.bucket_shapes()],
        "pad_fraction": m["stats"]["pad_fraction"], "bucket_histogram": m["stats"]["bucket_histogram"],
        "throughput": {"real_tokens_per_sec": main["real_tokens_per_sec"],
                       "padded_tokens_per_sec": main["padded_tokens_per_sec"],
                       "pad_to_max_real_tokens_per_sec": pm["real_tokens_per_sec"],
                       "pad_to_max_padded_tokens_per_sec": pm["padded_tokens_per_sec"],
                       "bucketed_over_pad_to_max": ratio, "telemetry": main["telemetry"],
                       "steps_timed": main["steps_timed"]},
        "step_time_s": main["step_time_s"], "per_shape_step_time_s": main["per_shape_step_time_s"],
        "compile_count": _compile_counts(corpus, main["compile_count"], off["compile_count"],
                                         m["eval"], m["pad_to_max"] and pm["compile_count"], cfg),
        "telemetry_overhead": _telemetry(m["pairs"], on, off, int(cfg.train.log_every)),
        "flops": _flops(cfg, corpus, main),
        "matmul_peak": peak, "mfu": main["model_flops_per_sec"] / (peak["gflops_best"] * 1e9),
        "peak_rss_bytes": run["peak_rss_bytes"], "peak_rss_gib": run["peak_rss_bytes"] / report.GIB,
        "train_run": run, "bench_process_peak_rss_gib": peak_rss_mb() / 1024,
        "eval": m["eval"], "profile": m["profile"],
        "runs": {"bucketed": main, "bucketed_other_telemetry": off if main is on else on,
                 "pad_to_max": m["pad_to_max"]},
        "pad_to_max": {"shape": [list(s) for s in m["pm_corpus"].bucket_shapes()],
                       "pad_fraction": m["pm_corpus"].stats()["pad_fraction"]},
    }
    r["targets"] = report.targets(r)
    return r


def measure(cfg, corpus, args, tf, phases: Phases) -> dict:
    """Every measurement of the report, in the order of this module's docstring."""
    from trainer.train.strategy import compute_dtype, make_strategy

    strategy = make_strategy(cfg.runtime.strategy)
    m = {"phases": phases, "stats": corpus.stats()}
    dtype = compute_dtype(cfg.runtime.mixed_precision)  # what the model runs
    m["matmul_peak"] = phases.run("matmul_peak", flops.matmul_peak, tf, args.matmul_sizes,
                                  dtype=dtype)
    rec, m["pairs"] = phases.run("train_interleaved", measure_bucketed, cfg, corpus, strategy,
                                 args, tf)
    m["on"], m["off"] = rec["on"].summary(True), rec["off"].summary(False)
    m["main"] = m["on"] if cfg.runtime.telemetry else m["off"]
    main_run = rec["on" if cfg.runtime.telemetry else "off"].run
    m["eval"] = phases.run("eval", throughput.measure_eval, main_run, corpus, cfg, tf)
    steps = {k: r.run.train_step for k, r in rec.items()}
    m["profile"] = (phases.run("profile", profile.profile_shape, cfg, corpus, main_run.model,
                               steps, tf) if args.profile else None)
    del rec, main_run, steps
    m["pad_to_max"], m["pm_corpus"] = (None, None)
    if args.pad_to_max:
        m["pad_to_max"], m["pm_corpus"] = phases.run("train_pad_to_max", measure_pad_to_max,
                                                     cfg, strategy, args, tf)
    else:  # smoke runs: the bucketed run stands in (ratio 1 by construction, marked skipped)
        from trainer.data import prepare

        m["pm_corpus"] = prepare(_with(cfg, data={"buckets": [int(cfg.data.max_len)]}).data)
    m["train_run"] = phases.run("train_run_rss", memory.measure_run_rss, args.config,
                                args.overrides, memory.steps_to_every_shape(corpus, cfg))
    return m


def bench(args) -> dict:
    """Measure ``args.config`` + ``args.overrides``; print a summary, write JSON to ``args.out``."""
    from trainer.config import load_config
    from trainer.data import prepare
    from trainer.memory import keep_large_blocks
    from trainer.atomic import write_json
    from trainer.train.strategy import precision

    keep_large_blocks()  # as a training run does: measure the allocator the runs use
    tf = trainer.import_tensorflow_quietly()
    cfg = load_config(args.config, args.overrides)
    phases, t_start = Phases(), time.perf_counter()
    tf.config.experimental.enable_op_determinism()  # as the training loop does
    corpus = phases.run("prepare", prepare, cfg.data, seed=cfg.train.seed)
    with precision(cfg):
        m = measure(cfg, corpus, args, tf, phases)
    r = assemble(cfg, corpus, args, m, tf)
    r["wall_s"] = time.perf_counter() - t_start
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, r)
    print(report.summary_text(r, out))
    return r
