"""The one verdict rule (trainer/findings/claim.py) and the one threshold rule
(trainer/results/metrics.py), on every combination of part outcomes."""

from __future__ import annotations

import itertools

import pytest

from trainer.findings.claim import Part, verdict
from trainer.results.metrics import above, beyond, interval


def _expected(evidence: tuple, controls: tuple) -> str:
    """The rule as the pre-registration states it, written independently of the code."""
    if not all(controls):
        return "inconclusive"
    if not evidence:
        return "checks only"
    shown, failed = evidence.count(True), evidence.count(False)
    if failed == 0:
        return "yes" if shown == len(evidence) else "inconclusive"
    return "partly" if shown else "no"


@pytest.mark.parametrize("n_evidence", range(4))
@pytest.mark.parametrize("controls", [(), (True,), (False,), (True, False)])
def test_verdict_over_every_combination(n_evidence, controls):
    for evidence in itertools.product((True, False, None), repeat=n_evidence):
        if not evidence and not controls:
            continue
        parts = [Part(f"e{i}", e) for i, e in enumerate(evidence)]
        parts += [Part(f"c{i}", c, control=True) for i, c in enumerate(controls)]
        assert verdict(parts) == _expected(evidence, controls), (evidence, controls)
        assert verdict(parts, missing=True) == "not run"


def test_controls_never_make_a_claim_yes_or_no():
    assert verdict([Part("c", True, control=True)]) == "checks only"
    assert verdict([Part("e", False), Part("c", True, control=True)]) == "no"
    assert verdict([Part("e", True), Part("c", True, control=True)]) == "yes"


def test_no_parts_is_no_verdict():
    """A claim that judged nothing has no verdict (it used to read "checks only"); a claim whose
    inputs are missing is still *not run*."""
    with pytest.raises(ValueError, match="no parts"):
        verdict([])
    assert verdict([], missing=True) == "not run"


def test_heavy_tailed_maxima_are_judged_on_a_log_scale():
    """F8's naive-BN values of the archived reference: a linear t-interval of three maxima reaches
    below zero; the interval of their logarithms is the geometric mean's and stays positive."""
    values = {0: 44.7, 1: 17.5, 2: 25.0}
    assert interval(values.values()).lo < 0 < interval(values.values(), log=True).lo
    assert not beyond(values, 0.01, "above") and beyond(values, 0.01, "above", log=True)
    # a log-scale test still needs every seed: one seed below the threshold fails it
    assert not beyond({**values, 3: 0.005}, 0.01, "above", log=True)


def test_values_of_exactly_zero_read_as_zero_on_a_log_scale():
    """A per-token norm's |Δ logits| is exactly 0 on every seed: the page says so, not the
    floor its logarithm is taken at; one positive seed brings the geometric mean back."""
    zeros = interval({0: 0.0, 1: 0.0, 2: 0.0}.values(), log=True)
    assert str(zeros) == "0 on every seed" and beyond({0: 0.0, 1: 0.0}, 1e-4, "below", log=True)
    mixed = str(interval([0.0, 2e-6, 0.0], log=True))
    assert "geometric" in mixed and mixed.endswith("]") and mixed.rsplit("[", 1)[1].startswith("0, ")


def test_a_log_comparison_multiplies_by_its_margin():
    a, b = {0: 5.0, 1: 5.2, 2: 4.9}, {0: 1.0, 1: 1.1, 2: 0.95}
    assert above(a, b, log=True) and above(a, b, 2.0, log=True)
    assert not above(a, b, 5.0, log=True)


@pytest.mark.parametrize("center,spread", [(3.2047, 1e-3), (2.0, 1e-4), (0.02, 0.5),
                                           (1e4, 3.0), (-1.5, 2e-3)])
def test_an_interval_prints_to_its_resolution(center, spread):
    """Mean and range are printed finely enough to read within a tenth of the half-width and
    to tell the smallest seed from the largest (3.2047 ± 0.0025 is not "3.2 [3.2, 3.2]")."""
    iv = interval([center - spread, center, center + spread])
    mean_s, rest = str(iv).split(" ± ")
    lo_s, hi_s = rest.split("[", 1)[1].rstrip("]").split(", ")
    assert lo_s != hi_s
    for shown, value in ((mean_s, iv.mean), (lo_s, iv.min), (hi_s, iv.max)):
        assert abs(float(shown) - value) <= iv.half / 10, (shown, value, iv.half)
        # at least 3 significant digits, trailing zeros included: 2.0 reads "2.00", not "2"
        assert len(shown.lstrip("-0.").replace(".", "")) >= 3, shown


def test_a_geometric_interval_prints_to_its_resolution():
    iv = interval([1.000, 1.004, 1.008], log=True)
    text = str(iv)
    lo_s, hi_s = text.split("95 % ", 1)[1].split(")", 1)[0].split(" … ")
    seeds = text.rsplit("[", 1)[1].rstrip("]").split(", ")
    assert lo_s != hi_s and seeds[0] != seeds[1], text
    assert abs(float(lo_s) - iv.lo) <= (iv.hi - iv.lo) / 20
