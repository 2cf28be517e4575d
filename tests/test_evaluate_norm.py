"""``evaluate-norm``: the contract properties of every lab norm are the ones its class declares
(``lacks``, trainer/models/norms.py), a non-causal norm is flagged, and the protocol writes its
report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import TINY, run_cli
from trainer.norm_names import NORM_TABLE

# What the lab's norms lack is declared by their classes (``lacks``): per-token norms nothing,
# batch statistics the training-mode invariances (results/README.md: F1, F2, F7, F8, F15, F16),
# naive BN padding invariance in training mode too (F3, F9). The norms from outside the lab
# declare nothing, so what they lack is written here.
BATCH_STATS = {"causal.training_mode", "batch_invariant.training", "train_equals_inference"}
OUTSIDE = {"examples/norms/group_norm.py:GroupNorm": set(),
           "examples/norms/power_norm.py:PowerNorm": BATCH_STATS,
           "tests/fixtures/time_norm.py:TimeGroupNorm": {
               "causal", "causal.training_mode", "padding_invariant.training",
               "padding_invariant.inference", "decode_matches_forward"}}


def _lacks(norm: str) -> set[str]:
    if norm in OUTSIDE:
        return OUTSIDE[norm]
    from trainer.models.norms import NORMS

    return set(NORMS[norm].lacks)


@pytest.mark.parametrize("norm", [*NORM_TABLE, *OUTSIDE])
def test_properties_are_what_the_norm_declares(norm):
    from trainer.evaluate import _model
    from trainer.telemetry.contract import measure
    from trainer.evaluate.report import PROPERTY_WORDS, flatten

    measured = measure(_model(norm))
    got = flatten(measured)
    assert set(got) == set(PROPERTY_WORDS)  # every verdict measured, and each has its words
    assert {k for k, holds in got.items() if not holds} == _lacks(norm), measured
    for name, entry in measured.items():  # each verdict is its measured value against the bound
        modes = [entry[m] for m in ("training", "inference", "training_mode") if m in entry]
        for e in modes + ([entry] if "max_abs_diff" in entry else []):
            assert e["holds"] == (e["max_abs_diff"] <= 1e-4)


def test_checks_budget_writes_the_report_and_flags_a_non_causal_norm(tmp_path):
    out = tmp_path / "report"
    result = run_cli("evaluate-norm", "tests/fixtures/time_norm.py:TimeGroupNorm",
                     "--budget", "checks", "--out", out)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    causal = report["properties"]["init"]["causal"]
    assert causal["holds"] is False and causal["max_abs_diff"] > 1e-2
    assert report["properties"]["trained"] is None  # nothing trained in this directory
    md = (out / "report.md").read_text()
    assert "NOT causal" in report["sentence"] and "NOT causal" in md


def test_checks_run_a_plugin_norm_in_the_placement_asked_for(tmp_path):
    out = tmp_path / "report"
    result = run_cli("evaluate-norm", "examples/norms/group_norm.py:GroupNorm", "--placement",
                     "peri", "--out", out)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["placement"] == "peri"
    assert report["properties"]["init"]["causal"]["holds"] is True  # GroupNorm: per token
    assert "`model.placement=peri`" in (out / "report.md").read_text()


def test_a_bad_norm_is_one_line_before_anything_is_written(tmp_path):
    out = tmp_path / "report"
    result = run_cli("evaluate-norm", "examples/norms/group_norm.py:Nope", "--out", out)
    assert result.returncode == 2 and "no class 'Nope'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()


def test_paired_difference_is_per_seed():
    from trainer.evaluate.report import paired

    d = paired({0: 2.0, 1: 2.5, 2: 3.0, 3: 9.0}, {0: 1.5, 1: 2.0, 2: 2.4})
    assert d["n"] == 3 and d["per_seed"] == pytest.approx({"0": 0.5, "1": 0.5, "2": 0.6})
    assert d["lo"] < 0.5333 < d["hi"] and paired({0: 1.0}, {1: 1.0}) is None


@pytest.mark.slow
def test_protocol_trains_the_grid_seeds_and_baselines_and_reports(tmp_path, monkeypatch):
    """A tiny budget (2 rates, 2 seeds, one baseline): the report has the best rate, the test
    loss per seed (seed 0 from the grid), the paired difference to Pre-LN, and a figure."""
    from trainer.evaluate import protocol

    root = Path(__file__).resolve().parents[1]
    tiny = protocol.Budget("quick", root / "configs/base.yaml", tuple(TINY), (1e-3, 1e-2),
                           tmp_path / "baselines", "")
    monkeypatch.setitem(protocol.BUDGETS, "quick", tiny)
    monkeypatch.setattr(protocol, "BASELINES", {"Pre-LN": "layer"})
    out = tmp_path / "group"
    result = run_cli("evaluate-norm", "examples/norms/group_norm.py:GroupNorm", "--budget",
                     "quick", "--seeds", "2", "--parallel", "1", "--out", out)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    numbers = report["numbers"]
    assert numbers["best_lr"] in (1e-3, 1e-2) and set(numbers["val_loss"]) == {"0.001", "0.01"}
    assert set(numbers["test_loss"]["per_seed"]) == {"0", "1"}
    grid_run = json.loads((out / "lr" / f"lr={numbers['best_lr']:g}" / "summary.json").read_text())
    assert numbers["test_loss"]["per_seed"]["0"] == grid_run["final_test_loss"]
    pre = report["baselines"]["Pre-LN"]["test_loss"]["per_seed"]
    diff = report["paired_vs_preln"]["per_seed"]
    assert diff["1"] == pytest.approx(numbers["test_loss"]["per_seed"]["1"] - pre["1"])
    assert (out / report["figure"]).is_file() and report["properties"]["trained"] is not None
    assert "Pre-LN" in (out / "report.md").read_text()
