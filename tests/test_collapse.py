"""I5 (which instrument moves first in Post-LN's warm-up collapse), pre-registration 3, on a
synthetic reference: real run directories written by the lab's writers, made-up curves. The
original is a Post-LN warm-up run at 3e-3 in ``lr`` that ends at the unigram plateau; its rerun
under ``scale/collapse`` has the same training curves and evaluates every 10 steps. Each test
moves one instrument's curve and must change which one moves first, or the verdict."""

import json
import shutil
from pathlib import Path

import pytest

from tests.reference_fixture import BASELINES, INIT_LOSS, STEPS, write_run
from trainer.findings import collapse
from trainer.findings.reference import Reference
from trainer.findings.thresholds import COLLAPSE_EVAL_EVERY, INSTABILITY_SEEDS

POST = ["model.norm=layer", "model.residual=true", "model.placement=post", "model.init=normal",
        "train.warmup_steps=50", "train.lr=0.003"]
PLATEAU = BASELINES["unigram"]
LAST = 5  # the reference's 6 blocks
NAME = "reference-lr-post,lr=0.003"


def _curves(logit_at: int, log_z_at: int, cosine_at: int) -> tuple[dict, dict]:
    """Train and eval curves whose instruments move at the given steps (after warm-up 50)."""
    train, evals = {}, {}
    for step in range(0, STEPS + 1, 10):
        train[step] = {"loss": INIT_LOSS if step == 0 else PLATEAU,
                       "attention/block_0/max_logit": 3.0 if step < logit_at else 9.0,
                       "attention/block_1/max_logit": 1.0,
                       "output/log_z_mean": 5.0 if step < log_z_at else 3.5}
        evals[step] = {"loss": INIT_LOSS if step == 0 else PLATEAU,
                       f"probe/token_cosine/block_{LAST}": 0.2 if step < cosine_at else 0.99}
    return train, evals


def _summary(loss: float) -> dict:
    return {"status": "completed", "final_eval_loss": loss, "final_test_loss": loss,
            "loss_spikes": 0}


def write(root: Path, moves=(100, 200, 300), rerun_moves=None, rerun: bool = True) -> None:
    for group in ("lr", "scale"):
        shutil.rmtree(root / group, ignore_errors=True)
    train, evals = _curves(*moves)
    write_run(root / "lr" / "post,lr=0.003", POST, _summary(PLATEAU), train,
              {s: v for s, v in evals.items() if s % 50 == 0})
    (root / "lr" / "baselines.json").write_text(json.dumps(BASELINES))
    for seed in INSTABILITY_SEEDS:  # deep_lr's Post-LN at 3e-3 trains: no other original
        write_run(root / "scale/deep_lr" / f"post,seed={seed}", [*POST, f"train.seed={seed}"],
                  _summary(2.4), {0: {"loss": INIT_LOSS}, STEPS: {"loss": 2.4}})
    if rerun:
        train, evals = _curves(*(rerun_moves or moves))
        write_run(root / "scale/collapse" / NAME, [*POST, f"train.eval_every={COLLAPSE_EVAL_EVERY}"],
                  _summary(PLATEAU), train, evals)


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "reference"


def test_the_failing_original_is_found_and_the_trained_ones_are_not(root):
    write(root, rerun=False)
    found = collapse.originals(Reference(root))
    assert [name for name, *_ in found] == [NAME]
    i5 = collapse.i5(Reference(root))
    assert i5.verdict == "not run" and any(NAME in m for m in i5.missing)


def test_logits_first_show_i5(root):
    write(root, moves=(100, 200, 300))
    i5 = collapse.i5(Reference(root))
    assert [p.shown for p in i5.parts] == [True, True] and i5.verdict == "yes"
    assert "attention logits 100, log Z 200, token cosine 300" in "\n".join(i5.lines)


@pytest.mark.parametrize("moves, verdict", [((300, 200, 100), "no"), ((300, 100, 200), "no"),
                                            ((100, 100, 300), "inconclusive")])
def test_another_instrument_first_refutes_and_a_tie_is_mixed(root, moves, verdict):
    write(root, moves=moves)
    i5 = collapse.i5(Reference(root))
    assert i5.verdict == verdict
    if verdict == "inconclusive":
        assert "mixed" in i5.parts[-1].why


def test_an_instrument_that_never_moves_does_not_lead(root):
    write(root, moves=(100, STEPS + 50, STEPS + 50))
    run = next(r for r in Reference(root).runs if r.name.startswith("scale/collapse"))
    moves = collapse.first_moves(run)
    assert moves["attention logits"] == 100 and moves["log Z"] == float("inf")
    assert collapse.leader(moves) == "attention logits"


def test_a_rerun_that_does_not_reproduce_is_dropped_and_named(root):
    write(root, moves=(100, 200, 300), rerun_moves=(110, 200, 300))
    i5 = collapse.i5(Reference(root))
    control = next(p for p in i5.parts if p.control)
    assert not control.shown and NAME in control.text and i5.verdict == "inconclusive"
    assert "beyond the tolerance at step" in control.text  # which curve, where
    (line,) = [x for x in i5.lines if "dropped by the control, not counted" in x]
    assert line.startswith(NAME) and "first: attention logits" in line  # shown, not counted


def test_no_failing_original_cannot_be_judged(root):
    write(root)
    summary = root / "lr" / "post,lr=0.003" / "summary.json"
    summary.write_text(json.dumps(_summary(2.4)))
    i5 = collapse.i5(Reference(root))
    assert not i5.missing and i5.parts[-1].shown is None and "nothing collapsed" in i5.parts[-1].why
