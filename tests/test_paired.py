"""The statistics rule of pre-registration 2 (trainer/results/rule.py compare, not_worse,
threshold; trainer/findings/claim.py verdict): each outcome is reachable, the intervals are the
textbook ones (scipy's t quantiles), and no verdict whose failing parts are underpowered reads
"no"."""

from __future__ import annotations

import itertools
import math

import pytest
from scipy import stats

from trainer.findings.claim import VERDICTS, Part, verdict
from trainer.results.rule import (REFUTED, SHOWN, STRADDLES, UNDERPOWERED, compare, not_worse,
                                  paired, threshold)


def test_paired_reads_only_common_seeds_and_its_interval_is_the_t_interval():
    p = paired({0: 2.0, 1: 2.5, 2: 3.0, 3: 9.0, 4: math.nan}, {0: 1.5, 1: 2.0, 2: 2.4, 4: 1.0})
    assert p.diffs == pytest.approx({0: 0.5, 1: 0.5, 2: 0.6})
    sd = stats.tstd([0.5, 0.5, 0.6])
    assert p.ci.half == pytest.approx(stats.t.ppf(0.975, 2) * sd / math.sqrt(3))
    assert p.tost.half == pytest.approx(stats.t.ppf(0.95, 2) * sd / math.sqrt(3))
    assert p.tost.half < p.ci.half and paired({0: 1.0}, {0: 2.0}) is None


def test_a_diverged_run_counts_as_worse_and_two_diverged_runs_do_not_pair():
    p = paired({0: math.inf, 1: 2.5, 2: 2.6}, {0: 2.0, 1: 2.0, 2: 2.0})
    assert p.diffs[0] == math.inf and p.ci.lo == pytest.approx(0.5)  # the range: [0.5, inf]
    assert compare({0: math.inf, 1: 2.5, 2: 2.6}, {0: 2.0, 1: 2.0, 2: 2.0}, 0.1).outcome == SHOWN
    assert paired({0: math.inf, 1: math.inf, 2: 2.0}, {0: math.inf, 1: 1.0, 2: 1.0}).diffs.keys() \
        == {1, 2}


def test_paired_on_logs_is_a_ratio():
    p = paired({0: 4.0, 1: 8.0}, {0: 2.0, 1: 4.0}, log=True)
    assert p.ci.mean == pytest.approx(math.log(2)) and p.ci.half == pytest.approx(0.0)
    # a factor margin: ratio 2 on every seed is above 1.5 and below 3
    assert compare({0: 4.0, 1: 8.0}, {0: 2.0, 1: 4.0}, 1.5, log=True).outcome == SHOWN
    assert compare({0: 4.0, 1: 8.0}, {0: 2.0, 1: 4.0}, 3.0, log=True).outcome == REFUTED


@pytest.mark.parametrize("diffs,margin,difference,null", [
    ((0.20, 0.22, 0.21), 0.1, SHOWN, REFUTED),         # clearly beyond the margin
    ((0.01, -0.01, 0.0), 0.1, REFUTED, SHOWN),         # clearly inside it: not worse
    ((0.05, 0.30, -0.10), 0.1, UNDERPOWERED, UNDERPOWERED),  # straddles: cannot tell
    ((-0.5, -0.6, -0.55), 0.1, REFUTED, SHOWN),        # better: "not worse" holds
])
def test_each_outcome(diffs, margin, difference, null):
    a, b = {i: 2.0 + d for i, d in enumerate(diffs)}, {i: 2.0 for i in range(3)}
    assert compare(a, b, margin).outcome == difference
    assert not_worse(a, b, margin).outcome == null
    assert compare({0: 1.0}, {0: 2.0}).outcome == not_worse({0: 1.0}, {0: 2.0}, 1).outcome \
        == UNDERPOWERED


def test_the_all_seeds_condition_stays_beside_the_interval():
    """Nine seeds far above the margin and one just below it: the interval clears the margin,
    one seed does not, so the difference is not shown (underpowered, not refuted)."""
    a = {i: 3.0 for i in range(9)} | {9: 2.09}
    b = {i: 2.0 for i in range(10)}
    assert paired(a, b).ci.lo > 0.1 and compare(a, b, 0.1).outcome == UNDERPOWERED
    # and the page says which condition failed, naming the seed, not "the interval straddles"
    assert compare(a, b, 0.1).why == "the interval clears the margin but seed 9 (0.09) does not"
    assert compare(a, b, 1.0).why == STRADDLES
    # the same for a ratio (its seed named by its ratio), a null and a threshold
    ratio = compare(a, b, 1.1, log=True).why
    assert "seed 9 (1.04)" in ratio
    assert not_worse(b, a, -0.1).why.endswith("seed 9 (-0.09) does not")
    assert threshold(a, 2.1, "above").why.endswith("seed 9 (2.09) does not")
    assert threshold(a, 2.95, "above").why == STRADDLES
    assert compare(a, b, 0.0).why == ""  # shown: nothing missing


@pytest.mark.parametrize("values,side,outcome", [
    ((2.0, 2.1, 2.05), "below", SHOWN), ((2.0, 2.1, 2.05), "above", REFUTED),
    ((2.0, 3.0, 2.6), "below", UNDERPOWERED), ((2.6, 2.7, 2.65), "below", REFUTED),
])
def test_threshold(values, side, outcome):
    assert threshold(dict(enumerate(values)), 2.5, side).outcome == outcome
    assert threshold({0: 1.0, 1: None}, 2.5, side).outcome == UNDERPOWERED


def test_f6_pre_ln_without_warm_up_is_shown_worse_not_equivalent():
    """The reference's numbers (results/README.md, F6): Pre-LN without warm-up is worse on every
    seed by 0.12-0.27, so "does not need warm-up" at margin 0.1 is refuted, not shown."""
    without = {0: 2.207, 1: 2.363, 2: 2.2, 3: 2.281, 4: 2.31}
    with_ = {0: 2.04, 1: 2.091, 2: 2.077, 3: 2.042, 4: 2.08}
    assert not_worse(without, with_, 0.1).outcome == REFUTED
    assert compare(without, with_, 0.1).outcome == SHOWN


def _part(outcome: str) -> Part:
    return {"shown": Part("p", True), "refuted": Part("p", False),
            "underpowered": Part("p", None, underpowered=True),
            "unjudged": Part("p", None, why="precondition")}[outcome]


@pytest.mark.parametrize("outcomes", [c for n in (1, 2, 3) for c in itertools.combinations_with_replacement(
    ("shown", "refuted", "underpowered", "unjudged"), n)])
def test_verdict_over_every_combination_of_part_outcomes(outcomes):
    got = verdict([_part(o) for o in outcomes])
    assert got in VERDICTS
    if "refuted" in outcomes:
        assert got == ("partly" if "shown" in outcomes else "no")
    elif all(o == "shown" for o in outcomes):
        assert got == "yes"
    elif "underpowered" in outcomes:
        assert got == "inconclusive (underpowered)"  # never "no"
    else:
        assert got == "inconclusive"
    # a failed control overrides everything; controls alone are checks only
    assert verdict([_part(o) for o in outcomes] + [Part("c", False, control=True)]) == \
        "inconclusive"
    assert verdict([Part("c", True, control=True)]) == "checks only"
