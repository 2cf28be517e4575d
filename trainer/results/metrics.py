"""Numbers derived from runs and the statistics behind every verdict, each defined once:
finite filtering, a run's final eval and test losses, final and maximum probe, train/inference
gap, mean ± std, mean with a 95 % t-interval, and the two comparison rules the findings use. The
summary tables, the plots and the findings all call these (a run is a
:class:`trainer.results.run.Run`).

A comparison *shows* only when it holds for every seed and the groups' 95 % intervals do not
overlap; a threshold test only when every seed passes and the whole interval lies beyond the
threshold. With 3 seeds the t quantile is 4.30, so an interval is wide unless the seeds agree:
that is the point. One rule for every claim; the only choice per quantity is its scale: positive
heavy-tailed quantities (maxima over positions or sequences, ratios) are judged on their
logarithms (``log=True``: the interval of the geometric mean), since a t-interval of three
maxima such as 44.7 / 17.5 / 25.0 reaches below zero, which such a quantity cannot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from scipy import stats

from trainer.rundir import EVAL

CONFIDENCE = 0.95
# On a log scale, a value of exactly 0 (a per-token norm's |Δ logits|) counts as this: far below
# float32 resolution of any logit, and finite.
LOG_FLOOR = 1e-12


def finite(x) -> float | None:
    """``x`` as a float when it is a finite number, else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def final_loss(run) -> float | None:
    """Final eval loss; a diverged run counts as infinitely bad."""
    if run.status == "diverged":
        return math.inf
    return finite(run.summary.get("final_eval_loss"))


def final_test_gap(run, precise: bool = False) -> float | None:
    """Train/inference gap on the test split: inference-mode test loss (EMA running statistics,
    or population statistics with ``precise``) minus the same batches with batch statistics."""
    loss = finite(run.summary.get("final_test_loss_precise_bn" if precise else "final_test_loss"))
    train_mode = finite(run.summary.get("final_test_loss_train_mode"))
    return None if loss is None or train_mode is None else loss - train_mode


# Named final_test_*, not test_*: pytest would collect a test_* function imported into a test.
def final_test_loss(run) -> float | None:
    """Test-split loss, evaluated once after the last step in inference mode; a diverged run
    counts as infinitely bad (as in ``final_loss``); None for a run made before it existed."""
    if run.status == "diverged":
        return math.inf
    return finite(run.summary.get("final_test_loss"))


def final_test_loss_precise_bn(run) -> float | None:
    """Test-split loss with population BN statistics (PreciseBN); a diverged run counts as
    infinitely bad; None without batch norm, or for a run made before it existed."""
    if run.status == "diverged":
        return math.inf
    return finite(run.summary.get("final_test_loss_precise_bn"))


def final_probe(run, tag: str) -> float | None:
    """A probe's final value: from summary.json, else the last point of its eval curve."""
    value = (run.summary.get("probes") or {}).get(tag)
    return finite(value if value is not None else run.final(EVAL, tag))


def max_probe(run, tag: str) -> float | None:
    """A probe's maximum over the evaluations (step 0 included): from summary.json's
    ``probes_max``, else the largest finite point of its eval curve (runs made before it)."""
    value = finite((run.summary.get("probes_max") or {}).get(tag))
    if value is not None:
        return value
    points = [x for x in (finite(v) for _, v in run.eval.get(tag) or []) if x is not None]
    return max(points) if points else None


def mode_losses(run, key: str = "final_eval_loss") -> tuple[float | None, float | None]:
    """(eval loss in inference mode, eval loss with train-mode BN), finite or None.

    ``key`` picks the inference-mode loss of summary.json: ``final_eval_loss`` (EMA running
    statistics) or ``final_eval_loss_precise_bn`` (population statistics). Older summaries
    without the train-mode loss: both from the last points of the (float32) eval curves, which
    hold only the EMA-statistics loss.
    """
    s = run.summary
    loss, train_mode = finite(s.get(key)), finite(s.get("final_eval_loss_train_mode"))
    if train_mode is None and loss is not None and key == "final_eval_loss":
        return finite(run.final(EVAL, "loss")), finite(run.final(EVAL, "loss_train_mode"))
    return loss, train_mode


def gap(run, key: str = "final_eval_loss") -> float | None:
    """Train/inference gap: inference-mode eval loss minus train-mode-BN eval loss (``mode_losses``);
    None when either is unknown."""
    loss, train_mode = mode_losses(run, key)
    return None if loss is None or train_mode is None else loss - train_mode


def mean(values) -> float | None:
    """Mean of the values that are not None; None when there are none."""
    return mean_std(values)[0]


def mean_std(values) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation of the values that are not None (std None below 2)."""
    xs = [v for v in values if v is not None]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


@dataclass(frozen=True)
class Interval:
    """Mean of per-seed values with its 95 % t-interval (``half`` = 0 for one value) and range.

    ``log``: computed on the logarithms and mapped back: ``mean`` is the geometric mean and
    ``lo``/``hi`` its interval (``half`` is then in log units).
    """

    mean: float
    half: float
    lo: float  # mean - half (log: exp(log mean - half))
    hi: float  # mean + half
    min: float
    max: float
    n: int
    log: bool = False

    def __str__(self) -> str:
        if self.n == 1:
            return _g(self.mean)
        if self.log and self.max <= 0:  # no geometric mean, only the floor's: say what it is
            return "0 on every seed"
        # mean, ends and range to the interval's resolution (its half-width, in value units for
        # both kinds), so that 3.2047 ± 0.0018 does not print as "3.2 ± 0.0018 [3.2, 3.2]"
        g = partial(_g, step=(self.hi - self.lo) / 2)
        if self.log:
            return f"{g(self.mean)} (geometric; 95 % {g(self.lo)} … {g(self.hi)}) [{g(self.min)}, {g(self.max)}]"
        return f"{g(self.mean)} ± {_g(self.half)} [{g(self.min)}, {g(self.max)}]"


def _g(x: float, step: float = 0.0) -> str:
    """``x`` to 3 significant digits, or more (up to 6) until its last digit is at the second
    significant digit of ``step`` (an interval's half-width: the value's resolution)."""
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    digits = 3
    if x != 0 and math.isfinite(step) and step > 0:
        digits = min(6, max(3, math.floor(math.log10(abs(x))) - math.floor(math.log10(step)) + 2))
    return f"{x:.{digits}g}"


def _logs(xs: list[float]) -> list[float]:
    return [math.log(max(x, LOG_FLOOR)) for x in xs]


def interval(values, log: bool = False) -> Interval | None:
    """Mean ± 95 % t-interval of the values (infinite values allowed: a diverged run's loss);
    ``log``: of their logarithms (values at or below 0 count as ``LOG_FLOOR``)."""
    xs = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not xs:
        return None
    n = len(xs)
    ys = _logs(xs) if log else xs
    m, sd = mean_std(ys)
    if n == 1 or not math.isfinite(m):
        half = 0.0 if n == 1 else math.inf
    else:
        half = stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n)
    lo, hi = (m - half, m + half) if math.isfinite(half) else (min(ys), max(ys))
    if log:
        return Interval(math.exp(m), half, math.exp(lo), math.exp(hi), min(xs), max(xs), n, True)
    return Interval(m, half, lo, hi, min(xs), max(xs), n)


def above(a: dict, b: dict, margin: float = 0.0, log: bool = False) -> bool:
    """Every seed that both have: a > b + margin; and a's interval lies above b's (+ margin).

    ``a``/``b`` map seed -> value. Unpaired seeds still enter the intervals. ``log``: compared
    on logarithms (the margin is then a factor: a > b · margin; 0 means no margin).
    """
    seeds = set(a) & set(b)
    if not seeds or any(a[s] is None or b[s] is None for s in seeds):
        return False
    factor = margin if log and margin else 1.0
    shift = 0.0 if log else margin
    if not all(a[s] > b[s] * factor + shift for s in seeds):
        return False
    ia, ib = interval(a.values(), log), interval(b.values(), log)
    return ia is not None and ib is not None and ia.lo > ib.hi * factor + shift


def beyond(values: dict, threshold: float, side: str, log: bool = False) -> bool:
    """Every seed's value and the whole interval ``side`` ("above"/"below") ``threshold``;
    ``log``: the interval of the logarithms (for positive maxima and ratios)."""
    xs = list(values.values())
    if not xs or any(x is None or math.isnan(x) for x in xs):
        return False
    iv = interval(xs, log)
    if side == "above":
        return all(x > threshold for x in xs) and iv.lo > threshold
    return all(x < threshold for x in xs) and iv.hi < threshold


# ---- paired differences and equivalence (issue #34: "refuted" told from "underpowered") ------
# Two variants trained with the same seed see the same initialisation draw and data order, so
# their per-seed difference is the comparison to judge; its t-interval says whether the data can
# tell. Not yet read by any claim: the findings switch to it with a new pre-registration.
SHOWN, REFUTED, UNDERPOWERED = "shown", "refuted", "underpowered"
TOST_CONFIDENCE = 0.90  # two one-sided tests at alpha = 0.05 each: the 90 % interval


@dataclass(frozen=True)
class Paired:
    """``a − b`` per seed both have, with its 95 % interval (``ci``) and the 90 % interval of
    the two one-sided tests (``tost``); ``log``: differences of logarithms (a ratio)."""

    diffs: dict
    ci: Interval
    tost: Interval


def _interval_at(xs: list[float], confidence: float) -> Interval:
    """Mean of ``xs`` with its two-sided t-interval at ``confidence`` (half-width 0 for one)."""
    m, sd = mean_std(xs)
    n = len(xs)
    half = 0.0 if n < 2 else stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return Interval(m, half, m - half, m + half, min(xs), max(xs), n, False)


def paired(a: dict, b: dict, log: bool = False) -> Paired | None:
    """The paired difference of two seed -> value maps over the seeds both have (finite values
    only); None when fewer than two seeds pair, where no interval exists."""
    seeds = sorted(s for s in set(a) & set(b) if finite(a[s]) is not None
                   and finite(b[s]) is not None)
    if len(seeds) < 2:
        return None
    f = (lambda x: math.log(max(x, LOG_FLOOR))) if log else (lambda x: x)
    diffs = {s: f(a[s]) - f(b[s]) for s in seeds}
    xs = list(diffs.values())
    return Paired(diffs, _interval_at(xs, CONFIDENCE), _interval_at(xs, TOST_CONFIDENCE))


def exceeds(p: Paired | None, margin: float = 0.0) -> str:
    """A directional claim, ``a − b > margin``: *shown* when the 95 % interval lies above the
    margin, *refuted* when it lies below it (the difference is shown smaller than the margin),
    *underpowered* when it straddles the margin (or no interval exists)."""
    if p is None:
        return UNDERPOWERED
    if p.ci.lo > margin:
        return SHOWN
    if p.ci.hi < margin:
        return REFUTED
    return UNDERPOWERED


def equivalent(p: Paired | None, margin: float) -> str:
    """A null claim, ``|a − b| < margin`` ("not worse", "holds", "does not need"), by two
    one-sided tests: *shown* (equivalent) when the 90 % interval lies inside (−margin, margin),
    *refuted* (shown different) when the 95 % interval lies wholly beyond ±margin, otherwise
    *underpowered*: the data cannot tell, which is not a "no"."""
    if p is None:
        return UNDERPOWERED
    if -margin < p.tost.lo and p.tost.hi < margin:
        return SHOWN
    if p.ci.lo > margin or p.ci.hi < -margin:
        return REFUTED
    return UNDERPOWERED
