"""``plots/lr_sensitivity.png``: final validation loss vs learning rate, one line per variant.

The x axis is the rate (log), the y axis the final validation loss of
:mod:`trainer.results.lr_sweep` (mean over seeds; each seed a faint dot when there are several).
Encoding, explained by the legend outside the axes: the colour is the norm's fixed colour
(:data:`trainer.results.palette.NORM_COLORS`); the other variant keys (placement, residual,
warm-up, ...) are the line style and the marker. Unigram and bigram are labelled horizontal
lines. The y range ends a little above the unigram value, so the region where models train is
readable: a loss above it sits on the top edge as ▵, a diverged rate as ×.

Drawn off-screen like :mod:`trainer.results.plots` (``trainer.atomic.subplots``): importing or
drawing loads no pyplot and chooses no backend, and a figure is freed with its last reference.
"""

from __future__ import annotations

import math
from pathlib import Path

from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullFormatter

from trainer.atomic import save_figure, subplots
from trainer.results.config_values import value_of
from trainer.results.palette import (LINESTYLES, MARKERS, SEPARATOR, _ordered, key_caption,
                                     norm_color, short_value)
from trainer.results.plots import BOLD, DPI, _finish

NAME = "lr_sensitivity"
TOP_MARGIN = 0.15  # the y range ends this share of (unigram − lowest loss) above the unigram
BASELINE_STYLE = {"unigram": ":", "bigram": "-."}
DODGE = 0.025  # decades between the × of variants diverging at the same rate


class Encoding:
    """How the variants are drawn: the norm's colour, one (line style, marker) per combination
    of the other variant keys; the legend and caption that say so (what ``plots._finish`` reads).

    Args:
        variants: ``LRVariant`` list (:func:`trainer.results.lr_sweep.lr_variants`).
    """

    def __init__(self, variants):
        self.variants = variants
        self.runs = [r for v in variants for r in v.runs]
        keys = list(variants[0].values) if variants else []
        self.style_keys = [k for k in keys if k != "model.norm"]
        self.norms = _ordered("model.norm", (value_of(r, "model.norm") for r in self.runs))
        order = {k: _ordered(k, (v.values[k] for v in variants)) for k in self.style_keys}
        combos = {tuple(v.values[k] for k in self.style_keys) for v in variants}
        self.combos = sorted(combos, key=lambda c: [order[k].index(x)
                                                    for k, x in zip(self.style_keys, c)])
        self.max_seeds = max((len(p.runs) for v in variants for p in v.points), default=0)
        self.keys = ["model.norm", *self.style_keys]

    def look(self, variant) -> dict:
        """Colour, line style and marker of one variant."""
        i = self.combos.index(tuple(variant.values[k] for k in self.style_keys))
        return {"color": norm_color(value_of(variant.runs[0], "model.norm")),
                "ls": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)]}

    def legend_handles(self) -> list:
        def header(text):
            return Line2D([], [], ls="none", label=text)

        out = [header("colour: model.norm")]
        out += [Line2D([], [], color=norm_color(n), lw=3, label=short_value("model.norm", n))
                for n in self.norms]
        if self.style_keys:
            out.append(header("line, marker: " + ", ".join(self.style_keys)))
            for i, combo in enumerate(self.combos):
                out.append(Line2D([], [], color="black", lw=1.5, ls=LINESTYLES[i % 4],
                                  marker=MARKERS[i % len(MARKERS)], label=SEPARATOR.join(
                                      short_value(k, x) for k, x in zip(self.style_keys, combo))))
        return out

    def caption(self) -> str:
        return ("Final validation loss after training at each rate (mean over seeds); the "
                "best rate of a variant is its lowest point. Labels: "
                + key_caption(self.keys, self.runs) + ".")


def _y_range(variants, baselines: dict) -> tuple[float, float]:
    """From a little below the lowest loss (or bigram) to a little above the unigram value;
    without a unigram value, to a little above the highest finite loss."""
    losses = [x for v in variants for p in v.points for x in (p.final_loss, *p.seed_losses)
              if x is not None and math.isfinite(x)]
    lines = [y for y in baselines.values()]
    lo = min(losses + lines, default=0.0)
    unigram = baselines.get("unigram")
    hi = max(losses, default=lo + 1.0) if unigram is None else unigram
    span = (hi - lo) or 1.0
    return lo - 0.04 * span, hi + TOP_MARGIN * span


def _draw_variant(ax, variant, look: dict, top: float, seeds: bool) -> list[tuple]:
    """The variant's line, off-scale points as ▵ on the top edge; returns its diverged rates
    as ``(rate, look, name)`` for :func:`_draw_diverged`."""
    tried = [p for p in variant.points if p.tried]
    xs = [p.lr for p in tried]
    # A diverged rate breaks the line (nan) and is marked ×: no loss to draw a line to.
    ys = [min(p.final_loss, top) if math.isfinite(p.final_loss) else math.nan for p in tried]
    ax.plot(xs, ys, **look, **BOLD, ms=5, gid=variant.name, clip_on=False)
    if seeds:
        for p in tried:
            finite = [y for y in p.seed_losses if math.isfinite(y)]
            if not finite:  # an empty unclipped line would stretch the layout to (0, 0)
                continue
            ax.plot([p.lr] * len(finite), [min(y, top) for y in finite], ls="none",
                    marker=look["marker"], color=look["color"], ms=3, alpha=0.35,
                    gid=f"seed:{variant.name}", clip_on=False)
    off = [p.lr for p in tried if math.isfinite(p.final_loss) and p.final_loss > top]
    if off:
        ax.plot(off, [top] * len(off), ls="none", marker="^", ms=9, mew=2, color=look["color"],
                mfc="white", gid=f"event:{variant.name}", clip_on=False, zorder=5)
    return [(p.lr, look, variant.name) for p in tried if math.isinf(p.final_loss)]


def _draw_diverged(ax, diverged: list[tuple], top: float) -> None:
    """× on the top edge at each diverged rate; the variants diverging at one rate are spread
    side by side (``DODGE`` decades apart) so each colour stays visible."""
    by_rate: dict[float, list] = {}
    for lr, look, name in diverged:
        by_rate.setdefault(lr, []).append((look, name))
    for lr, members in by_rate.items():
        for i, (look, name) in enumerate(members):
            x = lr * 10 ** ((i - (len(members) - 1) / 2) * DODGE)
            ax.plot([x], [top], ls="none", marker="x", ms=8, mew=2, color=look["color"],
                    gid=f"event:{name}", clip_on=False, zorder=6)


def lr_figure(variants, baselines: dict | None = None):
    """Final validation loss vs learning rate (log x), one line per variant; returns the figure."""
    enc = Encoding(variants)
    lines = {k: y for k, y in (baselines or {}).items()
             if k in BASELINE_STYLE and y is not None and math.isfinite(y)}
    fig, ax = subplots(figsize=(11, 5.6), dpi=DPI, layout="constrained")  # off-screen, no pyplot
    lo, top = _y_range(variants, lines)
    diverged = [d for v in variants for d in _draw_variant(ax, v, enc.look(v), top,
                                                           enc.max_seeds > 1)]
    _draw_diverged(ax, diverged, top)
    off = any(line.get_marker() == "^" for line in ax.get_lines())
    extra = []
    for name, y in sorted(lines.items(), key=lambda kv: -kv[1]):
        style = dict(color="black", lw=1, alpha=0.7, ls=BASELINE_STYLE[name])
        ax.axhline(y, **style, gid=f"baseline:{name}")
        extra.append(Line2D([], [], **style, label=f"{name} baseline {y:.2f}"))
    if off:
        extra.append(Line2D([], [], ls="none", marker="^", mew=2, mfc="white", color="black",
                            label="above the range (top edge)"))
    if diverged:
        extra.append(Line2D([], [], ls="none", marker="x", mew=2, color="black",
                            label="diverged (top edge)"))
    if enc.max_seeds > 1:
        extra.append(Line2D([], [], ls="none", marker="o", ms=3, alpha=0.35, color="black",
                            label="single seed"))
    ax.set_xscale("log")
    ax.set_ylim(lo, top)
    rates = sorted({p.lr for v in variants for p in v.points})
    if 0 < len(rates) <= 8:  # the rates tried as the ticks; a longer grid keeps the decades
        ax.xaxis.set_major_locator(FixedLocator(rates))
        ax.set_xticklabels([f"{r:.2g}" for r in rates])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("learning rate (log scale)", fontsize=9)
    ax.set_ylabel("final validation loss (nats)", fontsize=9)
    if not variants:
        ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
    _finish(fig, enc, "Final validation loss vs learning rate, one line per variant",
            extra, seeds=False)
    return fig


def write_lr_figure(variants, out_dir, baselines: dict | None = None) -> Path:
    """Write ``lr_sensitivity.png`` into ``out_dir``; returns its path."""
    path = Path(out_dir) / f"{NAME}.png"
    save_figure(lr_figure(variants, baselines), path, dpi=DPI)
    return path
