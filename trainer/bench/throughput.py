"""Train-step throughput: telemetry on and off measured interleaved, and pad-to-max.

The timed region of a step is what the training loop pays: the call, the host reads of
loss/tokens/nonfinite/grad-norm every step, and of every metric on log steps. Token counts go
through the loop's own ``Throughput``; steps come from ``trainer.train.loop.build_run``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from trainer.bench.flops import batch_model_flops, matmul_params
from trainer.train.timing import Throughput

TELEMETRY_NOTE = (
    "The train step computes telemetry (per-block grad norms, update ratios, stream stats) on "
    "EVERY step inside the compiled function; the loop only reads it every log_every steps. "
    "Measured interleaved: pair i runs the same consecutive stream batches with telemetry on, "
    "then off; overhead_every_step = median over pairs of t(on) / t(off), minus 1 (a drift in "
    "machine speed hits both halves of a pair alike). overhead_log_steps_only_projected = "
    "overhead_every_step / log_every: what a design pays that runs a telemetry-on step only "
    "on log steps (at the cost of up to len(buckets) extra compilations).")


def shape_key(batch) -> str:
    B, L = batch["inputs"].shape
    return f"{int(B)}x{int(L)}"


def to_tensors(tf, batch: dict) -> dict:
    return {k: tf.constant(v) for k, v in batch.items()}


def _pct(xs, q) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q)) if len(xs) else float("nan")


def dist(xs) -> dict:
    """Median, p10/p90, IQR, mean and count of ``xs``."""
    return {"median": _pct(xs, 50), "p10": _pct(xs, 10), "p90": _pct(xs, 90),
            "iqr": _pct(xs, 75) - _pct(xs, 25), "mean": float(np.mean(xs)) if len(xs) else None,
            "n": len(xs)}


def median_overhead(pairs: list[dict]) -> float:
    """Median over pairs of ``on_s / off_s``, minus 1: the telemetry overhead."""
    if not pairs:
        raise ValueError("no pairs")
    return float(np.median([p["on_s"] / p["off_s"] for p in pairs])) - 1.0


def first_batch_of_every_shape(corpus, seed: int) -> dict[str, tuple[int, dict]]:
    """Shape key -> (step, batch): the stream's first batch of that shape (one epoch scanned)."""
    seen: dict[str, tuple[int, dict]] = {}
    for s in range(corpus.batches_per_epoch):
        b = corpus.train_batch(s, seed)
        seen.setdefault(shape_key(b), (s, b))
        if len(seen) == len(corpus.buckets):
            break
    return seen


def build(cfg, corpus, strategy):
    """A seeded ``Run`` (model, optimizer, compiled steps) exactly as the training loop builds it."""
    import keras

    from trainer.train.loop import build_run

    keras.utils.set_random_seed(cfg.train.seed)
    return build_run(cfg, corpus, strategy)


class Recorder:
    """Timed steps of one ``Run``: tokens/s (``Throughput``), step times, model FLOPs."""

    def __init__(self, run, cfg, tf):
        self.run, self.tf, self.log_every = run, tf, int(cfg.train.log_every)
        self.layers, self.dim = int(cfg.model.num_layers), int(cfg.model.dim)
        self.n_matmul = matmul_params(run.model)
        self.speed = Throughput()
        self.times: list[float] = []
        self.per_shape: dict[str, list[float]] = {}
        self.flops = 0.0
        self.warmup_s, self.warmup_shapes = 0.0, []

    def warm_up(self, corpus, seed: int) -> None:
        """Compile every bucket shape (the stream's first batch of each); not timed."""
        t0 = time.perf_counter()
        seen = first_batch_of_every_shape(corpus, seed)
        for _, b in seen.values():
            float(self.run.train_step(to_tensors(self.tf, b))["loss"])
        self.warmup_s, self.warmup_shapes = time.perf_counter() - t0, sorted(seen)

    def step(self, step: int, batch: dict, tensors: dict) -> float:
        """One timed train step at stream position ``step``; returns its seconds."""
        t0 = time.perf_counter()
        out = self.run.train_step(tensors)
        # What the loop reads every step (the float() is also the sync point) ...
        float(out["loss"]), float(out["nonfinite"]), float(out["grad_norm/global"])
        tokens = float(out["tokens"])
        if step % self.log_every == 0:  # ... and on log steps every metric
            {k: np.asarray(v) for k, v in out.items()}
        dt = time.perf_counter() - t0
        self.speed.add(dt, tokens, float(batch["mask"].size))
        self.times.append(dt)
        self.per_shape.setdefault(shape_key(batch), []).append(dt)
        self.flops += batch_model_flops(batch["mask"], self.n_matmul, self.layers, self.dim)
        return dt

    def summary(self, telemetry: bool) -> dict:
        speed, total = self.speed.summary(), float(sum(self.times))
        real, padded = speed["tokens_per_sec"], speed["padded_tokens_per_sec"]
        return {
            "telemetry": telemetry, "steps_timed": len(self.times),
            "warmup_s": self.warmup_s, "warmup_shapes": self.warmup_shapes,
            "real_tokens_per_sec": real, "padded_tokens_per_sec": padded,
            "pad_fraction_timed": 1.0 - real / padded,
            "step_time_s": dist(self.times),
            "per_shape_step_time_s": {k: dist(v) for k, v in sorted(
                self.per_shape.items(), key=lambda kv: int(kv[0].split("x")[1]))},
            "model_flops_per_sec": self.flops / total, "total_time_s": total,
            "compile_count": self.run.compile_count(),
            "matmul_params": self.n_matmul, "num_params": int(self.run.model.count_params()),
        }


def _segment(corpus, seed: int, start: int, n: int, tf) -> tuple[list, list, float]:
    """Batches ``start .. start+n-1`` of the stream, as arrays and tensors, and their data time."""
    t0 = time.perf_counter()
    batches = [corpus.train_batch(s, seed) for s in range(start, start + n)]
    tensors = [to_tensors(tf, b) for b in batches]
    return batches, tensors, (time.perf_counter() - t0) / n


def interleaved(recorders: dict, corpus, seed: int, steps: int, pairs: int, tf) -> dict:
    """Telemetry on, off, on, off, ...: ``pairs`` pairs over ``steps`` stream steps in all.

    Pair i times the same ``ceil(steps / pairs)`` consecutive batches with each recorder
    ("on" first, then "off"); the result keeps every pair and the median overhead.
    """
    k = math.ceil(steps / pairs)
    rows, data_times = [], []
    for p in range(pairs):
        batches, tensors, data_s = _segment(corpus, seed, p * k, k, tf)
        data_times.append(data_s)
        row = {"steps": [p * k, (p + 1) * k]}
        for name in ("on", "off"):
            row[f"{name}_s"] = sum(recorders[name].step(p * k + i, b, t)
                                   for i, (b, t) in enumerate(zip(batches, tensors)))
        row["ratio"] = row["on_s"] / row["off_s"]
        rows.append(row)
    return {"pairs": rows, "steps_per_half": k, "overhead_every_step": median_overhead(rows),
            "data_time_per_step_s": dist(data_times)}


def sequential(recorder: Recorder, corpus, seed: int, steps: int, tf) -> None:
    """``steps`` consecutive timed stream steps on one recorder (the pad-to-max run)."""
    batches, tensors, _ = _segment(corpus, seed, 0, steps, tf)
    for s, (b, t) in enumerate(zip(batches, tensors)):
        recorder.step(s, b, t)


def measure_eval(run, corpus, cfg, tf) -> dict:
    """Every eval shape compiled, then the fixed eval batches timed once."""
    batches = corpus.eval_batches("validation", cfg.data.eval_batches or None)
    for b in batches:  # compile every shape
        float(run.eval_step(to_tensors(tf, b))["loss_sum"])
    t0 = time.perf_counter()
    tokens = sum(float(run.eval_step(to_tensors(tf, b))["tokens"]) for b in batches)
    dt = time.perf_counter() - t0
    return {"batches": len(batches), "shapes": sorted({shape_key(b) for b in batches}),
            "compile_count": run.compile_count()["eval"],
            "real_tokens_per_sec": tokens / dt if dt else None}
