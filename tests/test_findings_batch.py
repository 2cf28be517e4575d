"""F8/F9 verdicts on synthetic references (``test_findings.build`` plus the sub-sweeps and CSVs
these claims read): both show on a healthy set, and each part flips when one number crosses its
threshold."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.test_findings import SEEDS, _set, _write_run, build
from trainer.findings import thresholds as F
from trainer.findings import batch as FB
from trainer.findings.claim import BN_NORMS
from trainer.findings.reference import Reference


def _csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def build_batch(root: Path, change=lambda kind, key, values: values, seeds=SEEDS) -> Reference:
    """``test_findings.build`` plus the pad_to_max/small_batch sub-sweeps, composition.csv and
    padding.csv; ``change(kind, key, values)`` may alter one run's or row's numbers."""
    build(root, seeds=seeds)
    for group, override, pads in (("pad_to_max", "data.buckets=[128]", 0.12),
                                  ("small_batch", "data.tokens_per_batch=256", 0.08)):
        for norm in BN_NORMS:
            for seed in seeds:
                v = change(group, (norm, seed), {"precise": {"batch": 2.6}.get(norm, 2.3)})
                name = f"norm={norm}" + (f",seed={seed}" if seed else "")
                summary = {"status": "completed", "final_eval_loss": 2.3, "pad_fraction": pads,
                           "final_eval_loss_precise_bn": v["precise"] + 0.001 * seed}
                _write_run(root / group / name,
                           [override, f"model.norm={norm}", f"train.seed={seed}"], summary, {}, {})
    rows = []
    for norm in ("layer", "rms", "batch", "masked_batch"):
        for seed in seeds:
            token = norm in ("layer", "rms")
            v = change("composition", (norm, seed), {"train": 0.0 if token else 5.0,
                                                     "inference": 0.0})
            rows += [{"run": f"{norm},{seed}", "norm": norm, "seed": seed, "mode": m,
                      "max_abs_delta": v[m] + (1e-7 * seed if v[m] else 0.0)}
                     for m in ("train", "inference")]
    _csv(root / "analysis" / "composition.csv", rows)
    rows = []
    for norm in BN_NORMS:
        for seed in seeds:
            for condition in FB.CONDITIONS:
                healthy = {"bucketed": 0.05, "pad_to_max": 0.3, "small_batch": 0.2}[condition]
                v = change("padding", (norm, condition, seed),
                           {"shift": healthy if norm == "batch" else 0.0})
                rows.append({"run": f"{norm},{seed}", "norm": norm, "seed": seed,
                             "condition": condition, "pad_fraction": 0.1,
                             "shift": v["shift"] + 0.001 * seed})
    _csv(root / "analysis" / "padding.csv", rows)
    return Reference(root)


def verdicts(ref: Reference) -> dict[str, str]:
    return {f.id: f.verdict for f in (c(ref) for c in FB.CLAIMS)}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return verdicts(build_batch(tmp_path_factory.mktemp("ref") / "reference"))


def test_both_claims_show_on_the_healthy_set(healthy):
    assert healthy == {"F8": "yes", "F9": "yes"}


FLIPS = {  # (claim, part): one group's numbers just across that part's threshold
    ("F8", "layer"): _set("composition", lambda k: k[0] == "layer", train=2 * F.INVARIANT_MAX),
    ("F8", "rms"): _set("composition", lambda k: k == ("rms", 1), train=2 * F.INVARIANT_MAX),
    ("F8", "batch"): _set("composition", lambda k: k[0] == "batch", train=F.DEPENDENT_MIN / 2),
    ("F9", "pollution"): _set("padding", lambda k: k[:2] == ("batch", "pad_to_max"),
                              shift=F.POLLUTION_MIN * 0.9),
    ("F9", "above bucketed"): _set("padding", lambda k: k[:2] == ("batch", "bucketed"), shift=0.3),
    ("F9", "pad_to_max loss"): _set("pad_to_max", lambda k: k[0] == "batch",
                                    precise=2.3 + F.LOSS_MARGIN / 2),
    ("F9", "small_batch loss"): _set("small_batch", lambda k: k[0] == "masked_batch",
                                     precise=2.6 - F.LOSS_MARGIN / 2),
}


@pytest.mark.parametrize("case", sorted(FLIPS), ids=" ".join)
def test_each_part_flips_when_its_number_crosses_the_threshold(case, healthy, tmp_path):
    claim, _ = case
    got = verdicts(build_batch(tmp_path / "reference", FLIPS[case]))
    assert got[claim] == "partly"  # one part fails, the others still show
    others = {c: v for c, v in healthy.items() if c != claim}
    assert {c: v for c, v in got.items() if c != claim} == others


def test_masked_bn_in_the_composition_csv_is_reported_not_judged(tmp_path):
    change = _set("composition", lambda k: k[0] == "masked_batch", train=0.0)
    ref = build_batch(tmp_path / "reference", change)
    f8 = FB.f8(ref)
    assert f8.verdict == "yes" and any(s.startswith("masked_batch, train") for s in f8.lines)


def test_claims_without_their_csvs_or_seeds_are_not_run(tmp_path):
    ref = build_batch(tmp_path / "a" / "reference", seeds=(0, 1))
    assert verdicts(ref) == {"F8": "not run", "F9": "not run"}
    ref = build(tmp_path / "b" / "reference")  # no sub-sweeps, no composition/padding CSVs
    found = {f.id: f for f in (c(ref) for c in FB.CLAIMS)}
    assert all(f.verdict == "not run" for f in found.values())
    assert "analysis/composition.csv" in found["F8"].missing
    assert "analysis/padding.csv" in found["F9"].missing
    assert any(m.startswith("pad_to_max") for m in found["F9"].missing)
