"""Pre-registration 3's trends (results/PREREGISTRATION-SCALE.md, section 3): each claim that reads
headline variants (``TRENDS``: S, F3, F4, F5, F6, F11's no-norm part, F14, I1(c), I1(e), I2(d),
I3(b), I4(b)) read on every rung of the ladder (``ladder``), and each variant's best rate and LR
sensitivity against width. A rung's verdict is the statistics rule's (``rule.compare`` /
``not_worse`` / ``threshold``, the claim's own margin) on that rung's runs; nothing is judged anew.

Per claim and rung (``cell``): the per-seed statistic (``rule.paired``'s differences of ``a`` and
``b``, each at its own best rate, or at the claim's fixed rate; S: Pre-LN's test loss − bigram),
its mean with the 95 % t-interval, and the verdict; a rung where a compared best sits at an open
edge, or where both variants of a loss comparison end at the unigram plateau, is "cannot be
judged" and left out of the fit. Over the rungs (``read``): the ordinary-least-squares slope of
the statistic on log2 width over every (rung, seed) point, with its 95 % t-interval (n − 2
degrees of freedom), from two rungs on; and, between consecutive rungs, where the verdict or the
side of 0 its interval lies on changes, the width at which it does, with both rungs' numbers.

Per variant (``variant_trend``): its best rate per rung, a power law (ln best rate on ln width,
least squares: the exponent, with its 95 % t-interval from three rungs on), and its LR
sensitivity per rung (``lr_sweep.lr_sensitivity`` over the rates tried) with its least-squares
slope on log2 width; a rung whose best is an open edge is in neither fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from scipy import stats  # the t quantile

from trainer.findings.ladder import (DYT, Ladder, Side, growth_at, on_test, on_validation,
                                     precise_on_test)
from trainer.findings.thresholds import (GROWTH_FACTOR, HEALTHY_BELOW_BIGRAM, LADDER_WIDTHS,
                                         LOSS_MARGIN, MIN_SEEDS, NULL_MARGIN, R_POST, R_TOP,
                                         TOP_RUNG_VARIANTS, WARMUP_MARGIN)
from trainer.results import lr_sweep
from trainer.results.baselines import at_plateau
from trainer.results.metrics import CONFIDENCE, Interval, interval
from trainer.results.rule import Judged, compare, not_worse, paired, threshold


def _compare(margin: float, log: bool = False):
    return lambda a, b: compare(a, b, margin, log)


def _not_worse(margin: float):
    return lambda a, b: not_worse(a, b, margin)


@dataclass(frozen=True)
class Trend:
    """One claim's statistic over the rungs: ``a`` − ``b`` per seed (``b`` None: ``a`` − the
    test bigram), judged by ``judge(a values, b values)``."""

    id: str
    statistic: str
    a: str
    b: str | None
    judge: Callable[[dict, dict], Judged] | None
    value: Callable[[Side, float], dict] = on_test
    rate: float | None = None  # read at this rate on every rung, not at each one's best
    log: bool = False  # the difference of logarithms (a ratio)
    shared: bool = False  # each at its best of the rates both ran (F6)
    plateau: bool = False  # cannot be judged when both end at the test unigram plateau


TRENDS = (
    Trend("S", "Pre-LN's test loss − bigram", "Pre-LN", None,
          lambda a, _: threshold(a, -HEALTHY_BELOW_BIGRAM, "below")),
    Trend("F3", "naive BN − masked BN, test loss (population statistics)", "BN", "masked BN",
          _compare(LOSS_MARGIN), precise_on_test, plateau=True),
    Trend("F4", "no residual − residual (Pre-LN), test loss", "Pre-LN, no residual", "Pre-LN",
          _compare(LOSS_MARGIN), plateau=True),
    Trend("F5", "ln(no norm's stream growth / Pre-LN's)", "no norm", "Pre-LN",
          _compare(GROWTH_FACTOR, log=True), growth_at, log=True),
    Trend("F6", "Post-LN with − without warm-up, test loss, each at its best of the rates both "
          "ran", "Post-LN", "Post-LN, no warm-up", lambda a, b: compare(b, a, WARMUP_MARGIN),
          shared=True),
    Trend("F11", "no norm − Pre-LN, test loss (6 blocks)", "no norm", "Pre-LN",
          _compare(LOSS_MARGIN), plateau=True),
    Trend("F14", "DyT (recipe) − Pre-LN, test loss", DYT, "Pre-LN", _not_worse(NULL_MARGIN)),
    Trend("I1(c)", f"Pre-LN − QK-norm, validation loss at {R_TOP:g}", "Pre-LN", "QK-norm",
          _compare(LOSS_MARGIN), on_validation, rate=R_TOP),
    Trend("I1(e)", "QK-norm − Pre-LN, test loss", "QK-norm", "Pre-LN", _not_worse(NULL_MARGIN)),
    Trend("I2(d)", "z-loss − Pre-LN, test loss", "z-loss", "Pre-LN", _not_worse(NULL_MARGIN)),
    Trend("I3(b)", "Peri-LN − Pre-LN, test loss", "Peri-LN", "Pre-LN", _not_worse(NULL_MARGIN)),
    Trend("I4(b)", f"Post-LN − DeepNorm, validation loss at {R_POST:g}", "Post-LN", "DeepNorm",
          _compare(LOSS_MARGIN), on_validation, rate=R_POST),
)


@dataclass
class Cell:
    """One claim on one rung: its per-seed statistic and interval, its verdict, or why not."""

    width: int
    values: dict = field(default_factory=dict)  # seed -> statistic: the fit's points
    ci: Interval | None = None
    judged: Judged | None = None
    why: str = ""  # measured but cannot be judged (open edge, plateau): not fitted
    missing: list[str] = field(default_factory=list)  # runs it needs: not run yet
    design: bool = True  # False: the rung's design does not run these variants
    rates: tuple = ()

    @property
    def fitted(self) -> bool:
        return self.design and not self.missing and not self.why and self.ci is not None


def _few(items: list[str], n: int = 3) -> str:
    """The first ``n`` items, and how many more."""
    return ", ".join(items[:n]) + (f" and {len(items) - n} more" if len(items) > n else "")


def _rates(trend: Trend, sides: list[Side], out: Cell) -> list[float] | None:
    """The rate each side is read at: the trend's fixed rate, or each one's best (of the rates
    both ran, for ``shared``); None (``out.why`` set) when a best cannot be read."""
    if trend.rate is not None:
        return [trend.rate] * len(sides)
    shared = (lr_sweep.shared_steps(*([p.lr for p in s.points if p.tried] for s in sides))
              if trend.shared else None)
    if shared == set():
        out.why = f"{sides[0].name} and {sides[1].name} ran no rate in common"
        return None
    for s in sides:
        if s.why_not(shared):
            out.why = s.why_not(shared)
            return None
    return [s.best(shared).lr for s in sides]


def cell(ladder: Ladder, trend: Trend, width: int) -> Cell:
    """``trend``'s statistic on rung ``width`` (module docstring)."""
    out = Cell(width)
    names = [n for n in (trend.a, trend.b) if n]
    if width == max(LADDER_WIDTHS) and not set(names) <= set(TOP_RUNG_VARIANTS):
        out.design = False
        return out
    if not ladder.rungs[width].runs:
        out.missing.append("not run yet")
        return out
    sides = [ladder.side(width, n, trend.b if n == trend.a else trend.a) for n in names]
    out.missing = [f"`{s.src.where}`: {s.name}" + (f" lacks {_few(s.lacking)}" if s.points else "")
                   for s in sides if not s.points or s.lacking]
    if out.missing or (rates := _rates(trend, sides, out)) is None:
        return out
    values = [trend.value(s, lr) for s, lr in zip(sides, rates)]
    out.missing = [f"`{s.src.where}`: {s.name} at lr {lr:g}, a value on {len(v)} of "
                   f"{MIN_SEEDS} seeds" for s, lr, v in zip(sides, rates, values) if len(v) < MIN_SEEDS]
    bigram = sides[0].test_bl.get("bigram")
    if trend.b is None and bigram is None:
        out.missing.append(f"`{sides[0].src.best}/baselines.json`")
    if out.missing:
        return out
    out.rates = tuple(rates)
    if trend.b is None:
        out.values = {s: v - bigram for s, v in values[0].items()}
        out.ci = interval(out.values.values())
    elif (p := paired(values[0], values[1], trend.log)) is not None:
        out.values, out.ci = p.diffs, p.ci
    means = [interval(v.values()) for v in values]
    if trend.plateau and all(at_plateau(m.mean, sides[0].test_bl) for m in means):
        out.why = "both variants end at the unigram plateau of the test tokens"
    if trend.judge is not None:
        out.judged = (trend.judge(values[0], values[1]) if trend.b
                      else trend.judge(out.values, None))
    return out


@dataclass(frozen=True)
class Fit:
    """A least-squares line: its slope with the slope's 95 % t-interval (nan below 3 points)."""

    slope: float
    lo: float
    hi: float
    n: int
    intercept: float

    def __str__(self) -> str:
        if math.isnan(self.lo):
            return f"{self.slope:+.3f} (n = {self.n}: no interval)"
        return f"{self.slope:+.3f} (95 % {self.lo:+.3f} … {self.hi:+.3f}; n = {self.n})"


def ols(points: list[tuple[float, float]]) -> Fit | None:
    """y on x by ordinary least squares over the finite points; None below two distinct x."""
    pts = [(x, y) for x, y in points if math.isfinite(y)]
    if len({x for x, _ in pts}) < 2:
        return None
    n = len(pts)
    xm, ym = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    sxx = sum((x - xm) ** 2 for x, _ in pts)
    slope = sum((x - xm) * (y - ym) for x, y in pts) / sxx
    intercept = ym - slope * xm
    if n < 3:
        return Fit(slope, math.nan, math.nan, n, intercept)
    sse = sum((y - intercept - slope * x) ** 2 for x, y in pts)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 2)) * math.sqrt(sse / (n - 2) / sxx)
    return Fit(slope, slope - half, slope + half, n, intercept)


def side_of_zero(ci: Interval) -> str:
    return "above 0" if ci.lo > 0 else "below 0" if ci.hi < 0 else "straddles 0"


def describe(c: Cell) -> str:
    """A rung's reading: its verdict and its mean with the interval."""
    iv = c.ci
    return (f"{c.judged.outcome} at d = {c.width} (mean {iv.mean:+.3f}, 95 % {iv.lo:+.3f} … "
            f"{iv.hi:+.3f}, n = {iv.n})")


@dataclass
class Read:
    """A claim over the ladder: its cells by width, the fit, and where its reading changes."""

    trend: Trend
    cells: dict[int, Cell]
    fit: Fit | None
    changes: list[str]

    @property
    def fitted(self) -> list[int]:
        return [w for w, c in self.cells.items() if c.fitted]


def read(ladder: Ladder, trend: Trend) -> Read:
    """``trend`` on every rung, its slope over the fitted rungs (two at least), and the widths
    at which its verdict or the side of 0 of its interval changes."""
    cells = {w: cell(ladder, trend, w) for w in LADDER_WIDTHS}
    done = [c for c in cells.values() if c.fitted and c.judged is not None]
    points = [(math.log2(c.width), v) for c in cells.values() if c.fitted
              for v in c.values.values()]
    fit = ols(points) if sum(c.fitted for c in cells.values()) >= 2 else None
    return Read(trend, cells, fit, [c for a, b in zip(done, done[1:]) if (c := change(a, b))])


def change(a: Cell, b: Cell) -> str:
    """How the reading changes from rung ``a`` to the next judged rung ``b`` ("" when not)."""
    numbers = f"{describe(a)}; {describe(b)}"
    if a.judged.outcome != b.judged.outcome:
        return f"verdict changes at d = {b.width}: {numbers}"
    if side_of_zero(a.ci) != side_of_zero(b.ci):
        return (f"interval moves from {side_of_zero(a.ci)} to {side_of_zero(b.ci)} at "
                f"d = {b.width}: {numbers}")
    return ""


@dataclass
class VariantTrend:
    """A variant's best rate and LR sensitivity per rung, with their fits."""

    name: str
    best: dict[int, float] = field(default_factory=dict)  # width -> best rate (closed)
    sensitivity: dict[int, float] = field(default_factory=dict)
    why: dict[int, str] = field(default_factory=dict)  # width -> why its best is not read
    lacking: dict[int, str] = field(default_factory=dict)  # width -> its grid's missing runs
    plateau: set = field(default_factory=set)  # widths whose best is at the unigram plateau
    power: Fit | None = None  # ln best rate on ln width: the exponent
    slope: Fit | None = None  # LR sensitivity on log2 width


def variant_trend(ladder: Ladder, name: str) -> VariantTrend:
    out = VariantTrend(name)
    for width in ladder.run():
        side = ladder.side(width, name)
        if not side.points:
            continue
        if side.lacking:
            out.lacking[width] = _few(side.lacking)
            continue
        if side.why_not():
            out.why[width] = side.why_not()
            continue
        best = side.best()
        out.best[width] = best.lr
        if at_plateau(best.final_loss, side.val_bl):
            out.plateau.add(width)
        out.sensitivity[width] = lr_sweep.lr_sensitivity(side.points, best.final_loss)
    out.power = ols([(math.log(w), math.log(r)) for w, r in out.best.items()])
    out.slope = ols([(math.log2(w), s) for w, s in out.sensitivity.items() if s is not None])
    return out


def gap_trend(name: str) -> Trend:
    """A variant's paired test-loss gap to Pre-LN (each at its best rate), for the figure."""
    return Trend(name, f"{name} − Pre-LN, test loss", name, "Pre-LN", None)
