"""The headline figure: every headline variant's final test loss at its best rate, one panel per
setting (the reference and the replication settings of pre-registration 2). Figure code only: it
draws the numbers, it judges no claim.

``headline_values(refs)`` is what the figure draws: setting -> variant (short name of
``HEADLINE_VARIANTS``) -> seed -> ``final_test_loss`` (inf: diverged). A variant's runs are the
runs of sub-sweep ``best`` whose config matches its values as ``Reference.select`` matches; DyT by
its authors' recipe, which the reference runs in sub-sweep ``dyt_recipe`` (α₀ = 1.0 among its
α₀), is looked up there when ``best`` has none. ``headline_figure(refs)`` draws it,
``headline(refs, out)`` writes the PNG.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.atomic import save_figure, subplots
from trainer.findings.figures_best import baseline_lines, seeds_and_interval
from trainer.findings.thresholds import HEADLINE_VARIANTS, SETTINGS
from trainer.results.metrics import final_test_loss
from trainer.results.palette import NORM_COLORS
from trainer.results.plots import DPI, MAX_WIDTH_PX

if TYPE_CHECKING:
    from trainer.findings.reference import Reference

GROUP = "best"
# Where a variant's runs are looked up, in order (the first group holding any is read).
GROUPS = {"dyt": (GROUP, "dyt_recipe")}
PANEL = (4.2, 5.2)  # inches per setting: ten rotated variant names under each panel


def variant_runs(ref, want: dict) -> list:
    """The runs matching ``want`` (``Reference.matching``) in the first of the variant's groups
    that holds any, by seed."""
    for group in GROUPS.get(str(want.get("norm")).lower(), (GROUP,)):
        found = ref.matching(group, **want)
        if found:
            return sorted(found, key=lambda r: int(ref.values(r)["seed"]))
    return []


def headline_values(refs: dict[str, Reference]) -> dict[str, dict[str, dict[int, float | None]]]:
    """Setting -> variant -> seed -> final test loss (inf: diverged; None: not recorded), in the
    order of ``refs`` and ``HEADLINE_VARIANTS``; a variant without runs maps to {}."""
    return {name: {variant: {int(ref.values(r)["seed"]): final_test_loss(r)
                             for r in variant_runs(ref, want)}
                   for variant, want in HEADLINE_VARIANTS.items()}
            for name, ref in refs.items()}


def _title(name: str, width: int = 44) -> str:
    """The setting's description (``SETTINGS``), broken between its comma-separated parts."""
    lines: list[str] = []
    for part in (SETTINGS[name][1] if name in SETTINGS else name).split(", "):
        if lines and len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += ", " + part
        else:
            if lines:
                lines[-1] += ","
            lines += textwrap.wrap(part, width) or [""]
    return "\n".join(lines)


def headline_figure(refs: dict[str, Reference]):
    """The headline figure of ``refs`` (setting name -> ``Reference``, panels in that order), or
    None when no setting has a headline run."""
    values = headline_values(refs)
    if not any(seeds for by in values.values() for seeds in by.values()):
        return None
    names = list(HEADLINE_VARIANTS)
    width = min(PANEL[0] * len(refs), MAX_WIDTH_PX / DPI)
    fig, axes = subplots(1, len(refs), figsize=(width, PANEL[1]), dpi=DPI,
                         constrained_layout=True, squeeze=False)
    for ax, (name, ref) in zip(axes[0], refs.items()):
        by = values[name]
        ax.set_title(_title(name), loc="left", fontsize=10)
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=9)
        ax.set_xlim(-0.6, len(names) - 0.4)
        if not any(by.values()):
            ax.text(0.5, 0.5, "not run yet", ha="center", va="center", transform=ax.transAxes,
                    color="0.4", fontsize=12)
            ax.set_yticks([])
            continue
        for x, variant in enumerate(names):
            color = NORM_COLORS.get(HEADLINE_VARIANTS[variant]["norm"], "0.3")
            if by[variant]:
                seeds_and_interval(ax, x, by[variant], color)
            else:  # a variant of a setting that has runs, but not this one's
                ax.text(x, 0.03, "not run", rotation=90, ha="center", va="bottom", fontsize=7,
                        color="0.5", transform=ax.get_xaxis_transform())
        base = ref.baselines(GROUP)
        baseline_lines(ax, base)
        for key in ("unigram", "bigram"):
            if base and key in base and math.isfinite(base[key]):
                ax.text(1.0, base[key], f"{key} {base[key]:.3g} ", ha="right", va="bottom",
                        fontsize=7, transform=ax.get_yaxis_transform())
        ax.margins(y=0.12)  # room above the baselines for the diverged seeds' × at the top
        ax.set_ylabel("final test loss (nats)")
    key = axes[0][0]  # empty artists: the key to every panel, in one figure legend
    handles = [key.scatter([], [], s=22, color="0.4", label="one seed"),
               key.errorbar([], [], yerr=[], fmt="D", color="0.4", capsize=4,
                            label="mean ± 95 % interval"),
               key.plot([], [], "x", color="0.4", label="diverged seed (top)")[0],
               key.plot([], [], ":", color="k", lw=1, label="unigram of the test tokens")[0],
               key.plot([], [], "--", color="k", lw=1, label="bigram of the test tokens")[0]]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False)
    fig.suptitle("Final test loss of the headline variants, each at its best rate, per setting")
    return fig


def headline(refs: dict[str, Reference], out: Path) -> Path | None:
    """``headline_figure(refs)`` written to ``out`` (parents created): ``out``, or None (nothing
    written) when no setting has a headline run."""
    fig = headline_figure(refs)
    if fig is None:
        return None
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out, dpi=DPI)
    return out
