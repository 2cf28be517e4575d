"""``evaluate-norm --budget ladder`` (results/PREREGISTRATION-SCALE.md, section 6): an outside
norm on the model-size ladder's rungs 32–128, against the lab's Pre-LN on the same rungs.

On each rung (``RUNGS``: its config, 6 blocks, 800 steps, 4 heads; d = 64 is the reference) the
norm runs the protocol of ``protocol.run_protocol``: ``RATE_GRID`` at seed 0, extended by the
edge rule (``next_rate``) until its best rate is inside the rates tried, then seeds 1 … at that
best. Its runs go under ``DIR/d<width>/`` (``lr/`` and ``best/`` as at the other budgets).

Pre-LN's side of each rung is the lab's committed ladder (``trainer.findings.ladder``: the
reference, ``results/ladder/d32``, the wide setting), read by the ladder's rules; a rung whose
Pre-LN runs are not committed yet says so. Per rung the report gives both best rates, LR
sensitivities and test losses and the paired gap (norm − Pre-LN, same seeds); across rungs,
the gap's least-squares slope over log2 width (every (rung, seed) point, with its 95 %
t-interval, as the ladder's trends), the best rate's power law and the LR sensitivity's slope
for each, and one sentence on where the norm's trend points against Pre-LN's. Nothing here
changes a committed number.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from pathlib import Path

from trainer import rundir
from trainer.evaluate import protocol
from trainer.edge_rule import next_rate
from trainer.findings.thresholds import RATE_GRID
from trainer.results import lr_sweep
from trainer.results.metrics import final_test_loss

RUNGS = {32: "configs/settings/d32.yaml", 64: "configs/reference.yaml",
         128: "configs/settings/wide.yaml"}
PRELN = "Pre-LN"


def rung_budget(width: int) -> protocol.Budget:
    """The protocol's budget on rung ``width``: its config, ``RATE_GRID`` (the edge rule extends
    it), Pre-LN's runs read from the committed ladder."""
    return protocol.Budget(f"ladder d = {width}", protocol.ROOT / RUNGS[width], (), RATE_GRID,
                           protocol.ROOT / "results", "hours (docs/cli.md)")


def run_rung(norm: str, budget: protocol.Budget, out: Path, seeds: int, parallel: int,
             extra=()) -> protocol.Outcome:
    """The protocol on one rung with the edge rule: the grid at seed 0, extended while
    ``next_rate`` asks, then ``seeds`` seeds at the best rate. Finished runs are kept, so a
    second call resumes (the extensions are the same: they follow from the runs)."""
    rates = tuple(budget.rates)
    while True:
        grid = protocol.run_protocol(norm, replace(budget, rates=rates), out, 1, parallel, extra)
        step = next_rate(grid.variant, grid.baselines, budget.rates)
        if step is None:
            break
        rates = tuple(sorted({*rates, *(p.lr for p in grid.variant.points), step}))
    return protocol.run_protocol(norm, replace(budget, rates=rates), out, seeds, parallel, extra)


@functools.lru_cache(maxsize=1)
def committed_ladder():
    """The lab's committed ladder (every rung's runs), read once per process."""
    from trainer.findings.ladder import Ladder
    from trainer.findings.reference import Reference

    return Ladder(Reference(protocol.ROOT / "results" / "reference"))


def preln_side(width: int):
    """Pre-LN on rung ``width`` from the committed ladder (``findings.ladder.Side``), or None
    when the rung has no runs."""
    ladder = committed_ladder()
    if not ladder.rungs[width].runs:
        return None
    return ladder.side(width, PRELN)


def side_numbers(side) -> dict:
    """A ladder ``Side``'s numbers in the report's form (``report.outcome_numbers``'s keys)."""
    from trainer.evaluate.report import interval_numbers

    if side is None or not side.points:
        return {"trained": False, "why": "not run yet"}
    best = side.best()
    why = side.why_not() or (f"its grid lacks {', '.join(side.lacking[:3])}" if side.lacking
                             else "")
    points = side.points
    return {"best_lr": best and best.lr, "best_val_loss": best and best.final_loss,
            "lr_sensitivity": lr_sweep.lr_sensitivity(points, best and best.final_loss),
            "trains_at": [p.lr for p in points if p.trains],
            "rates_tried": [p.lr for p in points if p.tried],
            "val_loss": {f"{p.lr:g}": p.final_loss for p in points if p.tried},
            "test_loss": interval_numbers(side.at(best.lr, final_test_loss)) if best else None,
            "why": why}


def trends(rungs: dict) -> dict:
    """Across rungs (``width -> {"norm": numbers, "Pre-LN": numbers, "gap": paired}``): the
    gap's slope over log2 width (every (rung, seed) point), and per side the best rate's power
    law (ln rate on ln width) and the LR sensitivity's slope over log2 width."""
    from trainer.findings.ladder_trends import ols

    def fit(points):
        f = ols(points)
        return None if f is None else {"slope": f.slope, "lo": f.lo, "hi": f.hi, "n": f.n,
                                       "text": str(f)}

    gap = [(math.log2(w), v) for w, r in rungs.items() if r.get("gap")
           for v in r["gap"]["per_seed"].values() if v is not None]
    out = {"gap_slope": fit(gap)}
    for side in ("norm", PRELN):
        readable = {w: r[side] for w, r in rungs.items() if r[side].get("best_lr")
                    and not r[side].get("why")}
        out[side] = {"best_rate_power": fit([(math.log(w), math.log(x["best_lr"]))
                                             for w, x in readable.items()]),
                     "sensitivity_slope": fit([(math.log2(w), x["lr_sensitivity"])
                                               for w, x in readable.items()
                                               if x.get("lr_sensitivity") is not None])}
    return out


def where_it_points(display: str, t: dict) -> str:
    """One sentence: which way the norm's gap to Pre-LN moves as the model widens."""
    g = t.get("gap_slope")
    if g is None or math.isnan(g["lo"]):
        return (f"{display} against Pre-LN across widths: not enough rungs with paired seeds "
                "for a trend yet")
    per = f"{g['slope']:+.3f} nats per doubling of width (95 % {g['lo']:+.3f} … {g['hi']:+.3f})"
    if g["lo"] > 0:
        return f"{display} falls behind Pre-LN as the model widens: its gap grows by {per}"
    if g["hi"] < 0:
        return f"{display} gains on Pre-LN as the model widens: its gap shrinks by {per}"
    return f"{display}'s gap to Pre-LN shows no trend with width that these rungs can resolve: {per}"


def run_ladder(rep: dict, norm: str, out: Path, seeds: int, parallel: int, extra=()) -> None:
    """Every rung of ``RUNGS``: the norm's runs, Pre-LN's committed side, the paired gap; the
    trends and the sentence into ``rep["ladder"]``; the figure next to the report."""
    from trainer.evaluate.report import outcome_numbers, paired

    rungs = {}
    for width in RUNGS:
        outcome = run_rung(norm, rung_budget(width), out / f"d{width}", seeds, parallel, extra)
        side = preln_side(width)
        mine = outcome_numbers(outcome)
        pre = side_numbers(side)
        gap = None
        if side is not None and not pre.get("why") and pre.get("best_lr"):
            gap = paired(outcome.test_loss, side.at(pre["best_lr"], final_test_loss))
        rungs[width] = {"norm": mine, PRELN: pre, "gap": gap, "token_baselines": outcome.baselines}
    t = trends(rungs)
    rep["ladder"] = {"rungs": {str(w): r for w, r in rungs.items()}, "trends": t,
                     "where": where_it_points(rep["display"], t)}
    figure = write_figure(rep["display"], rungs, out)
    if figure is not None:
        rep["figure"] = figure.name
    rep["runs"] = sorted(str(p.relative_to(out)) for p in out.glob("d*/*/*")
                         if (p / rundir.SUMMARY).is_file())


def write_figure(display: str, rungs: dict, out: Path) -> Path | None:
    """``ladder.png``: best test loss per rung (mean and 95 % interval) and LR sensitivity per
    rung, the norm beside Pre-LN; None when nothing trained."""
    from trainer.atomic import save_figure, subplots
    from trainer.results.plots import DPI

    sides = {display: "norm", PRELN: PRELN}
    if not any(r[k].get("test_loss") for r in rungs.values() for k in sides.values()):
        return None
    fig, (loss_ax, sens_ax) = subplots(1, 2, figsize=(10.0, 4.2), dpi=DPI,
                                       constrained_layout=True)
    for i, (name, key) in enumerate(sides.items()):
        dx = (i - 0.5) * 0.15
        xs, ys, lo, hi, sx, sy = [], [], [], [], [], []
        for w, r in sorted(rungs.items()):
            t = r[key].get("test_loss")
            if t and math.isfinite(t["mean"]):
                xs.append(math.log2(w) + dx)
                ys.append(t["mean"])
                lo.append(t["mean"] - t["lo"] if math.isfinite(t["lo"]) else 0.0)
                hi.append(t["hi"] - t["mean"] if math.isfinite(t["hi"]) else 0.0)
            if r[key].get("lr_sensitivity") is not None and not r[key].get("why"):
                sx.append(math.log2(w))
                sy.append(r[key]["lr_sensitivity"])
        loss_ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o-" if i == 0 else "s--", capsize=3,
                         label=name)
        sens_ax.plot(sx, sy, "o-" if i == 0 else "s--", label=name)
    for ax, label in ((loss_ax, "final test loss at its best rate (nats)"),
                      (sens_ax, "LR sensitivity (nats, validation)")):
        ax.set_xticks([math.log2(w) for w in rungs], [f"d = {w}" for w in rungs])
        ax.set_xlabel("width (log2 axis; 6 blocks, 800 steps)")
        ax.set_ylabel(label)
        ax.legend(frameon=False, fontsize=8)
    loss_ax.set_title("best test loss per width (mean ± 95 %)", loc="left")
    sens_ax.set_title("LR sensitivity per width", loc="left")
    path = Path(out) / "ladder.png"
    save_figure(fig, path, dpi=DPI)
    return path
