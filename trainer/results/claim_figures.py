"""Figures a finding needs beyond the sweep plots, written next to the reference runs.

- ``collapse_by_depth.png`` (F4): the centred rank-1 residual of every block's tokens at step 0,
  mid-training and the end, LayerNorm Pre-LN with and without residual, seeds faint around the
  mean. Read left to right for depth, light to dark for training: collapse present at init
  (before any learning) is not an effect of failing to train.
- ``loss_by_depth.png`` (F11): final eval loss at 2, 6 and 12 blocks per variant.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from trainer.atomic import save_figure  # noqa: E402
from trainer.results.palette import NORM_COLORS  # noqa: E402

WHEN = (("first", "step 0", ":"), ("mid", "mid-training", "--"), ("last", "final", "-"))
RESIDUAL_COLORS = {"true": NORM_COLORS["layer"], "false": "#7f7f7f"}


def _at(run, tag: str, which: str):
    curve = run.eval.get(tag)
    if not curve:
        return None
    return {"first": curve[0], "mid": curve[len(curve) // 2], "last": curve[-1]}[which][1]


def collapse_by_depth(ref, path: Path) -> Path | None:
    """F4's figure from the grid's LayerNorm Pre-LN runs; None when they are not there."""
    runs = {r: [x for x in ref.groups.get("grid", [])
                if x.cfg.model.norm == "layer" and x.cfg.model.placement == "pre"
                and str(x.cfg.model.residual).lower() == r] for r in ("true", "false")}
    if not all(runs.values()):
        return None
    layers = ref.num_layers("grid")
    fig, ax = plt.subplots(figsize=(7.5, 4.2), constrained_layout=True)
    drawn = False
    for residual, members in runs.items():
        for which, label, style in WHEN:
            rows = [[_at(run, f"probe/rank1_residual/block_{i}", which) for i in range(layers)]
                    for run in members]
            rows = [row for row in rows if None not in row]
            if not rows:
                continue
            for row in rows:
                ax.plot(range(layers), row, style, color=RESIDUAL_COLORS[residual], alpha=0.2, lw=1)
            drawn = True
            mean = [sum(col) / len(col) for col in zip(*rows)]
            ax.plot(range(layers), mean, style, color=RESIDUAL_COLORS[residual], lw=2, marker="o",
                    label=f"{'residual' if residual == 'true' else 'no residual'}, {label}")
    if not drawn:  # runs without the per-block probe (made before it existed)
        plt.close(fig)
        return None
    ax.set_xlabel("block")
    ax.set_ylabel("‖X − 1·meanᵀ‖ / ‖X‖  (0 = rank-1 collapse)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("F4: token identity through depth (LayerNorm, Pre-LN)", loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    save_figure(fig, path)
    return path


def loss_by_depth(ref, path: Path) -> Path | None:
    """F11's figure: final eval loss vs number of blocks per variant, seeds as dots, mean line
    (a diverged seed is drawn as a cross at the top); None without the depth sub-sweeps."""
    from trainer.results.findings_depth import VARIANTS, depths, losses

    ds = sorted({*depths(ref), ref.num_layers("grid")})
    if len(ds) < 2:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.2), constrained_layout=True)
    top = max((v for name, want in VARIANTS for d in ds
               for v in losses(ref, None, want, d, quiet=True).values()
               if v is not None and v != float("inf")), default=4.0) + 0.2
    for (name, want), color in zip(VARIANTS, ("#1f77b4", "#ff7f0e", "#7f7f7f", "#2ca02c")):
        means = []
        for d in ds:
            vals = [v for v in losses(ref, None, want, d, quiet=True).values() if v is not None]
            finite = [v for v in vals if v != float("inf")]
            ax.scatter([d] * len(finite), finite, color=color, alpha=0.35, s=14)
            ax.scatter([d] * (len(vals) - len(finite)), [top] * (len(vals) - len(finite)),
                       color=color, marker="x")
            means.append(sum(vals) / len(vals) if vals and len(finite) == len(vals) else None)
        xs = [d for d, m in zip(ds, means) if m is not None]
        ax.plot(xs, [m for m in means if m is not None], "-o", color=color, lw=2, label=name)
    base = ref.baselines("grid")
    if base:
        for key, style in (("unigram", ":"), ("bigram", "--")):
            ax.axhline(base[key], color="k", ls=style, lw=1, label=f"{key} baseline")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ds, [str(d) for d in ds])
    ax.set_xlabel("blocks")
    ax.set_ylabel("final eval loss (nats)")
    ax.set_title("F11: final loss vs depth (× = diverged)", loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    save_figure(fig, path)
    return path


def write_claim_figures(ref) -> list[Path]:
    out = [collapse_by_depth(ref, ref.root / "grid" / "plots" / "collapse_by_depth.png"),
           loss_by_depth(ref, ref.root / "depth" / "plots" / "loss_by_depth.png")]
    return [p for p in out if p is not None]
