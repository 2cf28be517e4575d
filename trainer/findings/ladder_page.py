"""The ladder's section of results/README.md (pre-registration 3, section 3): the claim × width
table of ``ladder_trends`` with each claim's slope over log2 width, where a verdict changes with
width, what cannot be judged and what is not run yet, each variant's best rate and LR
sensitivity against width, and the two figures (``ladder_figures``). It arranges numbers;
every verdict in it is the statistics rule's on one rung's runs.
"""

from __future__ import annotations

from pathlib import Path

from trainer.findings.ladder import ROOTS, VARIANTS, Ladder
from trainer.findings.ladder_trends import TRENDS, Cell, Read, read, variant_trend
from trainer.findings.thresholds import LADDER_WIDTHS, TOP_RUNG_VARIANTS
from trainer.results.rule import REFUTED, SHOWN, UNDERPOWERED

MARKS = {SHOWN: "✓", REFUTED: "✗", UNDERPOWERED: "~"}
PLOTS = "ladder/plots"  # under results/, beside the rungs' roots
FIGURES = {"loss_by_width.png": "each variant's best test loss against width",
           "gap_by_width.png": "each variant's paired test-loss gap to Pre-LN against width"}
NOT_RUN = "not run yet"
NOT_DESIGNED = "not in this rung's design"


def _cell(c: Cell) -> str:
    if not c.design:
        return NOT_DESIGNED
    if c.missing:
        return NOT_RUN
    if c.why:
        return "? (below)"
    if c.ci is None:
        return f"{MARKS[c.judged.outcome]} fewer than two paired seeds"
    return f"{MARKS[c.judged.outcome]} {c.ci.mean:+.3f} ({c.ci.lo:+.3f} … {c.ci.hi:+.3f})"


def _slope(r: Read) -> str:
    if r.fit is not None:
        return str(r.fit)
    have = ", ".join(f"d = {w}" for w in r.fitted) or "none"
    return f"{NOT_RUN}: needs two rungs with the runs (has {have})"


def trend_table(reads: list[Read]) -> list[str]:
    """The claim × width table, a cell per rung, the slope last."""
    head = ("| claim | statistic | " + " | ".join(f"d = {w}" for w in LADDER_WIDTHS)
            + " | slope per doubling of width (95 %) |")
    lines = [head, "|---|---|" + "---|" * (len(LADDER_WIDTHS) + 1)]
    for r in reads:
        t = r.trend
        lines.append(f"| [{t.id}](#{t.id.split('(')[0].lower()}) | {t.statistic} | "
                     + " | ".join(_cell(r.cells[w]) for w in LADDER_WIDTHS)
                     + f" | {_slope(r)} |")
    return lines


def notes(reads: list[Read]) -> list[str]:
    """Which trends are computed; where a verdict changes with width; what cannot be judged;
    what the rungs that have runs still lack (each item with the claims that read it)."""
    done = [r.trend.id for r in reads if r.fit is not None]
    lines = ["Trends computed (two rungs or more): " + (", ".join(done) or "none yet") + "; not "
             "yet: " + (", ".join(r.trend.id for r in reads if r.fit is None) or "none") + "."]
    changes = [f"- {r.trend.id} {c}" for r in reads for c in r.changes]
    lines += ["", "Where a verdict (or the side of 0 its interval lies on) changes with width:",
              *(changes or ["- nowhere among the rungs judged so far"])]
    why = [f"- {r.trend.id}, d = {w}: {c.why}" for r in reads for w, c in r.cells.items()
           if c.why and c.design and not c.missing]
    if why:
        lines += ["", "Cannot be judged (left out of the slope):", *why]
    lacking: dict[int, dict[str, list[str]]] = {}
    for r in reads:
        for w, c in r.cells.items():
            for m in c.missing:
                if m != NOT_RUN:
                    lacking.setdefault(w, {}).setdefault(m, []).append(r.trend.id)
    if lacking:
        lines += ["", "Not run yet, on the rungs that have runs:"]
        lines += [f"- d = {w}: " + "; ".join(f"{m} ({', '.join(ids)})" for m, ids in ms.items())
                  for w, ms in sorted(lacking.items())]
    return lines


def variant_table(ladder: Ladder) -> list[str]:
    """Per variant and rung: its best rate and LR sensitivity (validation), the power-law
    exponent of the best rate on width and the sensitivity's slope per doubling."""
    lines = ["| variant | " + " | ".join(f"d = {w}" for w in LADDER_WIDTHS)
             + " | best rate ∝ d^k: k (95 %) | LR sensitivity per doubling (95 %) |",
             "|---|" + "---|" * (len(LADDER_WIDTHS) + 2)]
    for name in VARIANTS:
        v = variant_trend(ladder, name)
        cells = []
        for w in LADDER_WIDTHS:
            if w in v.best:
                sens = v.sensitivity.get(w)
                cells.append(f"lr {v.best[w]:g}" + (" (at the plateau)" if w in v.plateau else "")
                             + ", sensitivity " + ("n/a" if sens is None else f"{sens:.3g}"))
            elif w in v.lacking:
                cells.append(f"{NOT_RUN}: lacks {v.lacking[w]}")
            elif w in v.why:
                cells.append("? " + v.why[w].removeprefix(f"{name}'s ").removeprefix(name + " "))
            elif w == max(LADDER_WIDTHS) and name not in TOP_RUNG_VARIANTS:
                cells.append(NOT_DESIGNED)
            else:
                cells.append(NOT_RUN)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {v.power or NOT_RUN} | "
                     f"{v.slope or NOT_RUN} |")
    return lines


def _rungs(ladder: Ladder) -> str:
    parts = []
    for w, ref in ladder.rungs.items():
        path = ROOTS[w][0] or ref.root.name
        have = f"{len(ref.runs)} runs" if ref.runs else NOT_RUN
        parts.append(f"d = {w} `results/{path}` ({have})")
    return "; ".join(parts)


def ladder_section(ref, known=None) -> list[str]:
    """The ladder's section (reference setting only; ``known``: the settings already loaded)."""
    if ref.setting != "reference":
        return []
    ladder = Ladder(ref, known)
    reads = [read(ladder, t) for t in TRENDS]
    lines = ["", "## The model-size ladder (pre-registration 3)", "",
             "Each claim that reads the headline variants, read on every rung of the width ladder "
             "(6 blocks, 800 steps, 4 heads on every rung: a trend is over width at 800 steps, "
             "not compute-optimal scale; [pre-registration 3](PREREGISTRATION-SCALE.md), "
             "section 3; `trainer/findings/ladder.py`, `ladder_trends.py`). Rungs: "
             + _rungs(ladder) + ".", "",
             "A cell: the rung's verdict by the claim's own rule (✓ shown, ✗ refuted, "
             "~ underpowered, ? cannot be judged) and the mean of the per-seed statistic with its "
             "95 % interval (each variant at its own best rate on that rung, unless the statistic "
             "names a rate; a diverged run's loss is the unigram loss of the same tokens). Slope: "
             "ordinary least squares of the statistic on log2 width over every (rung, seed) "
             "point, with its 95 % t-interval.", "", *trend_table(reads), "", *notes(reads), "",
             "### Each variant's best rate and LR sensitivity against width", "",
             "Best rate on the validation split (the mean over seeds where every seed ran every "
             "rate); LR sensitivity over the rates tried on that rung (rung 128's grid is wide's "
             "three rates and its extensions). k: the least-squares slope of ln best rate on "
             "ln width; a best at an open edge is in neither fit; \"at the plateau\": the best of "
             "a variant that never left the unigram plateau there (it closes the edge).", "",
             *variant_table(ladder)]
    root = ref.root.parent
    lines += [x for name, alt in FIGURES.items() if (root / PLOTS / name).is_file()
              for x in ("", f"![{alt}]({Path(PLOTS, name).as_posix()})")]
    return lines
