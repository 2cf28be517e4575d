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


def _variant(losses: dict, runs=()):
    """A learning-rate curve of one seed: rate -> final validation loss (inf: diverged)."""
    from trainer.results.lr_sweep import LRVariant, RatePoint

    points = [RatePoint(lr, (), loss, (loss,), 6.0, "completed", 0, loss < 4.0)
              for lr, loss in sorted(losses.items())]
    return LRVariant("v", "v", {}, list(runs), points)


BASE = {"unigram": 5.0, "bigram": 4.0}  # "trains": below 4.0; the plateau: within 0.05 of 5.0


def test_the_edge_rule_extends_an_open_edge_by_one_step_until_spent():
    from trainer.edge_rule import next_rate
    from trainer.findings.thresholds import MAX_EXTENSIONS, RATE_GRID, RATE_STEP

    grid = dict(zip(RATE_GRID, (3.0, 2.8, 2.6, 2.4, 2.2)))  # best at the highest rate
    assert next_rate(_variant(grid), BASE) == pytest.approx(float(f"{RATE_GRID[-1] * RATE_STEP:.3g}"))
    assert next_rate(_variant(grid), BASE) == 0.0948  # three significant digits
    low = dict(zip(RATE_GRID, (2.2, 2.4, 2.6, 2.8, 3.0)))
    assert next_rate(_variant(low), BASE) == float(f"{RATE_GRID[0] / RATE_STEP:.3g}")
    inside = dict(zip(RATE_GRID, (2.6, 2.4, 2.2, 2.4, 2.6)))
    assert next_rate(_variant(inside), BASE) is None
    plateau = {lr: 5.01 for lr in RATE_GRID}  # nothing learned anywhere: the edge is closed
    assert next_rate(_variant(plateau), BASE) is None
    rates, loss = list(RATE_GRID), dict(grid)
    for _ in range(MAX_EXTENSIONS):  # each extension still best: extend again, then stop
        step = next_rate(_variant(loss), BASE)
        assert step is not None and step > max(rates)
        rates.append(step)
        loss[step] = min(loss.values()) - 0.1
    assert next_rate(_variant(loss), BASE) is None


def _rung(norm_test: dict, pre_test: dict, sens=(0.2, 0.3), best=(0.01, 0.003)) -> dict:
    from trainer.evaluate.report import interval_numbers, paired

    side = lambda t, s, b: {"best_lr": b, "lr_sensitivity": s, "test_loss": interval_numbers(t),
                            "why": ""}
    return {"norm": side(norm_test, sens[0], best[0]), "Pre-LN": side(pre_test, sens[1], best[1]),
            "gap": paired(norm_test, pre_test)}


def test_the_ladder_report_says_where_the_norms_trend_points():
    """A gap to Pre-LN that grows by 0.1 nats per doubling on every seed reads "falls behind";
    one that shrinks, "gains"; seeds that disagree, "no trend"; fewer than 3 points, no trend."""
    from trainer.evaluate import ladder, report

    pre = {0: 2.0, 1: 2.02, 2: 2.04}
    grows = {w: _rung({s: v + 0.1 * i + 0.001 * s for s, v in pre.items()}, pre)
             for i, w in enumerate((32, 64, 128))}
    t = ladder.trends(grows)
    assert t["gap_slope"]["slope"] == pytest.approx(0.1, abs=1e-3) and t["gap_slope"]["n"] == 9
    assert ladder.where_it_points("GN", t).startswith("GN falls behind Pre-LN as the model widens")
    shrinks = {w: _rung({s: v - 0.1 * i for s, v in pre.items()}, pre)
               for i, w in enumerate((32, 64, 128))}
    assert ladder.where_it_points("GN", ladder.trends(shrinks)).startswith("GN gains on Pre-LN")
    noisy = {w: _rung({0: 2.0 + d, 1: 2.02 - d, 2: 2.04}, pre)
             for w, d in ((32, 0.0), (64, 0.3), (128, -0.3))}
    assert "shows no trend" in ladder.where_it_points("GN", ladder.trends(noisy))
    one = {32: grows[32]}
    assert "not enough rungs" in ladder.where_it_points("GN", ladder.trends(one))
    # best rate falls as 1/width on the norm's side: a power of -1
    halving = {w: _rung(pre, pre, best=(0.01 * 32 / w, 0.003)) for w in (32, 64, 128)}
    assert ladder.trends(halving)["norm"]["best_rate_power"]["slope"] == pytest.approx(-1.0)
    rep = {"display": "GN", "ladder": {"rungs": {str(w): r for w, r in grows.items()},
                                       "trends": t, "where": ladder.where_it_points("GN", t)}}
    section = "\n".join(report._ladder_section(rep))
    assert "| d = 128 | 0.01 | 0.003 | 0.200 | 0.300 |" in section
    assert "**Where it points**: GN falls behind" in section
    assert report.sentence(rep).startswith("GN falls behind Pre-LN")


@pytest.mark.slow
def test_the_ladder_budget_runs_each_rung_with_the_edge_rule(tmp_path, monkeypatch):
    """Two tiny rungs (1 block, d = 16 and 32; two rates): the norm's grid at seed 0 is extended
    while its best sits at an open edge, seeds at the best follow, and the report has a row per
    rung (Pre-LN's side: not run on these rungs)."""
    from trainer.evaluate import ladder, protocol
    from trainer.results.run import load_runs

    root = Path(__file__).resolve().parents[1]
    rungs = {16: [*TINY, "model.dim=16", "model.ffn_dim=32"], 32: TINY}
    monkeypatch.setattr(ladder, "RUNGS", {w: "configs/base.yaml" for w in rungs})
    monkeypatch.setattr(ladder, "rung_budget", lambda w: protocol.Budget(
        f"ladder d = {w}", root / "configs/base.yaml", tuple(rungs[w]), (1e-3, 1e-2), tmp_path, ""))
    monkeypatch.setattr(ladder, "preln_side", lambda w: None)
    out = tmp_path / "gn"
    result = run_cli("evaluate-norm", "examples/norms/group_norm.py:GroupNorm", "--budget",
                     "ladder", "--seeds", "2", "--parallel", "1", "--out", out)
    assert result.returncode == 0, result.stderr
    rep = json.loads((out / "report.json").read_text())
    for width in rungs:
        runs = load_runs(out / f"d{width}" / "lr")
        numbers = rep["ladder"]["rungs"][str(width)]["norm"]
        rates = sorted(float(r.cfg.train.lr) for r in runs)
        assert rates == sorted(numbers["rates_tried"]) and {1e-3, 1e-2} <= set(rates)
        extended = ladder.next_rate(protocol.read_outcome("x", out / f"d{width}").variant,
                                    numbers.get("token_baselines"), (1e-3, 1e-2))
        assert extended is None  # the rule has nothing left to ask
        if numbers["best_at_edge"] is None:
            assert set(numbers["test_loss"]["per_seed"]) == {"0", "1"}
        assert rep["ladder"]["rungs"][str(width)]["Pre-LN"]["why"] == "not run yet"
    assert "## Across the ladder" in (out / "report.md").read_text()
    assert (out / rep["figure"]).is_file()
