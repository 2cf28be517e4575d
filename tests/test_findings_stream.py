"""F10 (γ/β) and F12 (token identity) on synthetic reference directories, in
``tests/test_findings.py``'s style: both show on the healthy set, and each part flips when one
number crosses its threshold.

``write_stream_parts`` adds what these claims read (the ``affine`` sub-sweep's runs and
``analysis/stream.csv``) to ``test_findings.build``'s reference, which calls it.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests import test_findings as T
from trainer.findings import core as C
from trainer.findings import thresholds as F
from trainer.findings import stream as S

# Healthy numbers, per (norm_affine, residual): last-block CV of the LN output norms and probe
# accuracy per block (-1 = embedding output). Seeds add a small jitter.
HEALTHY = {("true", "true"): {"cv": 0.1, "acc": 0.98},
           ("true", "false"): {"cv": 0.1, "acc": 0.5},
           ("false", "true"): {"cv": 1e-7, "acc": 0.97}}
AFFINE_LOSS = 2.3  # the grid's Pre-LN + residual ends at 2.1 (test_findings._healthy_grid)


def write_stream_parts(root: Path, change, seeds) -> None:
    """The ``affine`` runs and ``analysis/stream.csv``; ``change(kind, key, values)`` with kind
    "affine" (key: seed) or "stream" (key: (norm_affine, residual, seed))."""
    steps = int(T.load_config("configs/reference.yaml").train.steps)
    for seed in seeds:
        v = change("affine", seed, {"loss": AFFINE_LOSS})
        name = "norm_affine=false" + (f",seed={seed}" if seed else "")
        T._write_run(root / "affine" / name,
                     ["model.norm=layer", "model.norm_affine=false", f"train.seed={seed}"],
                     {"status": "completed", "final_eval_loss": v["loss"] + 0.001 * seed},
                     {}, {steps: {"loss": v["loss"]}})
    rows = []
    for (affine, residual), healthy in HEALTHY.items():
        for seed in seeds:
            v = change("stream", (affine, residual, seed), {
                "cv": {b: healthy["cv"] for b in range(T.LAYERS)},
                "acc": {b: healthy["acc"] for b in range(-1, T.LAYERS)}})
            for block, acc in v["acc"].items():
                rows.append({"run": f"{affine},{residual},{seed}", "norm": "layer",
                             "residual": residual, "norm_affine": affine, "seed": seed,
                             "block": block, "probe_accuracy": acc + 0.001 * seed,
                             "norm_output_cv": "" if block < 0 else v["cv"][block] * (1 + 0.01 * seed),
                             "stream_norm_cv": 0.3})
    (root / "analysis").mkdir(exist_ok=True)
    with open(root / S.STREAM_CSV, "w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _last(**new):
    """A change of the last block's numbers of the stream rows matching ``new['match']``."""
    match, key, value = new["match"], new["key"], new["value"]

    def change(kind, k, values):
        if kind != "stream" or not match(k):
            return values
        return {**values, key: {**values[key], T.LAYERS - 1: value}}
    return change


FLIPS = {
    # (claim, part index): one number just across that part's threshold
    ("F10", 0): T._set("affine", lambda seed: True, loss=2.1 + F.LOSS_MARGIN / 2),
    ("F10", 1): _last(match=lambda k: k[:2] == ("true", "true"), key="cv",
                      value=F.AFFINE_SPREAD_MIN * 0.9),
    ("F10", 2): _last(match=lambda k: k[:2] == ("false", "true"), key="cv",
                      value=F.FLAT_SPREAD_MAX * 1.5),
    ("F12", 0): _last(match=lambda k: k[:2] == ("true", "true"), key="acc",
                      value=F.IDENTITY_HIGH - 0.01),
    ("F12", 1): _last(match=lambda k: k[:2] == ("true", "false"), key="acc",
                      value=0.98 - F.IDENTITY_DROP / 2),
}


def measured(root: Path, change=lambda kind, key, values: values, seeds=T.SEEDS) -> dict:
    return {f.id: f for f in C.measure(T.build(root, change, seeds))}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return measured(tmp_path_factory.mktemp("ref") / "reference")


def test_both_claims_show_on_the_healthy_set(healthy):
    for claim in ("F10", "F12"):
        assert healthy[claim].verdict == "yes", (healthy[claim].lines, healthy[claim].parts)
    assert any(line.startswith("embedding output, residual=true") for line in healthy["F12"].lines)


@pytest.mark.parametrize("claim,part", sorted(FLIPS))
def test_each_part_flips_when_its_number_crosses_the_threshold(claim, part, healthy, tmp_path):
    got = measured(tmp_path / "reference", FLIPS[(claim, part)])
    assert [ok for _, ok in got[claim].parts] == [i != part for i in range(len(got[claim].parts))]
    assert got[claim].verdict == "partly"
    assert {c: f.verdict for c, f in got.items() if c != claim} == {
        c: f.verdict for c, f in healthy.items() if c != claim}


def test_one_seed_across_the_threshold_is_enough(tmp_path):
    change = _last(match=lambda k: k == ("false", "true", 2), key="cv",
                   value=F.FLAT_SPREAD_MAX * 1.5)
    assert measured(tmp_path / "reference", change)["F10"].verdict != "yes"


def test_missing_affine_rows_make_f10_not_run_and_leave_f12(tmp_path):
    root = tmp_path / "reference"
    T.build(root)
    path = root / S.STREAM_CSV
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["norm_affine"] == "true"]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    got = {f.id: f for f in C.measure(T.Reference(root))}
    assert got["F10"].verdict == "not run"
    assert any("norm_affine=false" in m for m in got["F10"].missing)
    assert got["F12"].verdict == "yes"


def test_without_the_affine_runs_f10_names_them(tmp_path):
    root = tmp_path / "reference"
    T.build(root)
    import shutil

    shutil.rmtree(root / "affine")
    got = {f.id: f for f in C.measure(T.Reference(root))}
    assert got["F10"].verdict == "not run" and any(m.startswith("affine:")
                                                   for m in got["F10"].missing)
