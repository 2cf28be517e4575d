"""The figures of the claims judged on sub-sweep ``best`` (Pre-norm + residual, every variant at
its own best rate, test split): each draws exactly the numbers its claim judges, per seed.

- ``f2_test_gap.png`` (F2): BN's test gap, inference-mode loss − loss with batch statistics,
  with the EMA running statistics (hollow, context) and with population statistics (PreciseBN,
  filled: judged), per seed for naive and masked BN, mean ± 95 % interval, ``GAP_MIN`` drawn.
- ``f3_precise_bn.png`` (F3): PreciseBN test loss of naive vs masked BN, seeds as points
  (paired seeds joined), mean ± 95 % interval, the line naive BN must clear (masked BN's
  interval top + ``LOSS_MARGIN``) and the test tokens' unigram/bigram cross-entropy.
- ``f5_token_std.png`` (F5): final token std of the stream at every block, LayerNorm vs no norm,
  seeds faint, geometric mean bold (the growth ratio is judged on logarithms), on a log axis
  spanning these two norms only.

Each returns None when the runs it draws are missing (nothing is drawn from a partial set).
"""

from __future__ import annotations

import math

from matplotlib.ticker import LogFormatter

from trainer.atomic import subplots
from trainer.findings.claim import BASE, BN_NORMS, Finding
from trainer.findings.core import GROUP
from trainer.findings.thresholds import GAP_MIN, LOSS_MARGIN
from trainer.norm_names import row
from trainer.results.metrics import final_test_gap, final_test_loss_precise_bn, interval
from trainer.results.palette import NORM_COLORS
from trainer.results.plots import DPI

SIZE = (8.5, 4.2)  # inches: ~1000 px at DPI, the legend outside on the right


def figure(ncols: int = 1):
    """A claim figure at the sweep plots' resolution (``trainer.results.plots.DPI``)."""
    return subplots(1, ncols, figsize=SIZE, dpi=DPI, constrained_layout=True)


def finish(ax, xlabel: str, ylabel: str, title: str) -> None:
    """A claim figure's labels, its title on the left and its legend outside on the right."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)


def per_seed(ref, fn, group: str = GROUP, **want) -> dict:
    """Seed -> ``fn(run)`` of the matching runs of ``group`` (any seed count; {} when none)."""
    return ref.per_seed(Finding("", "", "", ""), group, fn, seeds=1, **want)


def baseline_lines(ax, base: dict | None) -> None:
    """The test tokens' unigram and bigram cross-entropy as labelled horizontal lines."""
    for key, style in (("unigram", ":"), ("bigram", "--")):
        if base and key in base:
            ax.axhline(base[key], color="k", ls=style, lw=1,
                       label=f"{key} of the test tokens ({base[key]:.3g})")


def seeds_and_interval(ax, x: float, values: dict, color, filled: bool = True,
                       label: str | None = None) -> None:
    """Seeds as points spread around ``x``, their mean ± 95 % t-interval as a bar beside them;
    a diverged seed (+∞) as a × at the top of the axes (it has no place on a loss scale)."""
    items = sorted(values.items())
    spread = [x - 0.12 + 0.24 * i / max(len(items) - 1, 1) for i in range(len(items))]
    face = color if filled else "none"
    finite = [(sx, v) for sx, (_, v) in zip(spread, items) if v is not None and math.isfinite(v)]
    ax.scatter([sx for sx, _ in finite], [v for _, v in finite], s=22, facecolors=face,
               edgecolors=color, zorder=3, label=label)
    for sx, (_, v) in zip(spread, items):
        if v == math.inf:
            ax.plot([sx], [0.97], "x", color=color, transform=ax.get_xaxis_transform(), clip_on=False)
    iv = interval(v for _, v in items)
    if iv is not None and math.isfinite(iv.mean):
        ax.errorbar([x + 0.25], [iv.mean], yerr=[[iv.mean - iv.lo], [iv.hi - iv.mean]],
                    fmt="D" if filled else "d", color=color, mfc=face, capsize=4, lw=1.5, zorder=3)


def f3_precise_bn(ref):
    """F3's figure, or None without the naive and masked BN runs of ``best``."""
    loss = {n: per_seed(ref, final_test_loss_precise_bn, norm=n, warmup_steps=50, **BASE)
            for n in BN_NORMS}
    if not all(loss.values()):
        return None
    fig, ax = figure()
    for x, n in enumerate(BN_NORMS):
        seeds_and_interval(ax, x, loss[n], NORM_COLORS[n],
                           label=f"{row(n).name} ({n})")
    paired = sorted(set(loss["batch"]) & set(loss["masked_batch"]))
    for i, s in enumerate(paired):  # the comparison is paired: every seed must show it
        a, b = loss["batch"][s], loss["masked_batch"][s]
        if math.isfinite(a) and math.isfinite(b):
            ax.plot([-0.12 + 0.24 * i / max(len(paired) - 1, 1), 1 - 0.12 + 0.24 * i /
                     max(len(paired) - 1, 1)], [a, b], color="0.75", lw=0.8, zorder=1,
                    label="the same seed" if i == 0 else None)
    masked = interval(loss["masked_batch"].values())
    if masked is not None and math.isfinite(masked.hi):
        ax.axhline(masked.hi + LOSS_MARGIN, color=NORM_COLORS["masked_batch"], ls="-.", lw=1,
                   label=f"masked BN's 95 % top + {LOSS_MARGIN:g}:\nnaive BN must lie above")
    baseline_lines(ax, ref.baselines(GROUP))
    ax.errorbar([], [], yerr=[], fmt="D", color="0.3", capsize=4, label="mean ± 95 % interval")
    ax.set_xticks([0, 1], ["naive BN", "masked BN"])
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylabel("final test loss, population statistics (nats)")
    ax.set_title("F3: PreciseBN test loss, Pre + residual, each at its best rate", loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return fig


def f2_test_gap(ref):
    """F2's figure, or None without the naive and masked BN runs of ``best``."""
    want = dict(warmup_steps=50, **BASE)
    gaps = {(n, precise): per_seed(ref, lambda r, p=precise: final_test_gap(r, precise=p),
                                   norm=n, **want)
            for n in BN_NORMS for precise in (False, True)}
    if not all(gaps.values()):
        return None
    fig, ax = figure()
    ticks = []
    for i, n in enumerate(BN_NORMS):
        for j, precise in enumerate((False, True)):
            x = 2.5 * i + j
            ticks.append((x, f"{row(n).name}\n{'population' if precise else 'EMA'}"))
            seeds_and_interval(ax, x, gaps[(n, precise)], NORM_COLORS[n], filled=precise,
                               label=f"{row(n).name}: " + ("population statistics (judged)"
                                                       if precise else "EMA statistics"))
    ax.axhline(GAP_MIN, color="k", ls="--", lw=1,
               label=f"GAP_MIN = {GAP_MIN:g}: the population gap\nmust lie above on every seed")
    ax.axhline(0.0, color="0.6", lw=0.8)
    ax.set_xticks([x for x, _ in ticks], [t for _, t in ticks])
    ax.set_ylabel("test loss: inference − batch statistics (nats)")
    ax.set_title("F2: BN's test gap, each at its best rate (mean ± 95 % beside the seeds)",
                 loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return fig


def f5_token_std(ref):
    """F5's figure, or None without the LayerNorm and no-norm runs of ``best`` (or without
    their per-block token std curves)."""
    layers = ref.num_layers(GROUP)
    tags = [f"activation/block_{i}/token_std" for i in range(layers)]
    rows = {n: [curve for curve in per_seed(ref, lambda r: [r.train_at(t) for t in tags], norm=n,
                                        warmup_steps=50, **BASE).values()
                if None not in curve and min(curve) > 0] for n in ("layer", "none")}
    if not all(rows.values()):
        return None
    fig, ax = figure()
    blocks = list(range(layers))
    for n, members in rows.items():
        for seed_curve in members:
            ax.plot(blocks, seed_curve, color=NORM_COLORS[n], alpha=0.3, lw=1)
        gmean = [math.exp(sum(math.log(r[b]) for r in members) / len(members)) for b in blocks]
        ax.plot(blocks, gmean, "-o", color=NORM_COLORS[n], lw=2.5,
                label=f"{row(n).name}: last/first {gmean[-1] / gmean[0]:.3g}×,\n"
                      f"last block {gmean[-1]:.3g} ({len(members)} seeds)")
    ax.plot([], [], color="0.5", alpha=0.3, lw=1, label="one seed")
    ax.set_yscale("log")
    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis(LogFormatter(minor_thresholds=(2, 1)))  # plain numbers, not 4×10⁰
    ax.set_xticks(blocks)
    finish(ax, "block", "token std of the stream, final",
           "F5: the stream by depth, Pre + residual, each at its best rate (geometric mean)")
    return fig


FIGURES = {f"{GROUP}/plots/f2_test_gap.png": f2_test_gap,
           f"{GROUP}/plots/f3_precise_bn.png": f3_precise_bn,
           f"{GROUP}/plots/f5_token_std.png": f5_token_std}
