"""Figures a finding needs beyond the sweep plots, written next to the reference runs.

- ``collapse_by_depth.png`` (F4): the centred rank-1 residual of every block's tokens at step 0,
  mid-training and the end, LayerNorm Pre-LN with and without residual, seeds faint around the
  mean. Read left to right for depth, light to dark for training: collapse present at init
  (before any learning) is not an effect of failing to train.
- ``loss_by_depth.png`` (F11): final test loss at 2, 6 (from ``best``) and 12 blocks per
  variant; a mean over fewer seeds than the other points is marked (hollow, faint segments).
- ``dyt/plots/saturation.png`` (the lab's DyT without its authors' recipe, F14's context):
  final test loss, and DyT saturation at step 0 (hollow) and at the end (filled), vs initial α,
  seeds as points, mean as line, with the baselines and ``SATURATED_MIN`` drawn in.
- ``dyt_recipe/plots/saturation.png`` (F14, DyT by its authors' recipe): (a) final test loss per
  initial α, seeds as points, mean ± 95 % interval, diverged seeds as × at the top, with the
  baselines; (b) the most saturated DyT (max over every location: attention, FFN, final) at each
  evaluation step, one thin line per seed, one colour per α, ``SATURATED_MIN`` dashed. The
  numbers come from ``dyt_recipe_values``.
- F2, F3, F5 (the claims judged on ``best``): ``figures_best``.

F13's and F18's figures (``analysis/ln_numbers.png``, ``analysis/ln_epsilon.png``) are drawn by
their analyses (``analyze ln-numbers``, ``analyze ln-epsilon``) beside their CSVs.

Each function draws one figure from the reference and returns it, or None when the runs it
draws are missing; ``write_claim_figures`` saves them (``FIGURES``: path -> function).
"""

from __future__ import annotations

import math
from pathlib import Path

from trainer.atomic import save_figure, subplots
from trainer.findings import figures_best, figures_scale
from trainer.findings.core import GROUP
from trainer.findings.figures_best import baseline_lines, figure, seeds_and_interval
from trainer.findings.thresholds import EMBED_UNIT_SCALE, SATURATED_MIN
from trainer.results.palette import NORM_COLORS, shades
from trainer.results.plots import DPI

WHEN = (("first", "step 0", ":"), ("mid", "mid-training", "--"), ("last", "final", "-"))
RESIDUAL_COLORS = {"true": NORM_COLORS["layer"], "false": "#7f7f7f"}
# F11's variants (depth.VARIANTS order): the three LayerNorm stacks in shades of LN's colour, told
# apart by line style and marker too; no norm in its own grey.
_LN = shades(NORM_COLORS["layer"], 3)
DEPTH_LOOKS = ((NORM_COLORS["layer"], "-", "o"), (_LN[2], "--", "s"), (NORM_COLORS["none"], "-", "D"),
               (_LN[0], "-.", "^"))


def _at(run, tag: str, which: str):
    curve = run.eval.get(tag)
    if not curve:
        return None
    return {"first": curve[0], "mid": curve[len(curve) // 2], "last": curve[-1]}[which][1]


def collapse_by_depth(ref):
    """F4's figure from the best-rate LayerNorm Pre-LN runs; None when they are not there."""
    runs = {r: [x for x in ref.groups.get(GROUP, [])
                if x.cfg.model.norm == "layer" and x.cfg.model.placement == "pre"
                and int(x.cfg.train.warmup_steps) == 50
                and str(x.cfg.model.residual).lower() == r] for r in ("true", "false")}
    if not all(runs.values()):
        return None
    layers = ref.num_layers(GROUP)
    fig, ax = subplots(figsize=(7.5, 4.2), constrained_layout=True)
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
        return None
    ax.set_xlabel("block")
    ax.set_ylabel("‖X − 1·meanᵀ‖ / ‖X‖  (0 = rank-1 collapse)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("F4: token identity through depth (LayerNorm, Pre-LN)", loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return fig


def loss_by_depth(ref):
    """F11's figure: final test loss vs number of blocks per variant, seeds as dots, mean line
    (a diverged seed is drawn as a cross at the top); a mean over fewer seeds than the figure's
    other points is hollow and its segments faint; the 6-block points come from ``best``. None
    without the depth sub-sweeps."""
    from trainer.findings.depth import VARIANTS, depths, losses

    six = ref.num_layers(GROUP)
    ds = sorted({*depths(ref), six})
    if len(ds) < 2:
        return None
    at = {(name, d): [v for v in losses(ref, None, want, d, quiet=True).values() if v is not None]
          for name, want in VARIANTS for d in ds}
    ds = [d for d in ds if any(at[(name, d)] for name, _ in VARIANTS)]  # e.g. no `best` yet
    if len(ds) < 2:
        return None
    full = max(len(vals) for vals in at.values())
    top = max((v for vals in at.values() for v in vals if math.isfinite(v)), default=4.0) + 0.2
    fig, ax = figure()
    for (name, _), (color, style, marker) in zip(VARIANTS, DEPTH_LOOKS):
        for d in ds:
            finite = [v for v in at[(name, d)] if math.isfinite(v)]
            ax.scatter([d] * len(finite), finite, color=color, alpha=0.35, s=14)
            ax.scatter([d] * (len(at[(name, d)]) - len(finite)),
                       [top] * (len(at[(name, d)]) - len(finite)), color=color, marker="x")
        counts = [len(at[(name, d)]) for d in ds]
        means = [(d, sum(at[(name, d)]) / n, n) for d, n in zip(ds, counts)
                 if n and all(math.isfinite(v) for v in at[(name, d)])]
        for (d0, m0, n0), (d1, m1, n1) in zip(means, means[1:]):
            few = min(n0, n1) < full  # a segment to a point of fewer seeds: faint, not silent
            ax.plot([d0, d1], [m0, m1], style, color=color, lw=1 if few else 2,
                    alpha=0.4 if few else 1)
        for d, m, n in means:
            ax.plot([d], [m], marker, color=color, ms=7, mew=1.5, zorder=4 if n < full else 3,
                    mfc="white" if n < full else color)
        seeds = "" if len(set(counts)) == 1 else " (seeds " + ", ".join(map(str, counts)) + ")"
        ax.plot([], [], style, marker=marker, color=color, lw=2, label=name + seeds)
    if any(len(vals) < full for vals in at.values()):
        ax.plot([], [], "o", color="0.4", mfc="white",
                label=f"hollow, faint line: mean of\nfewer than {full} seeds")
    baseline_lines(ax, ref.baselines("depth"))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ds, [f"{d}\n(best)" if d == six else str(d) for d in ds])
    ax.minorticks_off()
    ax.set_xlabel(f"blocks ({six}: sub-sweep best; others: depth)")
    ax.set_ylabel("final test loss (nats)")
    ax.set_title("F11: test loss vs depth, each at its best rate (× = diverged)", loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return fig


def saturation_by_alpha(ref):
    """F14's figure from the ``dyt`` sub-sweep (× = diverged); None when it is not there."""
    from trainer.findings.stream import dyt_saturation
    from trainer.results.metrics import final_test_loss

    runs = ref.groups.get("dyt", [])
    if not runs:
        return None
    layers = ref.num_layers("dyt")
    alphas = sorted({float(r.cfg.model.dyt_alpha) for r in runs})
    by = {a: [r for r in runs if float(r.cfg.model.dyt_alpha) == a] for a in alphas}
    fig, axes = subplots(1, 2, figsize=(10, 4.2), constrained_layout=True)
    color = NORM_COLORS["dyt"]
    for a in alphas:  # step 0: saturation before any update (hollow), next to the final one
        first = [x for x in (dyt_saturation(r, layers, "first") for r in by[a]) if x is not None]
        axes[1].scatter([a] * len(first), first, facecolors="none", edgecolors=color, s=22,
                        label="step 0" if a == alphas[0] else None)
    for ax, value in ((axes[0], final_test_loss), (axes[1], lambda r: dyt_saturation(r, layers))):
        vals = {a: [value(r) for r in by[a]] for a in alphas}
        finite = [v for vs in vals.values() for v in vs if v is not None and v != float("inf")]
        top = max(finite, default=1.0) * 1.05
        for a, vs in vals.items():
            ok = [v for v in vs if v is not None and v != float("inf")]
            ax.scatter([a] * len(ok), ok, color=color, alpha=0.4, s=16)
            bad = [v for v in vs if v == float("inf")]
            ax.scatter([a] * len(bad), [top] * len(bad), color=color, marker="x")
        means = [(a, sum(vs) / len(vs)) for a, vs in vals.items()
                 if vs and None not in vs and float("inf") not in vs]
        ax.plot([a for a, _ in means], [m for _, m in means], "-o", color=color, lw=2,
                label="mean (final)")
        ax.set_xscale("log")
        ax.set_xticks(alphas, [f"{a:g}" for a in alphas])
        ax.set_xlabel("initial α (model.dyt_alpha)")
    baseline_lines(axes[0], ref.baselines("dyt"))
    axes[1].axhline(SATURATED_MIN, color="k", ls="--", lw=1, label=f"saturated (≥ {SATURATED_MIN:g})")
    axes[0].set_ylabel("final test loss (nats)")
    axes[1].set_ylabel("final saturation (max over blocks)")
    axes[1].set_ylim(-0.02, 1.02)
    axes[0].set_title("F14: DyT loss vs α (× = diverged)", loc="left")
    axes[1].set_title("share of |α·x| in tanh's flat tails", loc="left")
    for ax in axes:
        ax.legend(frameon=False)
    return fig


SATURATION_PREFIX = "probe/dyt_saturation/"  # block_{i}, block_{i}/ffn, final


def saturation_over_steps(run) -> list[tuple[int, float]]:
    """(step, the largest saturation of any DyT of ``run`` at that evaluation): the max over
    every ``probe/dyt_saturation/...`` eval curve (attention, FFN, final) that has a finite
    value at the step; steps in order, [] without the probe."""
    at: dict[int, float] = {}
    for tag, curve in run.eval.items():
        if not tag.startswith(SATURATION_PREFIX):
            continue
        for step, value in curve:
            if value is not None and math.isfinite(value):
                at[int(step)] = max(value, at.get(int(step), -math.inf))
    return sorted(at.items())


def dyt_recipe_values(ref) -> dict[float, dict]:
    """What F14's recipe figure draws, from sub-sweep ``dyt_recipe`` (DyT with the embedding
    scalar ``EMBED_UNIT_SCALE``, matched as ``Reference.select`` matches): initial α ->
    {"loss": seed -> ``final_test_loss`` (inf: diverged, None: not recorded), "saturation":
    seed -> ``saturation_over_steps``}; α and seeds in order, {} when there are no such runs."""
    from trainer.results.metrics import final_test_loss

    want = {"norm": "dyt", "embed_scale": str(EMBED_UNIT_SCALE).lower()}
    runs = [r for r in ref.groups.get("dyt_recipe", [])
            if all(ref.values(r).get(k) == v for k, v in want.items())]
    out: dict[float, dict] = {}
    for r in sorted(runs, key=lambda r: (float(ref.values(r)["dyt_alpha"]),
                                         int(ref.values(r)["seed"]))):
        a, seed = float(ref.values(r)["dyt_alpha"]), int(ref.values(r)["seed"])
        at = out.setdefault(a, {"loss": {}, "saturation": {}})
        at["loss"][seed] = final_test_loss(r)
        at["saturation"][seed] = saturation_over_steps(r)
    return out


def dyt_recipe_saturation(ref):
    """F14's figure for DyT by its authors' recipe (sub-sweep ``dyt_recipe``): (a) final test
    loss per initial α with the test tokens' unigram/bigram lines, (b) the most saturated DyT
    over training per seed against ``SATURATED_MIN``; None when the sub-sweep has no runs."""
    values = dyt_recipe_values(ref)
    if not values:
        return None
    alphas = list(values)
    colors = dict(zip(alphas, shades(NORM_COLORS["dyt"], len(alphas))))
    fig, (loss_ax, sat_ax) = subplots(1, 2, figsize=(14, 4.6), dpi=DPI, constrained_layout=True)
    for x, a in enumerate(alphas):
        seeds_and_interval(loss_ax, x, values[a]["loss"], colors[a])
    baseline_lines(loss_ax, ref.baselines("dyt_recipe"))
    loss_ax.scatter([], [], s=22, color="0.4", label="one seed")
    loss_ax.errorbar([], [], yerr=[], fmt="D", color="0.4", capsize=4,
                     label="mean ± 95 % interval")
    loss_ax.plot([], [], "x", color="0.4", label="diverged seed (top)")
    loss_ax.set_xticks(range(len(alphas)), [f"α₀ = {a:g}" for a in alphas])
    loss_ax.set_xlim(-0.6, len(alphas) - 0.4)
    loss_ax.margins(y=0.12)  # room above the baselines for a diverged seed's × at the top
    loss_ax.set_xlabel("initial α (the same at every DyT)")
    loss_ax.set_ylabel("final test loss (nats)")
    loss_ax.set_title("(a) final test loss per initial α", loc="left")
    loss_ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    drawn = set()
    for a in alphas:
        for curve in values[a]["saturation"].values():
            if curve:
                sat_ax.plot([s for s, _ in curve], [v for _, v in curve], color=colors[a], lw=1,
                            label=None if a in drawn else f"α₀ = {a:g}, one line per seed")
                drawn.add(a)
    if not drawn:
        sat_ax.text(0.5, 0.5, "no saturation probe recorded", ha="center", va="center",
                    transform=sat_ax.transAxes, color="0.4")
    sat_ax.axhline(SATURATED_MIN, color="k", ls="--", lw=1,
                   label=f"saturated (≥ {SATURATED_MIN:g})")
    sat_ax.set_ylim(-0.02, 1.02)
    sat_ax.set_xlabel("training step")
    sat_ax.set_ylabel("share of features in tanh's flat tails,\nmost saturated DyT")
    sat_ax.set_title("(b) the most saturated DyT (attention, FFN, final) over training",
                     loc="left")
    sat_ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    fig.suptitle("F14: DyT by its authors' recipe — test loss and the most saturated DyT over "
                 "training")
    return fig


# Each claim figure: its path under the reference root (what the claim's ``plot``/``plots``
# names) -> the function drawing it from the reference (None: its runs are missing).
FIGURES = {f"{GROUP}/plots/collapse_by_depth.png": collapse_by_depth,
           "depth/plots/loss_by_depth.png": loss_by_depth,
           "dyt/plots/saturation.png": saturation_by_alpha,
           "dyt_recipe/plots/saturation.png": dyt_recipe_saturation,
           **figures_best.FIGURES, **figures_scale.FIGURES}


def write_claim_figures(ref) -> list[Path]:
    """Every claim figure whose runs are there, written under the reference root; a figure
    whose runs are missing is not written (the page links only figures that exist)."""
    out = []
    for relpath, draw in FIGURES.items():
        fig = draw(ref)
        if fig is not None:
            save_figure(fig, ref.root / relpath, dpi=DPI)
            out.append(ref.root / relpath)
    return out
