"""I1 (QK-norm) and I2 (z-loss), pre-registration 3, judged on a synthetic ``scale/inst_lr``: real
run directories (config.yaml from the reference config and the variant's keys, summary.json with
the instruments' extremes, event files by the lab's writers), made-up numbers. With the healthy
numbers every part shows; each flip below changes one number and must change the verdict."""

import json
import math
import shutil
from pathlib import Path

import pytest

from tests.reference_fixture import BASELINES, INIT_LOSS, STEPS, write_run
from trainer.findings import instability
from trainer.findings.page import render_page
from trainer.findings.reference import Reference
from trainer.findings.thresholds import INSTABILITY_GRID, INSTABILITY_SEEDS, RATE_GRID, R_TOP

INF = math.inf
# variant -> validation (= test) loss at each rate of INSTABILITY_GRID; best 3e-3 for every one
LOSS = {"Pre-LN": (2.6, 2.3, 2.1, 2.2, 2.6, 3.0, INF),
        "QK-norm": (2.6, 2.3, 2.1, 2.15, 2.3, 2.5, 2.8),
        "z-loss": (2.6, 2.3, 2.1, 2.2, 2.6, 2.9, INF)}
# variant -> (max attention logit at the best rate, at R_TOP); log Z mean (final, max, min)
LOGIT = {"Pre-LN": (5.0, 100.0), "QK-norm": (5.0, 8.0), "z-loss": (5.0, 90.0)}
LOG_Z = {"Pre-LN": (2.0, 5.0, -1.0), "QK-norm": (2.0, 5.0, -1.0), "z-loss": (0.5, 2.0, 0.1)}


def _summary(name: str, lr: float, seed: int, loss: float) -> dict:
    if math.isinf(loss):
        return {"status": "diverged", "diverged_step": 7, "loss_spikes": 0}
    logit = LOGIT[name][1] if lr == R_TOP else LOGIT[name][0]
    final, hi, lo = LOG_Z[name]
    blocks = {f"attention/block_{i}/max_logit": logit * (0.5 if i else 1.0) for i in range(2)}
    return {"status": "completed", "final_eval_loss": loss, "final_test_loss": loss,
            "loss_spikes": 0, "instruments": {"output/log_z_mean": final + 0.01 * seed},
            "instruments_max": {**blocks, "output/log_z_mean": hi},
            "instruments_min": {"output/log_z_mean": lo}}


def _overrides(name: str) -> list[str]:
    keys = instability.VARIANTS[name]
    return ["model.norm=layer", "model.residual=true", "model.placement=pre",
            "train.warmup_steps=50", f"model.qk_norm={keys['qk_norm']}",
            f"train.z_loss={keys['z_loss']}"]


def write_reference(root: Path) -> None:
    group = root / instability.SCALE / instability.GROUP
    for name, losses in LOSS.items():
        for lr, loss in zip(INSTABILITY_GRID, losses):
            for seed in INSTABILITY_SEEDS:
                value = loss + 0.01 * seed
                run = group / f"{name},lr={lr},seed={seed}"
                write_run(run, [*_overrides(name), f"train.lr={lr}", f"train.seed={seed}"],
                          _summary(name, lr, seed, value),
                          {0: {"output/log_z_mean": 5.5},
                           STEPS: {} if math.isinf(value) else {"output/log_z_mean": LOG_Z[name][0]}},
                          {0: {"loss": INIT_LOSS}, STEPS: {} if math.isinf(value) else {"loss": value}})
                if name == "Pre-LN" and seed == 0 and lr in RATE_GRID:  # the control's originals
                    shutil.copytree(run, root / "lr" / f"pre,lr={lr}")
    (group / "baselines.json").write_text(json.dumps(BASELINES))


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inst") / "reference"
    write_reference(root)
    return root


def _copy(healthy: Path, tmp_path: Path) -> Path:
    shutil.copytree(healthy, tmp_path / "reference")
    return tmp_path / "reference"


def _edit(run: Path, **summary) -> None:
    data = json.loads((run / "summary.json").read_text())
    for key, value in summary.items():
        data.setdefault(key, {}).update(value) if isinstance(value, dict) else data.update({key: value})
    (run / "summary.json").write_text(json.dumps(data))


def test_healthy_numbers_show_every_part_and_the_control_holds(healthy):
    ref = Reference(healthy)
    i1, i2 = instability.i1(ref), instability.i2(ref)
    assert not i1.missing and not i2.missing
    assert (i1.marks, i2.marks) == ("✓✓✓✓✓", "✓✓✓✓")
    assert [p.shown for p in i1.parts if p.control] == [True]
    assert i1.verdict == i2.verdict == "yes"
    text = render_page(ref, [])
    assert "## Instabilities and their fixes (pre-registration 3)" in text and "| [I2](#i2) |" in text


def test_logits_that_do_not_grow_refute_i1a(healthy, tmp_path):
    root = _copy(healthy, tmp_path)
    for seed in INSTABILITY_SEEDS:  # Pre-LN's logits at R_TOP only twice those at its best
        _edit(root / "scale/inst_lr" / f"Pre-LN,lr={R_TOP},seed={seed}",
              instruments_max={"attention/block_0/max_logit": 10.0,
                                 "attention/block_1/max_logit": 5.0})
    i1 = instability.i1(Reference(root))
    assert i1.marks[:2] == "✗✗" and i1.verdict == "partly"


def test_log_z_near_zero_without_the_z_loss_refutes_i2a(healthy, tmp_path):
    root = _copy(healthy, tmp_path)
    for seed in INSTABILITY_SEEDS:
        _edit(root / "scale/inst_lr" / f"Pre-LN,lr=0.003,seed={seed}",
              instruments={"output/log_z_mean": 0.3})
    assert instability.i2(Reference(root)).marks[0] == "✗"


def test_a_curve_that_does_not_reproduce_fails_the_control(healthy, tmp_path):
    root = _copy(healthy, tmp_path)
    shutil.rmtree(root / "lr" / "pre,lr=0.001")
    write_run(root / "lr" / "pre,lr=0.001", [*_overrides("Pre-LN"), "train.lr=0.001"],
              _summary("Pre-LN", 1e-3, 0, 2.3), {}, {0: {"loss": INIT_LOSS}, STEPS: {"loss": 2.4}})
    i1 = instability.i1(Reference(root))
    control = next(p for p in i1.parts if p.control)
    assert not control.shown and "lr 0.001" in control.text and i1.verdict == "inconclusive"


def test_a_best_rate_at_the_grids_edge_leaves_the_parts_reading_it_unjudged(healthy, tmp_path):
    root = _copy(healthy, tmp_path)
    for seed in INSTABILITY_SEEDS:
        _edit(root / "scale/inst_lr" / f"Pre-LN,lr=0.0003,seed={seed}", final_eval_loss=1.9)
    i1 = instability.i1(Reference(root))
    assert i1.parts[1].shown is None and "open edge" in i1.parts[1].why
    assert i1.verdict == "inconclusive"


def test_a_missing_run_is_named_and_nothing_is_judged(healthy, tmp_path):
    root = _copy(healthy, tmp_path)
    shutil.rmtree(root / "scale/inst_lr" / "QK-norm,lr=0.3,seed=2")
    i1 = instability.i1(Reference(root))
    assert i1.verdict == "not run" and any("lr 0.3 seed 2" in m for m in i1.missing)
    assert instability.i2(Reference(root)).verdict == "yes"  # I2 reads no QK-norm run


def test_the_figures_draw_only_a_complete_grid(healthy, tmp_path):
    from trainer.findings import figures_scale

    ref = Reference(healthy)
    fig = figures_scale.max_logit_vs_rate(ref)
    lines = {line.get_label(): line.get_ydata() for line in fig.axes[0].get_lines()}
    assert set(lines) >= set(instability.VARIANTS)
    top = list(INSTABILITY_GRID).index(R_TOP)
    assert lines["Pre-LN"][top] == pytest.approx(100.0) and lines["QK-norm"][top] == pytest.approx(8.0)
    fig = figures_scale.log_z_at_top(ref)
    drawn = {line.get_label(): line.get_ydata() for line in fig.axes[0].get_lines()}
    assert list(drawn["Pre-LN"]) == [5.5, LOG_Z["Pre-LN"][0]]
    assert list(drawn["z-loss"]) == [5.5, LOG_Z["z-loss"][0]]
    root = _copy(healthy, tmp_path)
    shutil.rmtree(root / "scale/inst_lr" / "QK-norm,lr=0.3,seed=2")
    assert figures_scale.max_logit_vs_rate(Reference(root)) is None
    assert figures_scale.log_z_at_top(Reference(root)) is not None  # reads no QK-norm run
