"""Derived numbers and the statistics behind every verdict: finite filtering, mean with a 95 %
t-interval, and the two comparison rules the findings use.

A comparison *shows* only when it holds for every seed and the groups' 95 % intervals do not
overlap; a threshold test only when every seed passes and the whole interval lies beyond the
threshold. With 3 seeds the t quantile is 4.30, so an interval is wide unless the seeds agree:
that is the point.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

CONFIDENCE = 0.95


def finite(x) -> float | None:
    """``x`` as a float when it is a finite number, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class Interval:
    """Mean of per-seed values with its 95 % t-interval (``half`` = 0 for one value) and range."""

    mean: float
    half: float
    lo: float  # mean - half
    hi: float  # mean + half
    min: float
    max: float
    n: int

    def __str__(self) -> str:
        if self.n == 1:
            return _g(self.mean)
        return f"{_g(self.mean)} ± {_g(self.half)} [{_g(self.min)}, {_g(self.max)}]"


def _g(x: float) -> str:
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return f"{x:.3g}"


def interval(values) -> Interval | None:
    """Mean ± 95 % t-interval of the values (infinite values allowed: a diverged run's loss)."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return None
    n = len(xs)
    mean = sum(xs) / n
    if n == 1 or not math.isfinite(mean):
        half = 0.0 if n == 1 else math.inf
    else:
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
        half = stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
    lo, hi = (mean - half, mean + half) if math.isfinite(half) else (min(xs), max(xs))
    return Interval(mean, half, lo, hi, min(xs), max(xs), n)


def above(a: dict, b: dict, margin: float = 0.0) -> bool:
    """Every seed that both have: a > b + margin; and a's interval lies above b's (+ margin).

    ``a``/``b`` map seed -> value. Unpaired seeds still enter the intervals.
    """
    seeds = set(a) & set(b)
    if not seeds or any(a[s] is None or b[s] is None for s in seeds):
        return False
    if not all(a[s] > b[s] + margin for s in seeds):
        return False
    ia, ib = interval(a.values()), interval(b.values())
    return ia is not None and ib is not None and ia.lo > ib.hi + margin


def beyond(values: dict, threshold: float, side: str) -> bool:
    """Every seed's value and the whole interval ``side`` ("above"/"below") ``threshold``."""
    xs = list(values.values())
    if not xs or any(x is None or math.isnan(x) for x in xs):
        return False
    iv = interval(xs)
    if side == "above":
        return all(x > threshold for x in xs) and iv.lo > threshold
    return all(x < threshold for x in xs) and iv.hi < threshold
