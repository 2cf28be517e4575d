"""The statistics rule every evidence part is judged by (``compare``, ``not_worse``,
``threshold``; pre-registration 2, results/PREREGISTRATION-REPLICATION.md): *shown* when every
seed and the whole 95 % t-interval lie on the claimed side of the margin (a comparison reads the
paired per-seed difference), *refuted* when the interval lies wholly on the other side,
*underpowered* when it straddles: the data cannot tell. With 3 seeds the t quantile is 4.30, so
an interval is wide unless the seeds agree: that is the point. The only choice per quantity is
its scale: positive heavy-tailed quantities (maxima over positions or sequences, ratios) are
judged on their logarithms (``log=True``: the interval of the geometric mean), since a
t-interval of three maxima such as 44.7 / 17.5 / 25.0 reaches below zero, which such a quantity
cannot. The intervals themselves are ``trainer.results.metrics``'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from trainer.results.metrics import (CONFIDENCE, LOG_FLOOR, Interval, _g, beyond, interval,
                                     mean_std)

# ---- the statistics rule (pre-registration 2, results/PREREGISTRATION-REPLICATION.md) -------
# Every evidence part is one of three kinds, each with three outcomes: *shown*, *refuted* (the
# data show the opposite side of the margin) or *underpowered* (the interval straddles it: the
# data cannot tell, which is not a "no"). Two variants trained with the same seed see the same
# data order (and, for one architecture, the same initial draw), so a comparison reads their
# per-seed difference. The all-seeds condition stays beside every interval on the shown side.
SHOWN, REFUTED, UNDERPOWERED = "shown", "refuted", "underpowered"
TOST_CONFIDENCE = 0.90  # a one-sided test at alpha = 0.05: the upper end of the 90 % interval


@dataclass(frozen=True)
class Judged:
    """One evidence part's outcome with the statistic it read, as the page prints it."""

    outcome: str  # SHOWN | REFUTED | UNDERPOWERED
    stat: str
    why: str = ""  # UNDERPOWERED: which condition of *shown* the data miss


STRADDLES = "the interval straddles the margin"


def _short(seeds: dict, fn=lambda x: x) -> str:
    """``seeds`` (seed -> value) named for the page: "seed 3 (1.93)", "seeds 2, 4 (…, …)"."""
    values = ", ".join(_g(fn(v)) for v in seeds.values())
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} ({values})"


def _against(outside: dict, fn=lambda x: x) -> str:
    """Why a part whose interval lies beyond its margin is still underpowered: the all-seeds
    condition, with the seeds it fails on."""
    verb = "does" if len(outside) == 1 else "do"
    return f"the interval clears the margin but {_short(outside, fn)} {verb} not"


@dataclass(frozen=True)
class Paired:
    """``a − b`` per seed both have, with its 95 % interval (``ci``) and the 90 % interval of
    a one-sided test (``tost``); ``log``: differences of logarithms (a ratio)."""

    diffs: dict
    ci: Interval
    tost: Interval
    log: bool = False

    def describe(self, margin: float) -> str:
        if self.log:
            f = math.exp
            return (f"paired ratio {_g(f(self.ci.mean))} (95 % {_g(f(self.ci.lo))} … "
                    f"{_g(f(self.ci.hi))}; n = {self.ci.n}) against {_g(f(margin))}")
        return (f"paired Δ {self.ci.mean:+.3g} (95 % {self.ci.lo:+.3g} … {self.ci.hi:+.3g}; "
                f"n = {self.ci.n}) against {margin:g}")


def _interval_at(xs: list[float], confidence: float) -> Interval:
    """Mean of ``xs`` with its two-sided t-interval at ``confidence`` (half-width 0 for one; an
    infinite value makes the interval the range, as ``interval`` does)."""
    m, sd = mean_std(xs)
    n = len(xs)
    if n < 2 or not math.isfinite(m):
        half = 0.0 if n < 2 else math.inf
    else:
        half = stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    lo, hi = (m - half, m + half) if math.isfinite(half) else (min(xs), max(xs))
    return Interval(m, half, lo, hi, min(xs), max(xs), n, False)


def paired(a: dict, b: dict, log: bool = False) -> Paired | None:
    """The paired difference of two seed -> value maps over the seeds both have; a diverged run
    (+inf) counts (its difference is +inf or -inf), a missing or NaN value does not, nor does a
    pair of two diverged runs. None when fewer than two seeds pair: no interval exists."""
    def ok(x):
        return x is not None and not math.isnan(x)
    f = (lambda x: math.log(max(x, LOG_FLOOR))) if log else (lambda x: x)
    diffs = {}
    for s in sorted(set(a) & set(b)):
        if ok(a[s]) and ok(b[s]) and not (math.isinf(a[s]) and math.isinf(b[s])):
            diffs[s] = f(a[s]) - f(b[s])
    if len(diffs) < 2:
        return None
    xs = list(diffs.values())
    return Paired(diffs, _interval_at(xs, CONFIDENCE), _interval_at(xs, TOST_CONFIDENCE), log)


def _margin(margin: float, log: bool) -> float:
    """A margin on the differences' scale: ``log`` margins are factors (0: none)."""
    return (math.log(margin) if margin else 0.0) if log else margin


def compare(a: dict, b: dict, margin: float = 0.0, log: bool = False) -> Judged:
    """A difference part, "``a`` exceeds ``b`` by ``margin``": *shown* when every paired
    difference and the 95 % interval of their mean lie above the margin, *refuted* when the
    interval lies below it, *underpowered* otherwise (or when fewer than two seeds pair)."""
    p, m = paired(a, b, log), _margin(margin, log)
    if p is None:
        return Judged(UNDERPOWERED, "fewer than two paired seeds", "fewer than two paired seeds")
    outside = {s: d for s, d in p.diffs.items() if not d > m}
    if p.ci.lo > m and not outside:
        return Judged(SHOWN, p.describe(m))
    if p.ci.hi < m:
        return Judged(REFUTED, p.describe(m))
    return Judged(UNDERPOWERED, p.describe(m),
                  _against(outside, math.exp if log else lambda x: x) if p.ci.lo > m
                  else STRADDLES)


def not_worse(a: dict, b: dict, margin: float) -> Judged:
    """A null part, "``a`` is not worse (higher) than ``b`` by ``margin``": *shown* when every
    paired difference and the one-sided 95 % upper bound (the 90 % interval's upper end) lie
    below the margin, *refuted* (shown worse) when the 95 % interval lies above it,
    *underpowered* otherwise: a difference not shown is not evidence of none."""
    p = paired(a, b)
    if p is None:
        return Judged(UNDERPOWERED, "fewer than two paired seeds", "fewer than two paired seeds")
    stat = f"{p.describe(margin)}; one-sided 95 % bound {p.tost.hi:+.3g}"
    outside = {s: d for s, d in p.diffs.items() if not d < margin}
    if p.tost.hi < margin and not outside:
        return Judged(SHOWN, stat)
    if p.ci.lo > margin:
        return Judged(REFUTED, stat)
    return Judged(UNDERPOWERED, stat, _against(outside) if p.tost.hi < margin else STRADDLES)


def threshold(values: dict, limit: float, side: str, log: bool = False) -> Judged:
    """A threshold part, "every value ``side`` ("above"/"below") ``limit``": *shown* when every
    seed and the whole 95 % interval lie beyond it, *refuted* when the whole interval lies on
    the other side, *underpowered* when it straddles (or a value is missing)."""
    xs = [v for v in values.values()]
    iv = interval(xs, log) if xs and None not in xs else None
    if iv is None or any(math.isnan(x) for x in xs):
        return Judged(UNDERPOWERED, "a value is missing", "a value is missing")
    stat = f"{iv} against {_g(limit)}"
    up = side == "above"
    if beyond(values, limit, side, log):
        return Judged(SHOWN, stat)
    if (iv.hi < limit if up else iv.lo > limit):
        return Judged(REFUTED, stat)
    clears = iv.lo > limit if up else iv.hi < limit
    outside = {s: v for s, v in values.items() if not (v > limit if up else v < limit)}
    return Judged(UNDERPOWERED, stat, _against(outside) if clears else STRADDLES)
