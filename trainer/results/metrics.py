"""Numbers derived from runs and the statistics over seeds, each defined once: finite
filtering, a run's final eval and test losses, final and maximum probe, train/inference gap,
mean ± std, mean with a 95 % t-interval (``log=True``: of the logarithms, the interval of the
geometric mean, for positive heavy-tailed quantities). The summary tables, the plots and the
findings all call these (a run is a :class:`trainer.results.run.Run`). ``above`` and ``beyond``
are the first rule (results/PREREGISTRATION.md), kept for controls and for the shown side of
``trainer.results.rule.threshold``; the rule every evidence part is judged by is
``trainer.results.rule``.
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
    significant digit of ``step`` (an interval's half-width: the value's resolution); with a
    ``step``, trailing zeros are kept (an interval's values all read to its resolution)."""
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x == 0 or not (math.isfinite(step) and step > 0):
        return f"{x:.3g}"
    digits = min(6, max(3, math.floor(math.log10(abs(x))) - math.floor(math.log10(step)) + 2))
    s = f"{x:#.{digits}g}"  # "#": trailing zeros kept, so that 2.0004 reads 2.000, not 2
    return s if "e" in s else s.rstrip(".")


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
