"""F8: does a sequence's output depend on how many real tokens its batch partners have?

For each run directory the model is restored from its last checkpoint
(``trainer.train.checkpoint.restore_trained``).
Each of N test sequences (the target) is cut to ``max_len // 2`` real tokens (rest pads)
and evaluated in row 0 of a batch of width ``max_len`` twice: once with partners of SHORT real
length (8 … 16 tokens, rest pads) and once with the same partners at full LONG length. The
target row and the batch shape are identical; only the partners' real lengths differ, so a
per-token norm gives bit-identical logits and a batch norm does not. Recorded: max |Δ logits|
over the target's real positions, max over targets, in training mode (batch statistics; running
statistics untouched) and inference mode (running statistics).

    python -m trainer analyze composition RUN_DIR... --out results/reference/analysis
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.analysis import analyse_runs, analysis_main, option
from trainer.analysis.batch_size import MODES, full_windows
from trainer.atomic import save_figure, subplots
from trainer.config import ConfigError

PARTNERS = 7  # rows besides the target: batches of 8 sequences
SHORT = (8, 16)  # partners' real lengths in the SHORT batch, cycling through this range


def _cut(batch: dict, row: int, n: int, pad_id: int) -> dict:
    """Row ``row`` of ``batch`` with only its first ``n`` positions real, the rest pads."""
    inputs = batch["inputs"][row].copy()
    mask = np.zeros_like(batch["mask"][row])
    inputs[n:], mask[:n] = pad_id, 1.0
    return {"inputs": inputs, "mask": mask}


def composed(batch: dict, target: int, partners: list[int], lengths: list[int], n: int,
             pad_id: int) -> dict:
    """One batch: the target (``n`` real tokens) in row 0, partner i with ``lengths[i]`` real."""
    rows = [_cut(batch, target, n, pad_id)] + [_cut(batch, p, m, pad_id)
                                                for p, m in zip(partners, lengths)]
    return {k: np.stack([r[k] for r in rows]) for k in ("inputs", "mask")}


def max_delta(model, batch: dict, n: int, pad_id: int, training: bool) -> float:
    """max |Δ logits| over every target's real positions, short vs long partners."""
    from trainer.telemetry.probes import frozen_state

    rows, width = batch["inputs"].shape
    k = min(PARTNERS, rows - 1)
    short = [SHORT[0] + i % (SHORT[1] - SHORT[0] + 1) for i in range(k)]
    worst = 0.0
    with frozen_state(model):
        for t in range(rows):
            partners = [(t + 1 + i) % rows for i in range(k)]
            out = [np.asarray(model(b["inputs"], padding_mask=b["mask"], training=training))
                   for b in (composed(batch, t, partners, lengths, n, pad_id)
                             for lengths in (short, [width] * k))]
            worst = max(worst, float(np.abs(out[0][0, :n] - out[1][0, :n]).max()))
    return worst


def analyse(run_dir: Path, n: int) -> list[dict]:
    from trainer.train.checkpoint import restore_trained

    cfg, corpus, model = restore_trained(run_dir)
    if n < 2:
        raise ConfigError(f"--sequences must be >= 2 (targets need partners), got {n}")
    batch = full_windows(corpus, n)
    real = corpus.max_len // 2
    return [{"run": run_dir.name, "norm": cfg.model.norm, "seed": int(cfg.train.seed),
             "mode": mode, "max_abs_delta": max_delta(model, batch, real, corpus.pad_id,
                                                      mode == "train")} for mode in MODES]


def plot(rows: list[dict], path: Path) -> None:
    """Max |Δ logits| per norm x mode, seeds as points, on a log axis floored at LOG_AXIS_FLOOR."""
    from trainer.analysis.thresholds import DEPENDENT_MIN, INVARIANT_MAX
    from trainer.results.palette import LOG_AXIS_FLOOR, NORM_COLORS

    norms = list(dict.fromkeys(r["norm"] for r in rows))
    fig, ax = subplots(figsize=(7.5, 4.2), constrained_layout=True)
    for i, norm in enumerate(norms):
        for j, (mode, marker) in enumerate((("train", "o"), ("inference", "s"))):
            ys = [max(r["max_abs_delta"], LOG_AXIS_FLOOR) for r in rows
                  if r["norm"] == norm and r["mode"] == mode]
            x = i + (j - 0.5) * 0.3
            ax.scatter([x] * len(ys), ys, marker=marker, color=NORM_COLORS.get(norm, "k"),
                       alpha=0.8)
    for mode, marker in (("train", "o"), ("inference", "s")):
        ax.scatter([], [], marker=marker, color="0.4", label=f"{mode} mode")
    ax.axhline(INVARIANT_MAX, color="0.4", ls=":", lw=1, label="invariant below")
    ax.axhline(DEPENDENT_MIN, color="0.4", ls="--", lw=1, label="dependent above")
    ax.set_yscale("log")
    ax.set_ylim(LOG_AXIS_FLOOR / 3, None)
    ax.set_xticks(range(len(norms)), norms)
    ax.set_ylabel(f"max |Δ logits|, short vs long partners (log; 0 drawn at {LOG_AXIS_FLOOR:g})")
    ax.set_title("F8: the same sequence, partners of short vs full real length", loc="left")
    ax.legend(frameon=False)
    save_figure(fig, path)


def run(run_dirs: list[Path], out: Path, n: int) -> list[dict]:
    return analyse_runs(run_dirs, out, "composition", lambda d: analyse(d, n), plot, lambda r: (
        f"{r['run']:45s} {r['mode']:9s} max|Δ logits| {r['max_abs_delta']:.3g}"))


main = analysis_main("composition", __doc__, run, n=option(
    "--sequences", type=int, default=16, help="test sequences (targets)"))
