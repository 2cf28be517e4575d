"""Model FLOPs of a training batch, and the XLA matmul peak that MFU is measured against: in the
dtype the model computes in (float32, or bfloat16 under ``runtime.mixed_precision``)."""

from __future__ import annotations

import time

import numpy as np

FLOPS_FORMULA = (
    "training model FLOPs of a batch = sum over real tokens of 6*N + 6*n_layers*d*n_seq, "
    "N = non-embedding matmul parameters (attention q/k/v/o kernels, FFN kernels, output head "
    "kernel; no biases, norms or embeddings), n_seq = real length of the token's sequence "
    "(causal attention: QK^T and AV cost 2*2*d*(t+1) per token at position t forward, averaged "
    "over a sequence -> 2*d*n forward, x3 for forward+backward). Pads count as no model FLOPs. "
    "flops_per_token reports 6*N + 6*n_layers*d*T with T the token-weighted mean real length.")
MATMUL_NOTE = ("tf.function(jit_compile=True), includes the device->host copy of the result; "
               "the peak is the best size's best rep; bfloat16 when runtime.mixed_precision")


def matmul_params(model) -> int:
    """Non-embedding matmul parameters: every ``kernel`` variable (attention, FFN, head)."""
    return int(sum(int(np.prod(v.shape)) for v in model.trainable_variables
                   if v.path.rsplit("/", 1)[-1] == "kernel"))


def batch_model_flops(mask: np.ndarray, n_matmul: int, n_layers: int, dim: int) -> float:
    """Training model FLOPs of one batch (see FLOPS_FORMULA): real tokens only."""
    n = mask.sum(axis=1).astype(np.float64)
    return float(6.0 * n_matmul * n.sum() + 6.0 * n_layers * dim * (n ** 2).sum())


def flops_per_token(lengths: np.ndarray, n_matmul: int, n_layers: int, dim: int) -> dict:
    """Mean training FLOPs per real token over windows of real ``lengths`` (token-weighted)."""
    lengths = np.asarray(lengths, np.float64)
    mean_len = float((lengths ** 2).sum() / lengths.sum())
    return {"mean_real_seq_len_token_weighted": mean_len,
            "flops_per_token": 6.0 * n_matmul + 6.0 * n_layers * dim * mean_len}


def matmul_gflops(tf, n: int, reps: int = 5, dtype: str = "float32") -> dict:
    """XLA matmul of two n x n matrices: best-of and median GFLOP/s over ``reps`` runs."""
    a = tf.cast(tf.random.stateless_normal((n, n), seed=(1, 2)), dtype)
    b = tf.cast(tf.random.stateless_normal((n, n), seed=(3, 4)), dtype)
    mm = tf.function(lambda x, y: tf.matmul(x, y), jit_compile=True)
    mm(a, b).numpy()  # compile
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mm(a, b).numpy()
        times.append(time.perf_counter() - t0)
    flops = 2.0 * n ** 3
    return {"n": n, "reps": reps, "gflops_best": flops / min(times) / 1e9,
            "gflops_median": flops / float(np.median(times)) / 1e9}


def matmul_peak(tf, sizes: list[int], reps: int = 5, dtype: str = "float32") -> dict:
    """The matmul peak over several sizes: each size's numbers, and the best of them all."""
    runs = [matmul_gflops(tf, n, reps, dtype) for n in sizes]
    best = max(runs, key=lambda r: r["gflops_best"])
    return {"sizes": runs, "gflops_best": best["gflops_best"], "n_best": best["n"],
            "dtype": dtype, "note": MATMUL_NOTE}
