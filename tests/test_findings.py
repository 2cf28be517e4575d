"""Findings verdicts on a synthetic reference (``tests/reference_fixture.py``): every claim shows
on the healthy set, and each evidence part flips its claim — to *partly*, *no*, *inconclusive
(underpowered)* or *inconclusive* — when its numbers cross its margin, straddle it, or a
precondition fails (a verdict that cannot flip is a defect); a failed control makes a claim
inconclusive, never "yes".
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from tests.reference_fixture import (BASELINES, DEPTH, LR_TABLE, RATE_GRID, build, changing,
                                     combine)
from trainer.findings import history
from trainer.findings import page as P
from trainer.findings import thresholds as F
from trainer.findings.reference import Reference

PLATEAU = BASELINES["unigram"]  # a loss "at the unigram plateau"
LN = ("layer", "true", "pre", 50)
POST = ("layer", "true", "post", 50)


CLAIMS = {("S" if fn.__name__ == "scale" else fn.__name__.upper()): fn for fn in P.all_claims()}
# F13 and F18 read LN's definition measured, not runs (tests/test_findings_ln.py)
RUNS_READ = [c for c in CLAIMS if c not in ("F13", "F18")]
# controls alone: batch statistics read the batch (F1, F8); LN's definition; causal attention
CHECKS_ONLY = ("F1", "F8", "F13", "F16")


def measured(root: Path, change=lambda kind, key, values: values, claims=None, **kw) -> dict:
    """The claims (default: every claim that reads runs) measured on a synthetic reference."""
    ref = build(root, change, **kw)
    return {c: CLAIMS[c](ref) for c in (claims or RUNS_READ)}


def verdicts(found: dict) -> dict:
    return {c: f.verdict for c, f in found.items()}


def test_every_claim_shows_on_the_healthy_set(healthy):
    assert set(healthy) == {"S", *(f"F{i}" for i in range(1, 20))}
    expected = {c: "checks only" if c in CHECKS_ONLY else "yes" for c in healthy}
    assert verdicts(healthy) == expected, {c: (f.parts, f.missing) for c, f in healthy.items()
                                           if f.verdict != expected[c]}
    assert all(not p.control for p in healthy["S"].parts)
    printed = [(c, line) for c, f in healthy.items() if c not in ("F13", "F18")
               for line in f.lines]  # F13 and F18 show the NaN of LN at ε = 0 on purpose
    assert not [(c, line) for c, line in printed if "nan" in line.lower()]  # a missing number
    assert "pad fraction of the training stream: bucketed 6.0%, pad_to_max 12.0%, small_batch " \
           "8.0%" in healthy["F9"].lines
    assert [p.control for p in healthy["F2"].parts] == [True, False, False]


# claim -> (change, expected verdict): one group's numbers across one evidence part's threshold
FLIPS = {
    "S": (changing("best", lambda k: k[0] == LN, loss=2.5 - F.HEALTHY_BELOW_BIGRAM + 0.01), "no"),
    "F2": (changing("best", lambda k: k[0][0] == "masked_batch", train_mode=2.3 - F.GAP_MIN / 2),
           "partly"),
    "F3": (changing("best", lambda k: k[0][0] == "batch", precise=2.3 + F.LOSS_MARGIN / 2),
           "partly"),
    "F4": (changing("best", lambda k: k[0] == ("layer", "false", "pre", 50),
                    rank1=(0.9 - F.COLLAPSE_MARGIN / 2, 0.8)), "partly"),
    "F5": (changing("best", lambda k: k[0][0] == "none", growth=F.GROWTH_FACTOR * 0.9), "partly"),
    "F6": (changing("init", lambda k: k[0] == "post", ratio=F.PROFILE_GROWTH * 0.9), "partly"),
    "F7": (changing("bs", lambda k: k[0] == "batch",
                    train={b: 2.3 + F.SMALL_BATCH_GAP / 2 / b for b in (1, 2, 4, 8, 16, 64)}), "no"),
    "F9": (changing("pad_to_max", lambda k: k[0] == "batch", precise=2.3 + F.LOSS_MARGIN / 2),
           "partly"),
    "F10": (changing("affine", lambda seed: True, loss=2.1 + F.LOSS_MARGIN / 2), "partly"),
    "F11": (changing("depth", lambda k: k[0] == ("none", "true", "pre") and k[1] == 12,
                     loss=2.0 + F.LOSS_MARGIN / 2 + 0.05), "partly"),
    "F12": (changing("stream", lambda k: k[:2] == ("true", "true"),
                     acc={b: F.IDENTITY_HIGH - 0.01 for b in range(-1, 6)}), "partly"),
    "F14": (changing("dyt_recipe", lambda k: k[0] == 0.2, saturation=F.SATURATED_MIN + 0.1),
            "partly"),
    "F15": (changing("decode", lambda k: k[0] == "batch", served=2.1 + F.LOSS_MARGIN / 2),
            "partly"),
    "F17": (changing("ln_backward", lambda seed: True, short=2 * F.FORMULA_TOL), "no"),
    "F19": (changing("stream", lambda k: k[:2] == ("true", "true"),
                     r2=0.3 + F.SCALE_PROBE_MARGIN / 2, r2_xhat=0.3 + F.SCALE_PROBE_MARGIN / 2),
            "no"),
}


# claims that read the same comparison: F3's pad-to-max part is F9's
COUPLED = {"F9": {"F3"}}


@pytest.mark.parametrize("claim", sorted(FLIPS))
def test_each_verdict_flips_when_its_number_crosses_the_threshold(claim, healthy, base, tmp_path):
    change, expected = FLIPS[claim]
    got = measured(tmp_path / "reference", change, base=base)
    assert got[claim].verdict == expected, got[claim].parts
    others = {c for c in got if c != claim and c not in COUPLED.get(claim, ())}
    assert {c: got[c].verdict for c in others} == {c: healthy[c].verdict for c in others}


# (claim, evidence part index) -> change that fails that part alone; every evidence part of every
# claim is here (checked below), so no part can be a constant
PART_FLIPS = {
    ("S", 0): FLIPS["S"][0],
    ("F2", 0): changing("best", lambda k: k[0][0] == "batch", train_mode=2.5 - F.GAP_MIN / 2),
    ("F2", 1): FLIPS["F2"][0],
    ("F3", 0): FLIPS["F3"][0],
    ("F3", 1): FLIPS["F9"][0],  # F3 asks F9's pad-to-max comparison too (pre-registration 2)
    ("F4", 0): FLIPS["F4"][0],
    ("F4", 1): changing("best", lambda k: k[0] == ("layer", "false", "pre", 50),
                        loss=2.1 + F.LOSS_MARGIN / 2),
    ("F5", 0): FLIPS["F5"][0],
    ("F5", 1): changing("lr", lambda k: k[0] == ("none", "true", "pre", 50) and k[1] > 3e-3,
                        loss=2.4),
    # as good without warm-up (on one seed at every rate, the rates it trains at are no evidence)
    ("F6", 0): changing("best", lambda k: k[0] == ("layer", "true", "post", 0), loss=2.3),
    ("F6", 1): changing("best", lambda k: k[0] == ("layer", "true", "pre", 0), loss=2.3),
    ("F6", 2): FLIPS["F6"][0],
    ("F7", 0): FLIPS["F7"][0],
    ("F9", 0): changing("padding", lambda k: k[:2] == ("batch", "pad_to_max"),
                        shift=F.POLLUTION_MIN * 0.9),
    ("F9", 1): FLIPS["F9"][0],
    ("F9", 2): changing("small_batch", lambda k: k[0] == "masked_batch", precise=2.6 - F.LOSS_MARGIN / 2),
    ("F10", 0): FLIPS["F10"][0],
    ("F10", 1): changing("stream", lambda k: k[:2] == ("true", "true"),
                         cv={b: F.AFFINE_SPREAD_MIN * 0.9 for b in range(6)}),
    ("F11", 0): changing("depth", lambda k: k[0] == ("layer", "true", "pre") and k[1] == 12,
                         loss=2.3 + F.NULL_MARGIN + 0.01),
    ("F11", 1): changing("depth", lambda k: k[0] == ("layer", "true", "post") and k[1] == 12,
                         loss=2.0 + 0.05 + F.LOSS_MARGIN - 0.01),
    ("F11", 2): FLIPS["F11"][0],
    ("F11", 4): combine(  # its gap grows (from -0.1 to +0.03), yet it is not beaten by the margin
        changing("depth", lambda k: k[0] == ("none", "true", "pre") and k[1] == 2, loss=2.2),
        changing("depth", lambda k: k[0] == ("none", "true", "pre") and k[1] == 12, loss=2.03)),
    ("F11", 3): changing("depth", lambda k: k[0] == ("layer", "false", "pre") and k[1] == 12,
                         loss=2.0 + 0.2 + F.LOSS_MARGIN - 0.01),
    ("F12", 0): FLIPS["F12"][0],
    ("F12", 1): changing("stream", lambda k: k[:2] == ("true", "false"),
                         acc={b: 0.98 - F.IDENTITY_DROP / 2 for b in range(-1, 6)}),
    # every α₀ above bigram (the chosen one, 0.5, yet not worse than a Pre-LN that is no
    # better); α₀ 1.0 stays at the plateau, saturated, so the saturation part still shows
    ("F14", 0): combine(changing("dyt_recipe", lambda k: k[0] == 0.5, loss=2.56),
                        changing("dyt_recipe", lambda k: k[0] == 0.2, loss=2.6),
                        changing("best", lambda k: k[0] == LN, loss=2.58)),
    ("F14", 1): combine(changing("dyt_recipe", lambda k: k[0] == 0.5, loss=2.1 + 2 * F.NULL_MARGIN),
                        changing("dyt_recipe", lambda k: k[0] == 0.2, loss=2.25)),
    ("F14", 2): FLIPS["F14"][0],
    ("F15", 0): FLIPS["F15"][0],
    ("F15", 1): changing("decode", lambda k: k[0] == "masked_batch",
                         served=2.1 + F.LOSS_MARGIN / 2),
    ("F17", 0): FLIPS["F17"][0],
    ("F19", 0): FLIPS["F19"][0],
}


def test_every_evidence_part_has_a_flip(healthy):
    parts = {(c, i) for c, f in healthy.items() if c in RUNS_READ for i, p in enumerate(
        [p for p in f.parts if not p.control])}
    assert parts == set(PART_FLIPS)


@pytest.mark.parametrize("case", sorted(PART_FLIPS), ids=lambda c: f"{c[0]}-{c[1]}")
def test_each_evidence_part_fails_alone(case, healthy, base, tmp_path):
    claim, index = case
    got = measured(tmp_path / "reference", PART_FLIPS[case], [claim], base=base)[claim]
    shown = [p.shown for p in got.parts if not p.control]
    assert shown == [i != index for i in range(len(shown))], got.lines
    assert got.verdict == ("no" if len(shown) == 1 else "partly")


# claim -> change under which a precondition fails: the claim must read "inconclusive"
INCONCLUSIVE = {
    # no norm + residual trains at no rate: its LR sensitivity says nothing about fragility
    "F5": changing("lr", lambda k: k[0] == ("none", "true", "pre", 50), loss=PLATEAU),
    # Post-LN trains at no rate even with warm-up: "needs warm-up" cannot be judged
    "F6": changing("lr", lambda k: k[0] == POST, loss=PLATEAU),
    # Post-LN at the plateau at 2 and 12 blocks: "its gap grows" cannot be judged
    "F11": changing("depth", lambda k: k[0] == ("layer", "true", "post"), loss=PLATEAU),
    # both BNs at the plateau: nothing learned to compare
    "F3": changing("best", lambda k: k[0][0] in ("batch", "masked_batch"), precise=PLATEAU),
    # a failed control: a per-token norm that depends on its batch is a bug, not a finding
    "F1": changing("best", lambda k: k[0][0] == "rms", invariance=2 * F.INVARIANT_MAX),
    "F10": changing("stream", lambda k: k[:2] == ("false", "true"),
                    cv={b: 2 * F.FLAT_SPREAD_MAX for b in range(6)}),
    # LN and both BNs served at the plateau: the BN parts cannot be judged
    "F15": changing("decode", lambda k: k[0] in ("layer", "batch", "masked_batch"), served=PLATEAU),
}

# (claim, what) -> change that fails one control of an inference claim: "inconclusive"
CONTROL_FAILS = {
    ("F15", "a request moves in the batch"): changing("decode", lambda k: k == ("dyt", 2),
                                                      stream=2 * F.INVARIANT_MAX),
    ("F15", "BN with batch statistics learns"): changing(
        "decode", lambda k: k[0] == "masked_batch", batch_stats=PLATEAU - 2 * F.PLATEAU_MARGIN),
    ("F16", "a position moves as the sequence grows"): changing(
        "decode", lambda k: k[0] == "none", grow=2 * F.INVARIANT_MAX),
    ("F16", "BN in training mode does not"): changing("decode", lambda k: k == ("batch", 0),
                                                       grow_train=F.DEPENDENT_MIN / 2),
    ("F17", "the full formula misses"): changing("ln_backward", lambda seed: seed == 2,
                                                 full=2 * F.FORMULA_TOL),
    ("F19", "x̂ reads differently"): changing("stream", lambda k: k == ("true", "true", 1),
                                             r2_xhat=0.6 - 2 * F.PROBE_SAME_TOL),
}


@pytest.mark.parametrize("case", sorted(CONTROL_FAILS), ids=lambda c: f"{c[0]}-{c[1]}")
def test_a_failed_inference_control_reads_inconclusive(case, healthy, base, tmp_path):
    claim = case[0]
    got = measured(tmp_path / "reference", CONTROL_FAILS[case], [claim], base=base)[claim]
    assert got.verdict == "inconclusive", got.parts
    assert sum(p.control and not p.shown for p in got.parts) == 1
    assert [p.shown for p in got.parts if not p.control] == \
        [p.shown for p in healthy[claim].parts if not p.control]


@pytest.mark.parametrize("claim", sorted(INCONCLUSIVE))
def test_a_failed_precondition_or_control_reads_inconclusive(claim, base, tmp_path):
    got = measured(tmp_path / "reference", INCONCLUSIVE[claim], [claim], base=base)
    assert got[claim].verdict == "inconclusive", got[claim].parts
    assert any(p.shown is None for p in got[claim].parts) or any(
        p.control and not p.shown for p in got[claim].parts)


def test_f14_reads_the_saturation_peak_over_the_run_not_its_final_value(base, tmp_path):
    """α₀ 0.2 trains and its most saturated DyT peaks mid-run at 0.4 but ends at 0.2 (< the
    threshold): the part reads the peak, so "unsaturated where it trains" is refuted."""
    change = changing("dyt_recipe", lambda k: k[0] == 0.2, saturation=0.4)
    got = measured(tmp_path / "reference", change, ["F14"], base=base)["F14"]
    assert [p.mark for p in got.parts] == ["✓", "✓", "✗"] and got.verdict == "partly"


def test_dyt_that_never_trains_is_judged_on_the_alphas_that_stall(base, tmp_path):
    """Pre-registration 3: the saturation part reads whichever α₀ train or stall; every α₀ at
    the plateau, 0.2 and 0.5 unsaturated, refutes it."""
    change = changing("dyt_recipe", lambda k: True, loss=PLATEAU)
    got = measured(tmp_path / "reference", change, ["F14"], base=base)["F14"]
    assert [p.mark for p in got.parts] == ["✗", "✗", "✗"] and got.verdict == "no"


def test_f14s_saturation_part_needs_an_alpha_that_trains_or_stalls():
    from trainer.findings.stream import _saturation

    shown, why = _saturation({}, {})
    assert shown is None and "no α₀ trains" in why
    assert _saturation({}, {1.0: {0: 0.9, 1: 0.95, 2: 0.92}})[0].outcome == "shown"
    assert _saturation({0.5: {0: 0.9, 1: 0.95, 2: 0.92}}, {})[0].outcome == "refuted"


def test_f14_judges_the_alpha_with_the_lowest_mean_validation_loss(base, tmp_path):
    """Pre-registration 3's rule: α₀ 0.2 has the lowest mean validation loss over the 3 seeds
    of ``dyt_recipe`` and is worse on test than Pre-LN by more than the margin: part (b) reads
    α₀ 0.2 and is refuted, though α₀ 0.5 still matches."""
    change = changing("dyt_recipe", lambda k: k[0] == 0.2, loss=2.05)
    got = measured(tmp_path / "a" / "reference", change, ["F14"], base=base)["F14"]
    assert "α₀ = 0.2" in got.parts[1].text and got.parts[1].shown is True
    change = combine(change, changing("best", lambda k: k[0] == LN, loss=1.9))
    got = measured(tmp_path / "b" / "reference", change, ["F14"], base=base)["F14"]
    assert "α₀ = 0.2" in got.parts[1].text and got.parts[1].shown is False


def test_one_lucky_seed_does_not_choose_f14s_alpha(base, tmp_path):
    """α₀ 0.2 wins on seed 0 (in ``dyt_recipe_lr``, pre-registration 2's rule, and in
    ``dyt_recipe``) but loses on the mean of the 3 seeds: α₀ 0.5 is judged."""
    change = combine(changing("dyt_recipe_lr", lambda k: k[0] == 0.2, loss=2.0),
                     changing("dyt_recipe", lambda k: k == (0.2, 0), loss=1.9),
                     changing("dyt_recipe", lambda k: k[0] == 0.2 and k[1] > 0, loss=2.4))
    got = measured(tmp_path / "reference", change, ["F14"], base=base)["F14"]
    assert "α₀ = 0.5" in got.parts[1].text
    assert any("chose 0.2" in x for x in got.lines)


def test_pre_ln_needing_warm_up_fails_its_part(base, tmp_path):
    change = changing("best", lambda k: k[0] == ("layer", "true", "pre", 0), loss=2.1 + 0.2)
    got = measured(tmp_path / "reference", change, ["F6"], base=base)["F6"]
    assert [p.shown for p in got.parts] == [True, False, True] and got.verdict == "partly"


def test_post_ln_trainable_at_fewer_rates_on_one_seed_is_not_evidence(base, tmp_path):
    """Post-LN without warm-up as good at its best rate, trainable at fewer rates of seed 0's grid
    only: a one-seed count is not evidence (pre-registration 3), so "needs warm-up" is refuted on
    the loss alone, and the page says why the rates were not read. (Where every seed ran every
    rate, fewer rates is enough: tests/test_fixes.py.)"""
    got = measured(tmp_path / "reference", PART_FLIPS[("F6", 0)], ["F6"], base=base)["F6"]
    assert got.verdict == "partly" and got.parts[0].shown is False
    assert "post-LN: one seed ran every rate, so whether it trains at fewer rates is not evidence " \
           "(pre-registration 3)" in got.lines


def test_f6_compares_each_arm_at_its_best_of_the_rates_both_ran(base, tmp_path):
    """Post-LN with warm-up never ran 3e-4, where Post-LN without it is best and its seeds ran: on
    the shared rates its best is elsewhere, where no seed ran, so "needs warm-up" cannot be judged
    (before the fix it read those seeds and showed). Pre-LN's part is untouched."""
    root = tmp_path / "reference"
    build(root, base=base)
    shutil.rmtree(root / "lr" / f"norm=layer,residual=true,placement=post,warmup_steps=50,"
                                f"lr={RATE_GRID[0]}")
    got = CLAIMS["F6"](Reference(root))
    assert [p.mark for p in got.parts] == ["?", "✓", "✓"]
    assert "its best of the shared rates is 0.001: its seeds there are not run yet" in got.parts[0].why


def test_pre_ln_beating_no_norm_at_depth_is_asked(base, tmp_path):
    """The texts' ordering: no norm + residual better than Pre-LN at 12 blocks fails F11."""
    change = changing("depth", lambda k: k[0] == ("none", "true", "pre") and k[1] == 12,
                      loss=DEPTH[("layer", "true", "pre")][12] - 0.1)
    f11 = measured(tmp_path / "reference", change, ["F11"], base=base)["F11"]
    assert f11.parts[-1].shown is False and f11.verdict in ("partly", "no")


def test_one_seed_that_disagrees_leaves_a_comparison_underpowered_not_refuted(base, tmp_path):
    """Four seeds show masked BN better by 0.2, one shows it worse: the paired interval straddles
    the margin, so F3's bucketed part reads underpowered (~), and a claim whose only non-✓ parts
    are underpowered reads "inconclusive (underpowered)", never "no"."""
    change = changing("best", lambda k: k == (("masked_batch", "true", "pre", 50), 4), precise=2.6)
    got = measured(tmp_path / "reference", change, ["F3"], base=base)["F3"]
    assert [p.mark for p in got.parts] == ["~", "✓"]
    assert got.verdict == "inconclusive (underpowered)"
    one = changing("ln_backward", lambda seed: seed == 1, short=2 * F.FORMULA_TOL)
    f17 = measured(tmp_path / "b", one, ["F17"], base=base)["F17"]
    assert f17.parts[0].underpowered and f17.verdict == "inconclusive (underpowered)"


def test_headline_claims_need_five_seeds(tmp_path):
    got = measured(tmp_path / "reference", seeds=range(3))
    for claim in ("S", "F3", "F4", "F5", "F6", "F11"):
        assert got[claim].verdict == "not run", claim
        assert any("needs 5" in m for m in got[claim].missing), got[claim].missing
    assert got["F2"].verdict == "yes"  # 3 seeds are enough where no headline variant is read


def test_missing_sub_sweeps_read_not_run(tmp_path):
    root = tmp_path / "reference"
    build(root, skip=("depth", "dyt", "dyt_recipe", "small", "analyses"))
    got = verdicts({c: CLAIMS[c](Reference(root)) for c in RUNS_READ})
    for claim in ("F2", "F6", "F7", "F8", "F9", "F10", "F11", "F12", "F14", "F15", "F16", "F17",
                  "F19"):
        assert got[claim] == "not run", claim
    shutil.rmtree(root / "lr")
    assert CLAIMS["F5"](Reference(root)).verdict == "not run"


def test_the_page_shows_every_claim_its_setting_parts_and_the_rate_table(base):
    ref = Reference(base)
    found = P.measure(ref)
    text = P.render_page(ref, found)
    for claim in found:
        assert f"## {claim.id}" in text and claim.falsifier in text
    assert "(control)" in text and "(evidence)" in text
    assert "`best`: `norm=layer,residual=true,placement=pre,warmup_steps=50` lr 0.003 (5 seeds)" in text
    assert "## Learning rates" in text and text.count("\n| norm=") >= len(LR_TABLE)
    assert "Verdict: checks only" in text  # F13


def test_an_analysis_claims_setting_names_the_runs_its_csv_was_made_from(base, tmp_path):
    """F12 reads only analysis/stream.csv: its setting line names the runs on the command line
    of the CSV's stamp (a reproduced checkpoint under runs/ckpt/ as the run it reproduces),
    with their rates and seed counts, and nothing else; without a stamp it names the CSV only."""
    import json

    root = tmp_path / "reference"
    shutil.copytree(base, root)
    ln, nores = (f"norm=layer,residual={r},placement=pre,warmup_steps=50"
                 for r in ("true", "false"))
    assert CLAIMS["F12"](Reference(root)).used == {}
    best = "results/reference/best"
    command = ["analyze", "stream", f"{best}/{ln}", f"{best}/{ln},seed=1",
               f"runs/ckpt/best/{nores},seed=2", f"{best}/no-such-run", "--out", "x"]
    (root / "analysis" / "stream.meta.json").write_text(json.dumps({"command": command}))
    finding = CLAIMS["F12"](Reference(root))
    assert sorted(r.name for r in finding.used["best"]) == [
        f"best/{nores},seed=2", f"best/{ln}", f"best/{ln},seed=1"]
    setting = P.section_setting(finding)
    assert f"`{ln}` lr " in setting and " (2 seeds)" in setting and " (1 seed)" in setting
    assert setting.endswith("— `analysis/stream.csv`.") and "norm=batch" not in setting


def test_committed_findings_are_generated_from_the_committed_runs(monkeypatch):
    """results/README.md is exactly what the findings command computes from results/reference,
    and measuring every claim reads each event directory at most once."""
    from collections import Counter

    from trainer.results import run as run_module

    reads, real = Counter(), run_module.read_scalars
    monkeypatch.setattr(run_module, "read_scalars", lambda d: reads.update([str(d)]) or real(d))
    root = Path(__file__).resolve().parents[1] / "results"
    text, found = P.compose(Reference(root / "reference"))
    assert text == (root / "README.md").read_text()
    assert max(reads.values(), default=1) == 1
    # every verdict that differs from the archived page says why, and no reason is stale
    assert history.changed(found, history.archived_verdicts(root)) == set(history.WHY)


def test_a_section_says_how_its_verdict_changed_from_the_archived_page(base, tmp_path):
    """With an archived page beside the reference, each judged section names the archived
    verdict: unchanged, changed (with the recorded reason, or a line saying none was recorded),
    or a claim the archive did not have; without an archive no section mentions one."""
    ref = Reference(base)
    found = P.measure(ref)
    now = {f.id: f.verdict for f in found}
    assert "archived page" not in P.render_page(ref, found)
    root = tmp_path / "results"
    shutil.copytree(base, root / "reference")
    same, other = "F1", "F4"
    flipped = "no" if now[other] != "no" else "yes"
    (root / history.ARCHIVE).mkdir(parents=True)
    (root / history.ARCHIVE / "README.md").write_text(
        f"# old\n\n## {same}\n\nVerdict: {P.VERDICTS[now[same]]}. Falsified by: x.\n\n"
        f"## {other}\n\n- ✓ a part\n\nVerdict: {P.VERDICTS[flipped]}. Falsified by: y.\n")
    assert history.archived_verdicts(root) == {same: now[same], other: flipped}
    text = P.render_page(Reference(root / "reference"), found)
    section = {s.split("\n", 1)[0]: s for s in text.split("\n## ")[1:]}
    assert f"): {P.VERDICTS[now[same]]}, unchanged." in section[same]
    assert (f"Changed from {P.VERDICTS[flipped]} on the archived page" in section[other]
            and "no reason recorded in trainer/findings/history.py" in section[other])
    assert "Not on the archived page" in section["F2"]


def test_a_diverged_run_counts_as_infinitely_bad(base, tmp_path):
    change = changing("best", lambda k: k[0] == ("layer", "false", "pre", 50), loss=math.inf,
                      train_mode=None)
    assert measured(tmp_path / "reference", change, ["F4"], base=base)["F4"].verdict == "yes"


def test_inference_claims_without_their_analyses_read_not_run(base, tmp_path):
    """decode.csv / ln_backward.csv absent, or a stream.csv made before F19's probe: not run."""
    import csv

    root = tmp_path / "reference"
    build(root, base=base)
    (root / "analysis" / "decode.csv").unlink()
    (root / "analysis" / "ln_backward.csv").unlink()
    path = root / "analysis" / "stream.csv"
    with open(path, newline="") as fh:
        rows = [{k: v for k, v in r.items() if not k.startswith("scale_probe")}
                for r in csv.DictReader(fh)]
    path.unlink()
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    ref = Reference(root)
    got = {c: CLAIMS[c](ref) for c in ("F15", "F16", "F17", "F19", "F12")}
    assert {c: f.verdict for c, f in got.items()} == {
        "F15": "not run", "F16": "not run", "F17": "not run", "F19": "not run", "F12": "yes"}
    assert "analysis/decode.csv" in got["F15"].missing
    assert any("scale_probe_r2" in m for m in got["F19"].missing)


def test_provenance_names_each_commit_and_marks_a_modified_tree(base, tmp_path):
    """Provenance lists each sub-sweep's commits and each analysis output a claim read with the
    commit in its NAME.meta.json ("unknown" without one); "(dirty)" survives the shortening."""
    import json

    root = tmp_path / "reference"
    shutil.copytree(base, root)
    dirty_run = next((root / "best").glob("*/meta.json"))
    dirty_run.write_text(json.dumps({"git_sha": "a" * 40, "git_dirty": True}))
    (root / "analysis" / "batch_size.meta.json").write_text(
        json.dumps({"git_sha": "b" * 40, "git_dirty": False, "command": ["analyze"]}))
    (root / "analysis" / "padding.meta.json").write_text(
        json.dumps({"git_sha": "c" * 40, "git_dirty": True, "command": ["analyze"]}))
    ref = Reference(root)
    text = P.render_page(ref, P.measure(ref))
    provenance = text[text.index("## Provenance"):]
    best = next(line for line in provenance.splitlines() if line.startswith("| `best` |"))
    assert f"`{'a' * 12}` (dirty)" in best and f"`{'0' * 12}`" in best
    assert f"| `analysis/batch_size.csv` | `{'b' * 12}` |" in provenance
    assert f"| `analysis/padding.csv` | `{'c' * 12}` (dirty) |" in provenance
    assert "| `analysis/composition.csv` | `unknown` |" in provenance
    assert "| `init/grad_profile.csv` | `unknown` |" in provenance


def test_f6_shows_what_worse_without_warm_up_compares_seed_by_seed(healthy):
    """F6's lines give, per placement, each seed's test loss without warm-up minus with it: the
    differences of the two per-seed loss lines above them."""
    def per_seed(prefix):
        found = next(x for x in healthy["F6"].lines if x.startswith(prefix))
        return [float(v) for v in found.split("per seed: ")[1].rstrip(")").split(" / ")]

    for p in ("pre", "post"):
        cold = per_seed(f"{p}-LN, warm-up 0, test loss")
        warm = per_seed(f"{p}-LN, warm-up 50, test loss")
        diff = per_seed(f"{p}-LN, test loss without warm-up minus with it")
        assert len(diff) == len(cold) == F.HEADLINE_SEEDS
        assert diff == pytest.approx([c - w for c, w in zip(cold, warm)], abs=2e-3)
