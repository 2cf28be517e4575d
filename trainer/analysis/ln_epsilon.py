"""F18: ε and the two-pass variance, measured in float32 numpy and with the lab's LayerNorm layer.

LN of one float32 token of ``FEATURES`` features, in numpy with a one-pass (E[x²] − E[x]²) or a
two-pass variance at each ε of ``EPSILONS``, and with the lab's layer at its own ε (method
``lab``): on a token with a large common offset (``OFFSET`` + ``OFFSET_SPREAD``·N(0, 1), seeds
``SEEDS``), the max error against the float64 two-pass LN of the same float32 input (∞ for a
NaN/Inf output); on a constant token (every feature ``OFFSET``), what the output is.

``ln_epsilon.csv`` has columns ``token, method, epsilon, seed, error, features, nan, inf,
max_abs``: an ``offset`` row per method, ε and seed (``error``); a ``constant`` row per method
and ε (its output's NaN and Inf counts out of ``features``, and the largest finite |y|). The
claim (``trainer.findings.inference``) judges these rows, so the findings page needs no
TensorFlow. Figure: ``ln_epsilon.png``.

    python -m trainer analyze ln-epsilon --out results/reference/analysis
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from trainer.analysis.thresholds import (EPSILONS, OFFSET, OFFSET_SPREAD, SPREAD_KEPT,
                                         SPREAD_LOST)
from trainer.atomic import save_figure, subplots
from trainer.results.plots import DPI

FEATURES = 64
METHODS = ("one-pass", "two-pass")
SEEDS = (0, 1, 2)


def offset_token(seed: int, offset: float = OFFSET) -> np.ndarray:
    """A float32 token with a large common offset: ``offset`` + OFFSET_SPREAD·N(0, 1) per feature."""
    rng = np.random.default_rng(seed)
    return (offset + OFFSET_SPREAD * rng.standard_normal(FEATURES)).astype(np.float32)


def constant_token() -> np.ndarray:
    """Every feature OFFSET (exact in float32, and so are its sums: its variance is exactly 0)."""
    return np.full(FEATURES, OFFSET, np.float32)


def numpy_ln(x: np.ndarray, epsilon: float, method: str, dtype=np.float32) -> np.ndarray:
    """LN of one token without γ/β, all arithmetic in ``dtype``: the variance one-pass
    (E[x²] − E[x]²) or two-pass (the mean of squared deviations from the mean)."""
    x = np.asarray(x, dtype)
    mean = x.mean(dtype=dtype)
    if method == "two-pass":
        var = np.square(x - mean).mean(dtype=dtype)
    else:
        var = np.square(x).mean(dtype=dtype) - mean * mean
    with np.errstate(all="ignore"):  # a negative variance or 0/0 is part of what is shown
        return (x - mean) / np.sqrt(var + dtype(epsilon))


def spread_error(y: np.ndarray, x: np.ndarray, epsilon: float) -> float:
    """max |y − LN(x)| against the float64 two-pass LN of the same float32 input ``x``; inf when
    ``y`` holds a NaN or Inf."""
    y = np.asarray(y, np.float64)
    if not np.isfinite(y).all():
        return float("inf")
    return float(np.abs(y - numpy_ln(x, epsilon, "two-pass", np.float64)).max())


def lab_layer_norm(x: np.ndarray) -> tuple[np.ndarray, float]:
    """The lab's LayerNorm layer (``make_norm("layer")``, fresh: γ = 1, β = 0) on one token, and
    its own ε."""
    from trainer.models.norms import make_norm

    layer = make_norm("layer")
    return np.asarray(layer(np.asarray(x, np.float32)[None, None]))[0, 0], float(layer.epsilon)


def _rows(method: str, eps: float, ln, offset: float) -> list[dict]:
    """The ``offset`` rows (one per seed) and the ``constant`` row of ``ln(x)`` at ``eps``."""
    rows = [{"token": "offset", "method": method, "epsilon": eps, "seed": s,
             "error": spread_error(ln(offset_token(s, offset)), offset_token(s, offset), eps),
             "features": "", "nan": "", "inf": "", "max_abs": ""} for s in SEEDS]
    y = np.asarray(ln(constant_token()))
    finite = np.abs(y[np.isfinite(y)])
    rows.append({"token": "constant", "method": method, "epsilon": eps, "seed": "", "error": "",
                 "features": y.size, "nan": int(np.isnan(y).sum()), "inf": int(np.isinf(y).sum()),
                 "max_abs": float(finite.max()) if finite.size else 0.0})
    return rows


def measure(lab=lab_layer_norm, offset: float = OFFSET) -> list[dict]:
    """The rows of ``ln_epsilon.csv``: numpy's ``METHODS`` at each of ``EPSILONS``, then
    ``lab(x) -> (LN(x), its ε)`` (the lab's layer) at its own ε; ``offset``: the offset token's."""
    rows = []
    for method in METHODS:
        for eps in EPSILONS:
            rows += _rows(method, eps, lambda x: numpy_ln(x, eps, method), offset)
    _, eps = lab(constant_token())
    return rows + _rows("lab", eps, lambda x: lab(x)[0], offset)


def describe_output(row: dict) -> str:
    """A constant token's LN output (its ``ln_epsilon.csv`` row) in a word: NaN, Inf, 0, or its
    largest entry."""
    if int(row["nan"]):
        return "NaN"
    if int(row["inf"]):
        return "Inf"
    top = float(row["max_abs"])
    return "0" if not top else f"max |y| {top:.3g}"


def plot(rows: list[dict], path: Path) -> None:
    """A grid of variance method × ε, each cell coloured by what LN made of the offset token
    (kept its spread, lost it, NaN/Inf; worst seed) and labelled with that error and with the
    constant token's output."""
    from matplotlib.colors import ListedColormap

    worst: dict = {}
    for r in rows:
        key = (r["method"], float(r["epsilon"]))
        if r["token"] == "offset":
            worst[key] = max(worst.get(key, -math.inf), float(r["error"]))
    constant = {(r["method"], float(r["epsilon"])): r for r in rows if r["token"] == "constant"}
    methods = list(dict.fromkeys(m for m, _ in worst))
    grid = np.full((len(methods), len(EPSILONS)), np.nan)
    fig, ax = subplots(figsize=(8, 3.6), constrained_layout=True)
    for (m, e), w in worst.items():
        i, j = methods.index(m), EPSILONS.index(e)
        grid[i, j] = 3 if math.isinf(w) else 2 if w > SPREAD_LOST else 0 if w < SPREAD_KEPT else 1
        ax.text(j, i, f"offset: {'NaN/Inf' if math.isinf(w) else f'{w:.2g}'}\n"
                      f"constant: {describe_output(constant[(m, e)])}",
                ha="center", va="center", fontsize=9)
    colors = ListedColormap(["#a1d99b", "#dddddd", "#fdae6b", "#fc9272"])
    ax.imshow(np.ma.masked_invalid(grid), cmap=colors, vmin=-0.5, vmax=3.5, aspect="auto")
    ax.set_xticks(range(len(EPSILONS)), [f"ε = {e:g}" for e in EPSILONS])
    ax.set_yticks(range(len(methods)), [{"lab": "lab LayerNorm"}.get(m, m) for m in methods])
    ax.set_title(f"F18 (mechanism demonstration): LN in float32; green keeps the spread "
                 f"(< {SPREAD_KEPT:g}),\norange loses it (> {SPREAD_LOST:g}), red NaN/Inf; "
                 f"worst of 3 seeds", loc="left", fontsize=10)
    save_figure(fig, path, dpi=DPI)


def main(argv: list[str]) -> int:
    from trainer.analysis.ln_numbers import table_main

    return table_main("ln-epsilon", __doc__, measure, plot, argv)
