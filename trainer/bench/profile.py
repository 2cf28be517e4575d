"""Where a step's time goes on the stream's most common shape: forward, backward, update, telemetry."""

from __future__ import annotations

import time

import numpy as np

from trainer.bench.throughput import shape_key, to_tensors


def most_common_batch(corpus, seed: int, scan: int = 200) -> tuple[str, dict]:
    """The first batch of the most frequent shape among the stream's first ``scan`` steps."""
    counts: dict[str, int] = {}
    first: dict[str, dict] = {}
    for s in range(min(corpus.batches_per_epoch, scan)):
        b = corpus.train_batch(s, seed)
        k = shape_key(b)
        counts[k] = counts.get(k, 0) + 1
        first.setdefault(k, b)
    key = max(counts, key=counts.get)
    return key, first[key]


def _median_time(fn, batch, reps: int) -> float:
    def call():
        r = fn(batch)
        np.asarray(r if not isinstance(r, dict) else r["loss"])

    call()  # compile
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def profile_shape(cfg, corpus, model, steps: dict, tf, reps: int = 5) -> dict:
    """Forward / forward+backward / full step (telemetry off and on) on the most common shape.

    ``steps`` holds the already compiled train steps {"off": fn, "on": fn} (the model's weights
    move under them; the timing does not care).
    """
    from trainer.train.step import masked_loss

    key, batch = most_common_batch(corpus, cfg.train.seed)
    batch = to_tensors(tf, batch)
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
    out = {"shape": key, **{name + "_s": _median_time(fn, batch, reps) for name, fn in fns.items()}}
    out["backward_s_est"] = out["forward_backward_s"] - out["forward_s"]
    out["optimizer_and_clip_s_est"] = out["full_step_telemetry_off_s"] - out["forward_backward_s"]
    out["telemetry_s_est"] = out["full_step_telemetry_on_s"] - out["full_step_telemetry_off_s"]
    return out
