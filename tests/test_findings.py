"""Findings verdicts on synthetic reference directories: every claim shows on a healthy set, and
each one flips when one number crosses its threshold (a verdict that cannot flip is a defect).

The run directories are real (config.yaml from the reference config, summary.json, TensorBoard
event files written by the lab's own writers); only the numbers in them are made up.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from trainer.config import load_config, to_yaml
from trainer.findings import core as C, stream as FS, thresholds as F
from trainer.findings.claim import BN_NORMS, TOKEN_NORMS
from trainer.findings.reference import Reference
from trainer.telemetry.tensorboard import RunWriters

SEEDS = (0, 1, 2)
LAYERS = int(load_config("configs/reference.yaml").model.num_layers)
BASELINES = {"unigram": 3.1, "bigram": 2.5, "bigram_k": 0.03, "unigram_k": 0.001}


def _healthy_grid(norm: str, residual: str) -> dict:
    """Numbers of a grid run under which every claim holds (seed added later as jitter)."""
    bn = norm in BN_NORMS
    loss = {"layer": 2.1}.get(norm, 2.3) if residual == "true" else 2.6
    precise = {"batch": 2.5, "masked_batch": 2.3}.get(norm)
    return {
        "loss": loss, "train_mode": loss - 0.2 if bn else None, "precise": precise,
        "invariance": 0.5 if bn else 0.0,
        "rank1": (0.9, 0.8) if residual == "true" else (0.05, 0.02),
        "growth": 5.0 if norm == "none" else 1.0,
    }


# F14: α -> (final loss, final saturation of the saturated block); 1.0 sits at the unigram plateau
DYT_HEALTHY = {0.05: (2.4, 0.0), 0.2: (2.2, 0.02), 0.5: (2.3, 0.1), 1.0: (3.1, 0.6)}


def _write_run(path: Path, overrides: list[str], summary: dict, train: dict, evals: dict) -> None:
    path.mkdir(parents=True)
    cfg = load_config("configs/reference.yaml", overrides)
    (path / "config.yaml").write_text(to_yaml(cfg))
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "meta.json").write_text(json.dumps({"git_sha": "0" * 40, "git_dirty": False}))
    writers = RunWriters(path)
    for group, curves in (("train", train), ("eval", evals)):
        for step, scalars in curves.items():
            writers.write(group, scalars, step)
    writers.close()


def build(root: Path, change=lambda kind, key, values: values, seeds=SEEDS) -> Reference:
    """A synthetic reference; ``change(kind, key, values)`` may alter one run's numbers."""
    steps = int(load_config("configs/reference.yaml").train.steps)
    for norm, residual in [(n, "true") for n in TOKEN_NORMS + BN_NORMS] + [("layer", "false")]:
        for seed in seeds:
            key = (norm, residual, seed)
            v = change("grid", key, {**_healthy_grid(norm, residual)})
            jitter = 0.001 * seed
            summary = {"status": "completed", "final_eval_loss": v["loss"] + jitter,
                       "final_eval_loss_train_mode": jitter + (
                           v["loss"] if v["train_mode"] is None else v["train_mode"]),
                       "final_eval_loss_precise_bn": None if v["precise"] is None
                       else v["precise"] + jitter,
                       "loss_spikes": 0, "probes": {"probe/batch_invariance": v["invariance"]}}
            tag = f"probe/rank1_residual/block_{LAYERS - 1}"
            evals = {0: {tag: v["rank1"][0]}, steps: {tag: v["rank1"][1], "loss": v["loss"]}}
            train = {steps - 1: {"activation/block_0/token_std": 1.0,
                                 f"activation/block_{LAYERS - 1}/token_std": v["growth"]}}
            name = f"norm={norm},residual={residual},placement=pre" + (f",seed={seed}" if seed else "")
            _write_run(root / "grid" / name, [f"model.norm={norm}", f"model.residual={residual}",
                                              f"train.seed={seed}"], summary, train, evals)
    for norm, placement, warmup in [("layer", p, w) for p in ("pre", "post") for w in (0, 50)] + [
            ("none", "pre", w) for w in (0, 50)]:
        for seed in seeds:
            key = (norm, placement, warmup, seed)
            loss = {("post", 0): math.inf, ("post", 50): 2.3, ("pre", 0): 2.3}.get(
                (placement, warmup), 2.25)
            v = change("lr", key, {"loss": loss, "spikes": 2 if norm == "none" else 0})
            summary = ({"status": "diverged", "diverged_step": 7} if math.isinf(v["loss"]) else
                       {"status": "completed", "final_eval_loss": v["loss"] + 0.001 * seed})
            summary["loss_spikes"] = v["spikes"]
            name = f"norm={norm},placement={placement},warmup_steps={warmup}" + (
                f",seed={seed}" if seed else "")
            _write_run(root / "lr_slice" / name,
                       [f"model.norm={norm}", f"model.placement={placement}",
                        f"train.warmup_steps={warmup}", f"train.seed={seed}"], summary, {}, {})
    for alpha, (loss, sat) in DYT_HEALTHY.items():
        for seed in seeds:
            v = change("dyt", (alpha, seed), {"loss": loss, "saturation": sat})
            summary = ({"status": "diverged", "diverged_step": 7} if math.isinf(v["loss"]) else
                       {"status": "completed", "final_eval_loss": v["loss"] + 0.001 * seed})
            tags = [f"probe/dyt_saturation/block_{i}" for i in range(LAYERS)]
            # step 0 never saturates; at the end only the last block does (None: no probe)
            evals = {0: dict.fromkeys(tags, 0.0), steps: {
                **dict.fromkeys(tags[:-1], 0.0), tags[-1]: v["saturation"], "loss": v["loss"]}}
            _write_run(root / "dyt" / (f"dyt_alpha={alpha}" + (f",seed={seed}" if seed else "")),
                       ["model.norm=dyt", f"model.dyt_alpha={alpha}", f"train.seed={seed}"],
                       summary, {}, evals if v["saturation"] is not None else {})
    for group in ("grid", "lr_slice", "dyt"):
        (root / group / "baselines.json").write_text(json.dumps(BASELINES))
    (root / "init").mkdir()
    with open(root / "init" / "grad_profile.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, ["init", "placement", "seed", "last_over_first"])
        w.writeheader()
        for placement in ("pre", "post"):
            for seed in seeds:
                ratio = change("init", (placement, seed), {"ratio": 2.0 if placement == "post" else 0.8})
                w.writerow({"init": "xavier", "placement": placement, "seed": seed,
                            "last_over_first": ratio["ratio"]})
    (root / "analysis").mkdir()
    with open(root / "analysis" / "batch_size.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, ["run", "norm", "seed", "mode", "batch_size", "loss", "loss_std"])
        w.writeheader()
        for norm in ("layer", "batch", "masked_batch"):
            for seed in seeds:
                bn = norm != "layer"
                v = change("bs", (norm, seed), {
                    "train": {b: 2.3 + (0.3 / b if bn else 0.0) for b in (1, 2, 4, 8, 16, 64)},
                    "inference": {b: 2.3 for b in (1, 2, 4, 8, 16, 64)}})
                for mode in ("train", "inference"):
                    for b, loss in [*v[mode].items(), ("1x1", 3.0)]:
                        w.writerow({"run": f"{norm},{seed}", "norm": norm, "seed": seed, "mode": mode,
                                    "batch_size": b, "loss": loss, "loss_std": 0.1})
    from tests.test_findings_stream import write_stream_parts  # F10, F12

    write_stream_parts(root, change, seeds)
    return Reference(root)


def verdicts(ref: Reference) -> dict[str, str]:
    return {f.id: f.verdict for f in C.measure(ref)}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return verdicts(build(tmp_path_factory.mktemp("ref") / "reference"))


# claims whose synthetic reference is built by their own test module
OWN_MODULE = {"F8": "tests/test_findings_batch.py", "F9": "tests/test_findings_batch.py",
              "F11": "tests/test_findings_depth.py"}


def test_every_claim_shows_on_the_healthy_set(healthy):
    assert {"S", "F1", "F7", *OWN_MODULE} <= set(healthy)
    assert healthy == {c: "not run" if c in OWN_MODULE else "yes" for c in healthy}


def _set(kind_, match, **new):
    def change(kind, key, values):
        return {**values, **new} if kind == kind_ and match(key) else values
    return change


FLIPS = {
    # claim: a change of one group's numbers across that claim's threshold
    "S": _set("grid", lambda k: k[:2] == ("layer", "true"), loss=2.5 - F.HEALTHY_BELOW_BIGRAM + 0.01),
    "F1": _set("grid", lambda k: k[:2] == ("rms", "true"), invariance=2 * F.INVARIANT_MAX),
    "F2": _set("grid", lambda k: k[:2] == ("batch", "true"), train_mode=2.5 - F.GAP_MIN / 2),
    "F3": _set("grid", lambda k: k[:2] == ("batch", "true"), precise=2.3 + F.LOSS_MARGIN / 2),
    "F4": _set("grid", lambda k: k[:2] == ("layer", "false"), rank1=(0.9 - F.COLLAPSE_MARGIN / 2, 0.8)),
    "F5": _set("grid", lambda k: k[:2] == ("none", "true"), growth=F.GROWTH_FACTOR * 0.9),
    "F6": _set("init", lambda k: k[0] == "post", ratio=F.PROFILE_GROWTH * 0.9),
    "F7": _set("bs", lambda k: k[0] == "layer",
               inference={1: 2.3 + 2 * F.FLAT_MAX, **{b: 2.3 for b in (2, 4, 8, 16, 64)}}),
    # the plateau α: one seed's saturation just below SATURATED_MIN
    "F14": _set("dyt", lambda k: k == (1.0, 1), saturation=F.SATURATED_MIN - 0.01),
}


def test_f2_measures_layer_norm_in_both_modes(tmp_path):
    """LN's 'no gap' is read from a real train-mode forward (analysis), so it can fail."""
    change = _set("bs", lambda k: k[0] == "layer",
                  train={b: 2.3 + 2 * F.GAP_ZERO for b in (1, 2, 4, 8, 16, 64)})
    got = verdicts(build(tmp_path / "reference", change))
    assert got["F2"] == "partly"


@pytest.mark.parametrize("claim", sorted(FLIPS))
def test_each_verdict_flips_when_its_number_crosses_the_threshold(claim, healthy, tmp_path):
    got = verdicts(build(tmp_path / "reference", FLIPS[claim]))
    assert got[claim] != "yes"
    assert {c: v for c, v in got.items() if c != claim} == {c: v for c, v in healthy.items() if c != claim}


def test_one_seed_that_disagrees_is_enough_to_stop_a_comparison(tmp_path):
    """Every seed must hold: seed 2 alone gets a masked BN as bad as the naive one."""
    change = _set("grid", lambda k: k == ("masked_batch", "true", 2), precise=2.6)
    assert verdicts(build(tmp_path / "reference", change))["F3"] != "yes"


def test_fragility_counts_spikes_as_well_as_divergence(tmp_path):
    change = _set("lr", lambda k: k[0] == "none", spikes=0)
    assert verdicts(build(tmp_path / "reference", change))["F5"] == "partly"


def test_two_seeds_are_not_enough(tmp_path):
    ref = build(tmp_path / "reference", seeds=(0, 1))
    found = [f for f in C.measure(ref) if f.id != "F13"]  # F13 computes LN itself, no runs
    assert all(f.verdict == "not run" for f in found)
    assert any("needs 3" in m for f in found for m in f.missing)


def test_the_page_lists_every_claim_with_its_falsifier_and_verdict(tmp_path):
    ref = build(tmp_path / "reference")
    found = C.measure(ref)
    text = C.render(ref, found)
    for claim in found:
        assert f"## {claim.id}" in text and claim.falsifier in text
    # only the claims whose runs this synthetic set does not build read "not run"
    assert text.count("Not run yet; missing:") == len(set(OWN_MODULE))


def test_committed_findings_are_generated_from_the_committed_runs(monkeypatch):
    """results/README.md is exactly what the findings command computes from results/reference,
    and measuring every claim reads each event directory at most once."""
    from collections import Counter

    from trainer.results import run as run_module

    reads, real = Counter(), run_module.read_scalars
    monkeypatch.setattr(run_module, "read_scalars", lambda d: reads.update([str(d)]) or real(d))
    root = Path(__file__).resolve().parents[1] / "results"
    ref = Reference(root / "reference")
    assert C.render(ref, C.measure(ref)) == (root / "README.md").read_text()
    assert reads and max(reads.values()) == 1


def test_f7_needs_bn_to_suffer_at_small_batches(tmp_path):
    change = _set("bs", lambda k: k[0] == "batch",
                  train={b: 2.3 + F.SMALL_BATCH_GAP / 2 / b for b in (1, 2, 4, 8, 16, 64)})
    assert verdicts(build(tmp_path / "reference", change))["F7"] == "partly"


F14_FLIPS = {
    # (a): no α ends below bigram (every α between bigram and the unigram plateau)
    "none below bigram": _set("dyt", lambda k: k[0] != 1.0, loss=BASELINES["bigram"] + 0.05),
    # (b): a trained α saturated on one seed
    "trained but saturated": _set("dyt", lambda k: k == (0.2, 2), saturation=F.SATURATED_MIN),
    # (b): one seed of the plateau α just below SATURATED_MIN
    "plateau unsaturated": FLIPS["F14"],
}


@pytest.mark.parametrize("case", sorted(F14_FLIPS))
def test_f14_flips_on_either_part(case, tmp_path):
    assert FS.f14(build(tmp_path / "reference", F14_FLIPS[case])).verdict == "partly"


def test_f14_saturated_min_is_inclusive_and_reads_the_final_probe(tmp_path):
    """>= SATURATED_MIN counts as saturated; step 0's 0.0 and the unsaturated blocks are ignored."""
    change = _set("dyt", lambda k: k[0] == 1.0, saturation=F.SATURATED_MIN)  # 0.25: exact in float32
    assert FS.f14(build(tmp_path / "reference", change)).verdict == "yes"


def test_f14_missing_runs_or_probe_read_not_run(tmp_path):
    ref = build(tmp_path / "a" / "reference", seeds=(0, 1))
    assert FS.f14(ref).verdict == "not run"
    no_probe = _set("dyt", lambda k: k == (0.5, 0), saturation=None)
    f = FS.f14(build(tmp_path / "b" / "reference", no_probe))
    assert f.verdict == "not run" and any("dyt_saturation" in m for m in f.missing)


def test_f14_figure(tmp_path):
    from trainer.findings.figures import saturation_by_alpha

    ref = build(tmp_path / "reference")
    path = saturation_by_alpha(ref, ref.root / "dyt" / "plots" / "saturation.png")
    assert path is not None and path.stat().st_size > 0
    (tmp_path / "empty").mkdir()
    assert saturation_by_alpha(Reference(tmp_path / "empty"), tmp_path / "x.png") is None
