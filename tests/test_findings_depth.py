"""F11 (depth) on synthetic reference directories: it shows on a healthy set and each part flips
when one seed's loss crosses LOSS_MARGIN."""

from __future__ import annotations

import json
import math

import pytest

from tests.test_findings import BASELINES, SEEDS, _write_run
from trainer.findings import depth as D
from trainer.findings.thresholds import LOSS_MARGIN
from trainer.findings.reference import Reference

# healthy numbers: Pre-LN improves with depth, the others fall further behind it
HEALTHY = {"Pre-LN + residual": {2: 2.3, 6: 2.1, 12: 2.0},
           "Post-LN + residual": {2: 2.35, 6: 3.1, 12: 3.1},
           "no norm + residual": {2: 2.35, 6: 2.3, 12: 2.5},
           "Pre-LN, no residual": {2: 2.5, 6: 3.1, 12: 3.1}}


def build(root, change=lambda name, depth, seed, loss: loss) -> Reference:
    for name, want in D.VARIANTS:
        for depth, loss in HEALTHY[name].items():
            group = "grid" if depth == 6 else "depth"
            for seed in SEEDS:
                value = change(name, depth, seed, loss + 0.001 * seed)
                summary = ({"status": "diverged", "diverged_step": 9} if math.isinf(value)
                           else {"status": "completed", "final_eval_loss": value})
                run = ",".join(f"{k}={v}" for k, v in want.items()) + (f",seed={seed}" if seed else "")
                _write_run(root / group / f"num_layers={depth},{run}",
                           [f"model.num_layers={depth}", f"train.seed={seed}"]
                           + [f"model.{k}={v}" for k, v in want.items()], summary, {}, {})
    for group in ("grid", "depth"):
        (root / group / "baselines.json").write_text(json.dumps(BASELINES))
    return Reference(root)


def verdict(tmp_path, change=None) -> str:
    ref = build(tmp_path / "reference", *([change] if change else []))
    return D.f11(ref).verdict


def test_depth_claim_shows_on_the_healthy_set(tmp_path):
    assert verdict(tmp_path) == "yes"


def test_healthy_model_worse_with_depth_flips_it(tmp_path):
    # seed 1 of Pre-LN at 12 blocks ends LOSS_MARGIN worse than at 2: the healthy part fails
    worse = HEALTHY["Pre-LN + residual"][2] + LOSS_MARGIN + 0.01
    change = (lambda name, d, s, loss: worse if (name, d, s) == ("Pre-LN + residual", 12, 1)
              else loss)
    assert verdict(tmp_path, change) == "partly"


@pytest.mark.parametrize("other", [name for name, _ in D.OTHERS])
def test_a_variant_keeping_up_with_depth_flips_it(tmp_path, other):
    # its gap to Pre-LN grows by less than LOSS_MARGIN on one seed
    def change(name, d, s, loss):
        if (name, d, s) == (other, 12, 2):
            return HEALTHY["Pre-LN + residual"][12] + 0.002 + (
                HEALTHY[other][2] - HEALTHY["Pre-LN + residual"][2]) + LOSS_MARGIN - 0.01
        return loss
    assert verdict(tmp_path, change) == "partly"


def test_a_diverged_deep_run_counts_as_falling_behind(tmp_path):
    change = lambda name, d, s, loss: math.inf if (name, d) == ("no norm + residual", 12) else loss
    assert verdict(tmp_path, change) == "yes"


def test_missing_depth_runs_read_not_run(tmp_path):
    (tmp_path / "reference" / "grid").mkdir(parents=True)
    assert D.f11(Reference(tmp_path / "reference")).verdict == "not run"
