"""The figures of pre-registration 3's instability claims (sub-sweep ``scale/inst_lr``), each
drawing the numbers its claim judges, per seed:

- ``max_logit_vs_rate.png`` (I1): each run's max attention logit over training (the maximum over
  blocks of ``instruments_max``) against the learning rate, Pre-LN, QK-norm and the z-loss,
  seeds as points, the geometric mean joined (log-log: I1 judges logarithms);
- ``log_z_at_top.png`` (I2): the mean log Z (``output/log_z_mean``, training) over the steps at
  ``R_TOP``, Pre-LN against the z-loss, one line per seed, 0 drawn (where the z-loss pulls it).

Each returns None until every run it draws has finished (nothing drawn from a partial set).
"""

from __future__ import annotations

import math

from trainer.findings import instability
from trainer.findings.figures_best import figure, finish
from trainer.findings.reference import Reference
from trainer.findings.thresholds import INSTABILITY_GRID, INSTABILITY_SEEDS, R_TOP

COLORS = {"Pre-LN": "tab:blue", "QK-norm": "tab:orange", "z-loss": "tab:green"}


def _runs(ref: Reference, name: str) -> dict | None:
    """(rate, seed) -> run of variant ``name`` in ``inst_lr``; None unless every one finished."""
    scale = ref.below(instability.SCALE)
    runs = {(float(r.cfg.train.lr), int(r.cfg.train.seed)): r
            for r in scale.matching(instability.GROUP, **instability.VARIANTS[name])}
    want = [(lr, s) for lr in INSTABILITY_GRID for s in INSTABILITY_SEEDS]
    return runs if all(k in runs and runs[k].finished for k in want) else None


def max_logit_vs_rate(ref: Reference):
    found = {n: _runs(ref, n) for n in instability.VARIANTS}
    if any(v is None for v in found.values()):
        return None
    fig, ax = figure()
    for name, runs in found.items():
        points = {(lr, s): instability.max_logit(r) for (lr, s), r in runs.items()}
        ax.scatter([lr for (lr, _), v in points.items() if v], [v for v in points.values() if v],
                   color=COLORS[name], alpha=0.35, s=14)
        means = [(lr, math.exp(sum(math.log(points[(lr, s)]) for s in INSTABILITY_SEEDS)
                               / len(INSTABILITY_SEEDS)))
                 for lr in INSTABILITY_GRID
                 if all(points[(lr, s)] for s in INSTABILITY_SEEDS)]
        ax.plot(*zip(*means), color=COLORS[name], marker="o", lw=1.5, label=name)
    ax.axvline(R_TOP, color="0.6", ls=":", lw=1, label=f"R_TOP = {R_TOP:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    finish(ax, "learning rate", "max attention logit over training",
           "I1: attention-logit growth vs rate (seeds as points, geometric mean joined)")
    return fig


def log_z_at_top(ref: Reference):
    found = {n: _runs(ref, n) for n in ("Pre-LN", "z-loss")}
    if any(v is None for v in found.values()):
        return None
    curves = {(name, seed): runs[(R_TOP, seed)].train.get(instability.LOG_Z)
              for name, runs in found.items() for seed in INSTABILITY_SEEDS}
    if not all(curves.values()):
        return None
    fig, ax = figure()
    for (name, seed), curve in curves.items():
        ax.plot(*zip(*curve), color=COLORS[name], lw=1, alpha=0.8,
                label=name if seed == INSTABILITY_SEEDS[0] else None)
    ax.axhline(0.0, color="0.4", lw=0.8)
    finish(ax, "step", "mean log Z = logsumexp(logits)",
           f"I2: log Z over training at lr {R_TOP:g}, with and without the z-loss (one line per seed)")
    return fig


FIGURES = {f"{instability.PLOTS}/max_logit_vs_rate.png": max_logit_vs_rate,
           f"{instability.PLOTS}/log_z_at_top.png": log_z_at_top}
