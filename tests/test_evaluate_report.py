"""``evaluate-norm``'s report.md (trainer/evaluate/report.py) from hand-written reports: every
measured verdict is shown, the headline counts them, one interval notation, the grid's edge.

No TensorFlow and no training: the reports are fixtures shaped like ``properties.measure``'s
output and ``protocol``'s numbers.
"""

from __future__ import annotations

import re

from trainer.evaluate.report import markdown, paired, sentence


def _ok(diff: float = 0.0) -> dict:
    return {"holds": diff <= 1e-4, "max_abs_diff": diff}


def _properties(causal_training: float = 0.0) -> dict:
    """A measured-properties fixture: everything holds except, when ``causal_training`` > 1e-4,
    causality in training mode (a later token moves earlier logits only there)."""
    return {"causal": {**_ok(), "training_mode": _ok(causal_training)},
            "batch_invariant": {"training": _ok(), "inference": _ok(), "holds": True},
            "padding_invariant": {"training": _ok(), "inference": _ok(), "holds": True},
            "train_equals_inference": _ok(), "decode_matches_forward": _ok()}


def _report(props: dict, **more) -> dict:
    rep = {"norm": "x.py:X", "display": "X", "budget": "checks", "invariant_max": 1e-4,
           "properties": {"init": props, "trained": None}, "baselines": {}, "runs": [], **more}
    return {**rep, "sentence": sentence(rep)}


def test_a_norm_that_fails_only_in_training_mode_shows_it_in_report_md():
    rep = _report(_properties(causal_training=0.05))
    md = markdown(rep)
    assert "| causal (training mode) | **no** (0.05) | — |" in md
    assert "| causal (inference mode) | yes (0) | — |" in md
    # 8 verdicts: causal in two modes, batch and padding invariance in two modes, 2 more
    assert "7 of 8 properties hold" in rep["sentence"], rep["sentence"]
    assert "not causal in training mode" in rep["sentence"]
    assert "all 8" not in rep["sentence"]


def test_a_norm_that_passes_everything_says_all_hold_before_listing_them():
    text = sentence(_report(_properties()))
    assert text.startswith("all 8 properties hold: causal in inference mode, causal in "
                           "training mode, batch-invariant in training mode"), text
    assert text.count(",") == 7 and "not" not in text.lower().split(": ", 1)[1]


LOSS = {"mean": 2.1333333, "lo": 1.7538750, "hi": 2.5127916, "half": 0.3794583, "n": 3,
        "per_seed": {"0": 2.0, "1": 2.1, "2": 2.3}}  # t(0.975, 2) = 4.303, sd = 0.1528


def _trained(edge=None, baseline_edge=None) -> dict:
    numbers = {"best_lr": 0.01, "best_at_edge": edge, "lr_sensitivity": 0.25,
               "trains_at": [0.001, 0.01], "rates_tried": [0.001, 0.01],
               "val_loss": {"0.001": 2.4, "0.01": 2.2}, "test_loss": LOSS}
    base = {**numbers, "best_at_edge": baseline_edge, "best_lr": 0.001}
    diff = paired({0: 2.0, 1: 2.1, 2: 2.3}, {0: 1.95, 1: 2.12, 2: 2.27})
    return _report(_properties(), budget="quick", numbers=numbers, baselines={"Pre-LN": base},
                   token_baselines={"unigram": 3.12345, "bigram": 2.51789},
                   paired_vs_preln=diff)


def test_one_interval_notation_with_three_decimals():
    rep = _trained()
    md = markdown(rep)
    assert ("| X | 0.01 | 0.250 | 0.001 0.01 | 2.133 (95 % CI 1.754 … 2.513; seeds 2.000 … "
            "2.300) | 2.400 | 2.200 |") in md
    # the paired difference: +0.05, -0.02, +0.03 -> mean +0.02, 95 % CI -0.070 … +0.110
    assert "+0.020 (95 % CI -0.070 … +0.110; seeds -0.020 … +0.050)" in md
    assert "95 % CI -0.070 … +0.110" in rep["sentence"]
    assert "unigram 3.123, bigram 2.518" in md
    assert "±" not in md and not re.search(r"\[[-+\d.]+, [-+\d.]+\]", md)


def test_report_md_warns_when_a_best_rate_is_the_grids_edge():
    assert "grid's edge" not in markdown(_trained())
    md = markdown(_trained(edge="highest", baseline_edge="lowest"))
    warning = next(line for line in md.splitlines() if "grid's edge" in line)
    assert "X (0.01, the highest rate tried)" in warning
    assert "Pre-LN (0.001, the lowest rate tried)" in warning


def test_report_md_names_the_placement_tested():
    assert "Placement tested: `model.placement=pre`." in markdown(_report(_properties()))
    peri = markdown(_report(_properties(), placement="peri"))
    assert "Placement tested: `model.placement=peri` (the baselines are the lab's norms in Pre)" \
        in peri
