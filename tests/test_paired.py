"""Paired differences and the equivalence test (trainer/results/metrics.py): each outcome is
reachable, and the intervals are the textbook ones (scipy's t quantiles, checked by hand)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from trainer.results.metrics import (REFUTED, SHOWN, UNDERPOWERED, equivalent, exceeds,
                                     paired)


def test_paired_reads_only_common_finite_seeds_and_its_interval_is_the_t_interval():
    p = paired({0: 2.0, 1: 2.5, 2: 3.0, 3: 9.0, 4: math.inf}, {0: 1.5, 1: 2.0, 2: 2.4, 4: 1.0})
    assert p.diffs == pytest.approx({0: 0.5, 1: 0.5, 2: 0.6})
    sd = stats.tstd([0.5, 0.5, 0.6])
    assert p.ci.half == pytest.approx(stats.t.ppf(0.975, 2) * sd / math.sqrt(3))
    assert p.tost.half == pytest.approx(stats.t.ppf(0.95, 2) * sd / math.sqrt(3))
    assert p.tost.half < p.ci.half and paired({0: 1.0}, {0: 2.0}) is None


def test_paired_on_logs_is_a_ratio():
    p = paired({0: 4.0, 1: 8.0}, {0: 2.0, 1: 4.0}, log=True)
    assert p.ci.mean == pytest.approx(math.log(2)) and p.ci.half == pytest.approx(0.0)


@pytest.mark.parametrize("diffs,margin,directional,null", [
    ((0.20, 0.22, 0.21), 0.1, SHOWN, REFUTED),         # clearly beyond the margin
    ((0.01, -0.01, 0.0), 0.1, REFUTED, SHOWN),         # clearly inside it: equivalent
    ((0.05, 0.30, -0.10), 0.1, UNDERPOWERED, UNDERPOWERED),  # straddles: cannot tell
])
def test_each_outcome(diffs, margin, directional, null):
    p = paired({i: 2.0 + d for i, d in enumerate(diffs)}, {i: 2.0 for i in range(3)})
    assert exceeds(p, margin) == directional and equivalent(p, margin) == null
    assert exceeds(None) == equivalent(None, margin) == UNDERPOWERED


def test_f6_pre_ln_without_warm_up_is_shown_worse_not_equivalent():
    """The reference's numbers (results/README.md, F6): Pre-LN without warm-up is worse on every
    seed by 0.12-0.27, so "does not need warm-up" at margin 0.1 is refuted, not shown."""
    without = {0: 2.207, 1: 2.363, 2: 2.2, 3: 2.281, 4: 2.31}
    with_ = {0: 2.04, 1: 2.091, 2: 2.077, 3: 2.042, 4: 2.08}
    p = paired(without, with_)
    assert equivalent(p, 0.1) == REFUTED and exceeds(p, 0.1) == SHOWN
