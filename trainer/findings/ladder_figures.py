"""The ladder's two figures (pre-registration 3, section 3), drawn from ``ladder``/``ladder_trends``;
figure code only, it judges nothing.

- ``loss_by_width.png``: each variant's final test loss at its best rate on each rung (mean and
  95 % interval over its seeds; a diverged seed makes the mean and the interval's top infinite),
  with the unigram and bigram cross-entropy of each rung's test tokens;
- ``gap_by_width.png``: each variant's paired test-loss gap to Pre-LN on each rung (``rule.paired``
  of the two at their best rates, a diverged run read as the unigram loss), with a zero line.

Width on a log2 axis, the variants side by side around each rung. The y-axis of both spans
the intervals drawn, clipped at ``AXIS_CLIP`` nats beyond the compared variants' means and the
reference lines (the baselines; the zero line): an interval end beyond that (three seeds give a
t quantile of 4.3, and one diverged seed read as the unigram loss stretches an interval by a
nat or more), or an infinite mean, is drawn to the edge with an arrow and its value printed.
A rung whose best rate for a variant sits at an open edge has no point for it.
"""

from __future__ import annotations

import math
from pathlib import Path

from trainer.atomic import save_figure, subplots
from trainer.findings.ladder import VARIANTS, Ladder
from trainer.findings.ladder_trends import cell, gap_trend
from trainer.findings.thresholds import AXIS_CLIP
from trainer.results.metrics import Interval, _g, final_test_loss, interval
from trainer.results.palette import NORM_COLORS, shades
from trainer.results.plots import DPI

SIZE = (11.0, 5.2)  # inches: the legend outside on the right
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
SPREAD = 0.6  # log2 units: the variants of one rung side by side across this width
CLIPPED = "clipped"  # the gid of an arrow drawn for a value beyond the axis


def looks(names) -> dict[str, tuple]:
    """Variant -> (colour, marker): its norm's colour, in shades when several share a norm."""
    by_norm: dict[str, list[str]] = {}
    for name in names:
        by_norm.setdefault(str(VARIANTS[name]["norm"]), []).append(name)
    out = {}
    for norm, members in by_norm.items():
        colors = shades(NORM_COLORS.get(norm, "#555555"), len(members))
        out.update({n: (c, MARKERS[i % len(MARKERS)]) for i, (n, c) in enumerate(zip(members,
                                                                                  colors))})
    return out


def axis_range(intervals: list[Interval], lines: list[float] = ()) -> tuple[float, float]:
    """The intervals' span, but no further than ``AXIS_CLIP`` beyond the finite means and the
    ``lines``; a twentieth of it added each side."""
    core = [y for y in [iv.mean for iv in intervals] + list(lines) if math.isfinite(y)] or [0.0]
    ends = [y for iv in intervals for y in (iv.lo, iv.hi) if math.isfinite(y)] + core
    lo = max(min(core) - AXIS_CLIP, min(ends))
    hi = min(max(core) + AXIS_CLIP, max(ends))
    pad = 0.05 * (hi - lo) or AXIS_CLIP / 10
    return lo - pad, hi + pad


def _clip(ax, x: float, value: float, limits: tuple[float, float], color) -> None:
    """An arrow to the nearer edge at ``x``, the value printed at its tail."""
    lo, hi = limits
    edge = hi if value > hi else lo
    inward = -0.06 * (hi - lo) if value > hi else 0.06 * (hi - lo)
    ax.annotate(_g(value), xy=(x, edge), xytext=(x + 0.04, edge + inward), ha="left",
                va="top" if value > hi else "bottom", fontsize=8, color=color,
                arrowprops=dict(arrowstyle="->", color=color, lw=1), gid=CLIPPED,
                annotation_clip=False)


def draw_interval(ax, x: float, iv: Interval, limits: tuple[float, float], color,
                  marker: str) -> None:
    """The mean and its 95 % interval at ``x``, each part beyond ``limits`` clipped to the edge
    with an arrow and its value."""
    lo, hi = limits
    a, b = max(iv.lo, lo), min(iv.hi, hi)
    if a <= b:
        ax.plot([x, x], [a, b], color=color, lw=1.5, solid_capstyle="butt")
    if lo <= iv.mean <= hi:
        ax.plot([x], [iv.mean], marker, color=color, ms=6)
    else:
        _clip(ax, x, iv.mean, limits, color)
    for end in (iv.lo, iv.hi):
        if not lo <= end <= hi and end != iv.mean:
            _clip(ax, x, end, limits, color)


def _positions(names: list[str]) -> dict[str, float]:
    n = len(names)
    return {name: (i - (n - 1) / 2) * SPREAD / max(n - 1, 1) for i, name in enumerate(names)}


def _draw(title: str, ylabel: str, points: dict, lines: dict, zero: bool):
    """``points``: variant -> width -> Interval; ``lines``: width -> {"unigram", "bigram"}."""
    names = [n for n in VARIANTS if points.get(n)]
    if not names:
        return None
    limits = axis_range([iv for by in points.values() for iv in by.values()],
                        [y for base in lines.values() for y in base.values()] + [0.0] * zero)
    fig, ax = subplots(figsize=SIZE, dpi=DPI, constrained_layout=True)
    look, dx = looks(names), _positions(names)
    for name in names:
        color, marker = look[name]
        for width, iv in points[name].items():
            draw_interval(ax, math.log2(width) + dx[name], iv, limits, color, marker)
        ax.plot([], [], marker, color=color, label=name)
    for width, base in lines.items():
        for key, style in (("unigram", ":"), ("bigram", "--")):
            if key in base:
                ax.plot([math.log2(width) - SPREAD / 2 - 0.1, math.log2(width) + SPREAD / 2 + 0.1],
                        [base[key]] * 2, style, color="k", lw=1)
    if lines:
        ax.plot([], [], ":", color="k", lw=1, label="unigram of the rung's test tokens")
        ax.plot([], [], "--", color="k", lw=1, label="bigram of the rung's test tokens")
    if zero:
        ax.axhline(0.0, color="0.4", lw=0.8)
    widths = sorted({w for by in points.values() for w in by})
    ax.set_xticks([math.log2(w) for w in widths], [f"d = {w}" for w in widths])
    ax.set_xlim(math.log2(widths[0]) - 0.6, math.log2(widths[-1]) + 0.6)
    ax.set_ylim(*limits)
    ax.set_xlabel("width (log2 axis; 6 blocks, 800 steps)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False, fontsize=8)
    return fig


def loss_by_width(ladder: Ladder):
    """Each variant's best-rate test loss per rung; None when no rung has such runs."""
    points: dict = {}
    lines = {}
    for width in ladder.run():
        base = ladder.rungs[width].baselines("best")
        if base:
            lines[width] = {k: base[k] for k in ("unigram", "bigram") if k in base}
        for name in VARIANTS:
            side = ladder.side(width, name)
            if not side.points or side.why_not():
                continue
            iv = interval(side.at(side.best().lr, final_test_loss).values())
            if iv is not None:
                points.setdefault(name, {})[width] = iv
    return _draw("Final test loss at each variant's best rate, per width (mean ± 95 %)",
                 "final test loss (nats)", points, lines, zero=False)


def gap_by_width(ladder: Ladder):
    """Each variant's paired test-loss gap to Pre-LN per rung; None when none is measured."""
    points: dict = {}
    for name in VARIANTS:
        if name == "Pre-LN":
            continue
        for width in ladder.run():
            c = cell(ladder, gap_trend(name), width)
            if c.fitted:
                points.setdefault(name, {})[width] = c.ci
    return _draw("Paired test-loss gap to Pre-LN, each at its best rate, per width (mean ± 95 %)",
                 "variant − Pre-LN, test loss (nats)", points, {}, zero=True)


FIGURES = {"loss_by_width.png": loss_by_width, "gap_by_width.png": gap_by_width}


def write_ladder_figures(ladder: Ladder, out: Path) -> list[Path]:
    """Each figure that has points, written under ``out``."""
    written = []
    for name, draw in FIGURES.items():
        fig = draw(ladder)
        if fig is not None:
            save_figure(fig, Path(out) / name, dpi=DPI)
            written.append(Path(out) / name)
    return written
