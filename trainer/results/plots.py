"""Sweep plots (matplotlib, drawn off-screen): small multiples that stay readable from 1 to 60+ variants.

Every figure is laid out from the sweep's swept keys (:func:`trainer.results.config_values.swept_keys`):
one panel per value of the first key (the norm, for grid sweeps), inside a panel the second key
is the colour (shades of the norm's fixed colour) and the remaining keys the line style; seeds are
faint lines around a bold mean. One legend outside the axes explains the encoding and a caption
spells out the short labels once.

Figures (file names are stable): ``loss.png`` (train above eval loss, baselines, × diverged,
▲ spike), ``grad_norm_by_block.png`` (global over steps; per-block median vs depth; log),
``token_std_by_depth.png`` (log), ``token_cosine_by_depth.png``, ``invariance_and_gap.png``
(dot plot, one row per variant: batch-invariance probe, log with 0 at a floor; train/inference gap).
Missing tags (diverged or unfinished runs) are skipped; a panel with nothing to show says so.
"""

from __future__ import annotations

import itertools
import math
import statistics
import textwrap
from pathlib import Path

from matplotlib.lines import Line2D

from trainer.atomic import save_figure, subplots
from trainer.rundir import EVAL, TRAIN
from trainer.results.metrics import final_probe, gap
from trainer.results.palette import LOG_AXIS_FLOOR, Sweep
from trainer.results.series import (before_divergence, by_block, finite_points, mean_curve,
                                    positive, spikes)

DPI = 120
MAX_WIDTH_PX = 2400  # readable on a laptop screen and in a Git host's page without zooming
FAINT = dict(lw=0.8, alpha=0.3)
BOLD = dict(lw=2.0, alpha=1.0)
NAMES = ("loss", "grad_norm_by_block", "token_std_by_depth", "invariance_and_gap",
         "token_cosine_by_depth")


# ---- drawing helpers ----------------------------------------------------------------------------

def _series(ax, variant, per_seed):
    """Faint seed lines around a bold mean, all in the variant's colour and style."""
    per_seed = [c for c in per_seed if c]
    if not per_seed:
        return False
    look = dict(color=variant.color, ls=variant.dash, gid=variant.name)
    mean = mean_curve(per_seed)
    if len(per_seed) > 1:
        for curve in per_seed:
            xs, ys = zip(*curve)
            ax.plot(xs, ys, **look, **FAINT, marker="o" if len(xs) < 3 else variant.marker, ms=3)
    if mean:
        xs, ys = zip(*mean)
        ax.plot(xs, ys, **look, **BOLD, marker="o" if len(xs) < 3 else variant.marker, ms=4,
                markevery=max(1, len(xs) // 6))
    return True


def _events(ax, variant, points, marker, clamp):
    """× / ▲ markers at (step, value), clamped into the y range so a blow-up stays visible."""
    for x, y in points:
        ax.plot([x], [min(max(y, clamp[0]), clamp[1])], ls="none", marker=marker, ms=8, mew=2,
                color=variant.color, gid=f"event:{variant.name}", clip_on=False)


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}\nrecorded", ha="center", va="center", fontsize=8,
            transform=ax.transAxes, color="grey")


def _figure(sweep, rows_per_panel: int, panel_h: float, panel_w: float = 3.3):
    """Constrained-layout grid: each panel is ``rows_per_panel`` stacked axes; ≤ 4 panel columns."""
    n = len(sweep.panels)
    panel_rows = math.ceil(n / 4)
    cols = math.ceil(n / panel_rows)
    legend_w = 2.7
    width = min(cols * panel_w + legend_w, MAX_WIDTH_PX / DPI)
    fig, grid = subplots(panel_rows * rows_per_panel, cols, squeeze=False, sharex="row",
                             figsize=(width, panel_rows * rows_per_panel * panel_h + 1.4),
                             layout="constrained", dpi=DPI)
    axes = []
    for i in range(panel_rows * cols):
        r, c = divmod(i, cols)
        stack = [grid[r * rows_per_panel + k, c] for k in range(rows_per_panel)]
        if i < n:
            axes.append(stack)
        else:
            for ax in stack:
                ax.set_visible(False)
    return fig, axes


def _title(ax, sweep, panel):
    ax.set_title(panel, fontsize=10, color=sweep.panel_color(panel), fontweight="bold")


def _share_y(axes_list, log=False, lim=None):
    """One y range for a metric across panels; tick labels only on the first column."""
    axes_list = [a for a in axes_list if a.has_data()]
    if not axes_list:
        return
    if log:
        for ax in axes_list:
            ax.set_yscale("log")
    lo = min(a.get_ylim()[0] for a in axes_list) if lim is None else lim[0]
    hi = max(a.get_ylim()[1] for a in axes_list) if lim is None else lim[1]
    for ax in axes_list:
        ax.set_ylim(lo, hi)
        if ax.get_subplotspec().colspan.start != 0:
            ax.tick_params(labelleft=False)
            ax.set_ylabel("")


def _finish(fig, sweep, title, extra_handles=(), seeds=True):
    """Figure title, the one legend (outside the axes) and the caption with the short labels."""
    handles = sweep.legend_handles()
    if seeds and sweep.max_seeds > 1:
        handles += [Line2D([], [], color="black", **BOLD, label="mean over seeds"),
                    Line2D([], [], color="black", **FAINT, label="single seed")]
    handles += list(extra_handles)
    legend = fig.legend(handles=handles, loc="outside right upper", fontsize=8, frameon=False)
    for handle, text in zip(legend.legend_handles, legend.get_texts()):
        if handle.get_linestyle() == "None" and handle.get_marker() in ("None", None, ""):
            text.set_fontweight("bold")  # a section header ("line: model.placement")
    # Left-aligned and wrapped to the panels' width: the legend column on the right starts at
    # the top too, and a centred title runs into it on narrow (two-panel) figures.
    fig.suptitle(textwrap.fill(title, int((fig.get_size_inches()[0] - 2.9) * 10)), x=0.01,
                 ha="left", fontsize=11)
    width_chars = int(fig.get_size_inches()[0] * 13)  # ~13 characters per inch at 8 pt
    fig.supxlabel(textwrap.fill(sweep.caption(), width_chars), fontsize=8, color="dimgrey")
    for ax in fig.axes:
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)


# ---- figures ------------------------------------------------------------------------------------

def loss_figure(sweep: Sweep, baselines: dict[str, float] | None = None):
    """Train loss above eval loss (inference mode) per panel, baselines as labelled lines."""
    fig, axes = _figure(sweep, 2, 2.1)
    values, firsts, events = [], [], []
    for (ax_train, ax_eval), panel in zip(axes, sweep.panels):
        _title(ax_train, sweep, panel)
        for ax, group in ((ax_train, TRAIN), (ax_eval, EVAL)):
            drawn = False
            for v in sweep.variants_in(panel):
                curves = [before_divergence(r, getattr(r, group).get("loss", [])) for r in v.runs]
                drawn |= _series(ax, v, curves)
                for run, curve in zip(v.runs, curves):
                    if not curve:
                        continue
                    values += [y for _, y in curve]
                    firsts.append(curve[0][1])
                    if run.status == "diverged":
                        events.append((ax, v, [(run.summary.get("diverged_step") or curve[-1][0],
                                                curve[-1][1])], "x"))
                    if group == TRAIN:
                        events.append((ax, v, spikes(run, curve), "^"))
            if not drawn:
                _empty(ax, f"{group} loss")
            ax.set_ylabel(f"{group} loss" if group == TRAIN else "eval loss\n(inference)",
                          fontsize=9)
        ax_eval.set_xlabel("step", fontsize=9)
    lines = sorted(((k, v) for k, v in (baselines or {}).items()
                    if v is not None and math.isfinite(v)), key=lambda kv: -kv[1])
    styles = [dict(color="black", lw=1, alpha=0.7, ls=(":", "-.", "--")[k % 3],
                   label=f"{name} baseline {y:.2f}") for k, (name, y) in enumerate(lines)]
    extra = [Line2D([], [], **st) for st in styles] if values else []
    if values:
        # The y range follows the losses at their start, not a blow-up: spikes are marked instead.
        ys = [y for _, y in lines]
        lo, hi = min(values + ys), max(firsts + ys)
        lim = (lo - 0.04 * (hi - lo or 1.0), hi + 0.04 * (hi - lo or 1.0))
        for ax in itertools.chain.from_iterable(axes):
            for (name, y), st in zip(lines, styles):
                ax.axhline(y, **{**st, "label": None}, gid=f"baseline:{name}")
        for ax, v, points, marker in events:
            _events(ax, v, points, marker, lim)
        _share_y([a for pair in axes for a in pair], lim=lim)
    if any(m == "x" and p for _, _, p, m in events):
        extra.append(Line2D([], [], ls="none", marker="x", mew=2, color="black",
                            label="diverged here"))
    if any(m == "^" and p for _, _, p, m in events):
        extra.append(Line2D([], [], ls="none", marker="^", color="black",
                            label="loss spike (off-scale: at top)"))
    _finish(fig, sweep, "Loss: train (upper) and eval in inference mode (lower), in nats",
            extra)
    return fig


def grad_norm_figure(sweep: Sweep, baselines=None):
    """Global grad norm over steps and each block's median grad norm over training, log y."""
    fig, axes = _figure(sweep, 2, 2.1)
    for (ax_t, ax_d), panel in zip(axes, sweep.panels):
        _title(ax_t, sweep, panel)
        drawn_t = drawn_d = False
        for v in sweep.variants_in(panel):
            drawn_t |= _series(ax_t, v, [positive(r.train.get("grad_norm/global", []))
                                         for r in v.runs])
            profiles = [[(i, statistics.median(y for _, y in p)) for i, c in
                         by_block(r.train, "grad_norm/").items() if (p := positive(c))]
                        for r in v.runs]
            drawn_d |= _series(ax_d, v, profiles)
        if not drawn_t:
            _empty(ax_t, "grad_norm/global")
        if not drawn_d:
            _empty(ax_d, "grad_norm/block_i")
        ax_t.set(xlabel="step")
        ax_t.set_ylabel("global grad norm", fontsize=9)
        ax_d.set(xlabel="block index")
        ax_d.set_ylabel("median grad norm\nover training", fontsize=9)
        ax_d.xaxis.get_major_locator().set_params(integer=True)
    _share_y([a for a, _ in axes], log=True)
    _share_y([b for _, b in axes], log=True)
    _finish(fig, sweep, "Gradient norm: global over steps (upper), per block (lower), log scale")
    return fig


def _depth_figure(sweep, group, prefix, suffix, ylabel, title, log):
    fig, axes = _figure(sweep, 1, 2.6)
    for (ax,), panel in zip(axes, sweep.panels):
        _title(ax, sweep, panel)
        drawn = False
        for v in sweep.variants_in(panel):
            profiles = []
            for run in v.runs:
                prof = [(i, p[-1][1]) for i, c in by_block(getattr(run, group), prefix,
                                                            suffix).items()
                        if (p := (positive(c) if log else finite_points(c)))]
                profiles.append(prof)
            drawn |= _series(ax, v, profiles)
        if not drawn:
            _empty(ax, ylabel)
        ax.set_xlabel("block index", fontsize=9)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.xaxis.get_major_locator().set_params(integer=True)
    _share_y([a for (a,) in axes], log=log)
    _finish(fig, sweep, title)
    return fig


def token_std_figure(sweep: Sweep, baselines=None):
    """Final residual-stream token std per block (log y): stream growth with depth."""
    return _depth_figure(sweep, TRAIN, "activation/", "/token_std", "token std",
                         "Final residual-stream token std by depth (log scale)", log=True)


def token_cosine_figure(sweep: Sweep, baselines=None):
    """Final mean pairwise token cosine per block (1 = rank collapse)."""
    return _depth_figure(sweep, EVAL, "probe/token_cosine/", "", "token cosine",
                         "Final mean pairwise token cosine by depth (1 = rank collapse)",
                         log=False)


def _dots(ax, y, v, values, marker, filled=True):
    """One row: faint small dots per seed, a bold dot at their mean."""
    values = [x for x in values if x is not None and math.isfinite(x)]
    if not values:
        return False
    face = v.color if filled else "white"
    if len(values) > 1:
        ax.plot(values, [y] * len(values), ls="none", marker=marker, ms=4, color=v.color,
                mfc=face, alpha=0.4, gid=v.name)
    ax.plot([statistics.fmean(values)], [y], ls="none", marker=marker, ms=7, color=v.color,
            mfc=face, mew=1.5, gid=v.name)
    return True


def invariance_figure(sweep: Sweep, baselines=None):
    """Dot plot, one row per variant: batch invariance (log) and train/inference loss gap."""
    variants = [v for p in sweep.panels for v in sweep.variants_in(p)]
    height = 1.9 + 0.22 * len(variants)
    fig, (ax1, ax2) = subplots(1, 2, sharey=True, figsize=(9.5, height), dpi=DPI,
                                   layout="constrained", gridspec_kw={"width_ratios": [3, 2]})
    any_inv = any_gap = False
    for y, v in enumerate(variants):
        train_mode = [max(x, LOG_AXIS_FLOOR) if x is not None else None
                      for x in (final_probe(r, "probe/batch_invariance") for r in v.runs)]
        inference = [max(x, LOG_AXIS_FLOOR) if x is not None else None
                     for x in (final_probe(r, "probe/batch_invariance_inference")
                               for r in v.runs)]
        # Side by side in the row: both are at the floor for per-token norms and would hide.
        any_inv |= _dots(ax1, y - 0.18, v, train_mode, "o")
        any_inv |= _dots(ax1, y + 0.18, v, inference, "D", filled=False)
        any_gap |= _dots(ax2, y, v, [gap(r) for r in v.runs], "o")
    # A thin line between panel groups (e.g. between norms) keeps the rows easy to follow.
    edges = list(itertools.accumulate(len(sweep.variants_in(p)) for p in sweep.panels))[:-1]
    for ax in (ax1, ax2):
        for e in edges:
            ax.axhline(e - 0.5, color="grey", lw=0.6)
        ax.grid(alpha=0.3, axis="x")
        ax.tick_params(labelsize=8)
    ax1.set_yticks(range(len(variants)), [v.label for v in variants], fontsize=8)
    ax1.set_ylim(max(len(variants), 1) - 0.5, -0.5)  # first variant on top, like a table
    if any_inv:
        ax1.set_xscale("log")
        # Always show the floor and 1 on the axis, so "all at the floor" reads as zero.
        ax1.set_xlim(LOG_AXIS_FLOOR / 3, max(10.0, 3 * ax1.dataLim.x1))
        ax1.axvline(LOG_AXIS_FLOOR, color="grey", lw=0.8, ls=":")
    else:
        _empty(ax1, "probe/batch_invariance")
    if not any_gap:
        _empty(ax2, "train/inference gap")
    ax2.axvline(0, color="black", lw=0.8)
    ax1.set_xlabel(f"max |Δ logits|, batched vs alone (log; 0 drawn at {LOG_AXIS_FLOOR:g})",
                   fontsize=9)
    ax1.set_title("batch invariance", fontsize=10)
    ax2.set_xlabel("eval loss: inference − train-mode BN (nats)", fontsize=9)
    ax2.set_title("train/inference gap", fontsize=10)
    marks = [Line2D([], [], ls="none", marker="o", color="black", label="train-mode forward"),
             Line2D([], [], ls="none", marker="D", color="black", mfc="white",
                    label="inference forward")]
    if sweep.max_seeds > 1:
        marks += [Line2D([], [], ls="none", marker="o", ms=7, color="black", label="mean"),
                  Line2D([], [], ls="none", marker="o", ms=4, alpha=0.4, color="black",
                         label="single seed")]
    fig.legend(handles=marks, loc="outside right upper", fontsize=8, frameon=False)
    fig.suptitle("Batch invariance and train/inference gap per variant", fontsize=11)
    fig.supxlabel(textwrap.fill(sweep.caption(), int(9.5 * 13)), fontsize=8, color="dimgrey")
    return fig


FIGURES = {"loss": loss_figure, "grad_norm_by_block": grad_norm_figure,
           "token_std_by_depth": token_std_figure, "invariance_and_gap": invariance_figure,
           "token_cosine_by_depth": token_cosine_figure}


def write_plots(runs, out_dir: str | Path, baselines: dict[str, float] | None = None
                ) -> list[Path]:
    """Write the five PNGs for ``runs`` (``trainer.results.run.Run``) into ``out_dir``.

    ``baselines`` (e.g. ``{"unigram": 6.94, "bigram": 5.31}``, nats) are drawn as labelled
    horizontal lines on the loss plot; None or missing keys draw nothing.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sweep = Sweep(runs)
    paths = []
    for name in NAMES:
        path = out / f"{name}.png"
        save_figure(FIGURES[name](sweep, baselines), path, dpi=DPI)  # atomic: never half a PNG
        paths.append(path)
    return paths

