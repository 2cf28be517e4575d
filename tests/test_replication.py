"""The replication settings on the page (trainer/findings/replication.py): a setting is judged by
the same claim functions on its own runs, with only the parts its design has; the summary's
groups follow the pre-registered rule for every combination of verdicts."""

from __future__ import annotations

import itertools
import shutil

import pytest

from tests.reference_fixture import build, changing
from trainer.findings import page as P
from trainer.findings import replication as R
from trainer.findings.claim import VERDICTS
from trainer.findings.reference import Reference
from trainer.findings.thresholds import REPLICATED, REPLICATION_SEEDS


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A synthetic reference and, beside it, a python setting with the reference's runs but
    without the sub-sweeps only the reference has (depth, DyT's α grid, pad-to-max, ...)."""
    root = tmp_path_factory.mktemp("results")
    build(root / "reference")
    build(root / R.ROOT / "python", skip=("depth", "dyt", "dyt_recipe", "small"))
    return root


def test_a_setting_is_judged_by_the_same_claims_on_its_own_runs(results):
    ref = Reference(results / "reference")
    refs = R.settings(ref)
    assert list(refs) == ["reference", *REPLICATION_SEEDS] and refs["reference"] is ref
    assert refs["python"].setting == "python" and not refs["long"].runs
    findings = P.measure(ref)
    judged = R.judge(refs, findings, P.all_claims())
    assert set(judged["S"]) == {"reference", *REPLICATION_SEEDS}
    assert "python" not in judged["F9"]  # not replicated: not judged there
    py = {cid: judged[cid]["python"] for cid in REPLICATED}
    assert {c: f.verdict for c, f in py.items() if c != "F14"} == dict.fromkeys(
        ("S", "F3", "F4", "F5", "F6"), "yes")
    assert len(py["F3"].parts) == 1 < len(judged["F3"]["reference"].parts)  # no pad-to-max here
    assert py["F14"].verdict == "not run"  # its DyT recipe runs are missing in this setting
    assert judged["S"]["long"].verdict == "not run"
    lines = R.table(judged, list(refs))
    f9 = next(x for x in lines if x.startswith("| [F9]"))
    assert f9.count(R.NOT_IN_DESIGN) == len(REPLICATION_SEEDS)
    s = next(x for x in lines if x.startswith("| [S]"))
    assert s.split(" | ")[1:3] == ["yes (✓)", "yes (✓)"]


def test_the_lowest_test_loss_is_named_only_once_every_headline_variant_is_in(tmp_path):
    """A setting whose ``best`` is in for some variants only names no lowest variant."""
    build(tmp_path)
    ref = Reference(tmp_path)
    rows = R.loss_rows(ref)
    assert all(r["interval"] for r in rows)
    name, mean = R.lowest(ref)
    assert mean == min(r["interval"].mean for r in rows) and name in {r["name"] for r in rows}
    gone = R.variant_runs(ref, R.HEADLINE_VARIANTS[name])
    assert gone
    for run in gone:
        shutil.rmtree(run.path)
    assert R.lowest(Reference(tmp_path)) is None


def test_the_page_opens_with_what_we_found_and_the_replication_table(results):
    text, _ = P.compose(Reference(results / "reference"))
    heads = [x for x in text.splitlines() if x.startswith("## ")]
    assert heads[:3] == ["## What we found", "## Replication: each claim in each setting",
                         "## The reference setting"]
    summary = text.split("## What we found")[1].split("## Replication")[0].strip().splitlines()
    assert len(summary) <= 12
    assert "## Recipes: each method against its source" in text


@pytest.mark.parametrize("verdicts", list(itertools.product(
    ["yes", "no", "partly", "inconclusive (underpowered)", "inconclusive", "checks only",
     "not run"], repeat=2)))
def test_summary_group_follows_the_pre_registered_rule(verdicts):
    group = R.summary_group(list(verdicts))
    judged = [v for v in verdicts if v != "not run"]
    assert group in R.GROUPS and all(v in VERDICTS for v in verdicts)
    if not judged:
        assert group == "undecided"
    elif all(v == "checks only" for v in judged):
        assert group == "checks only"
    elif all(v == "yes" for v in judged):
        assert group == "holds everywhere"
    elif len(set(judged)) > 1:
        assert group == "depends on the setting"
    elif judged[0] in ("no", "partly"):
        assert group == "does not hold"
    else:
        assert group == "undecided"


def test_a_claims_section_says_when_its_verdict_changes_across_settings(tmp_path):
    """Python's no-norm stream grows no faster than LN's: F5's section says its verdict changes,
    with python's part and statistic; S reads yes in both and says so; F9, judged only in the
    reference, has no such block."""
    build(tmp_path / "reference")
    build(tmp_path / R.ROOT / "python", changing("best", lambda k: k[0][0] == "none", growth=1.0),
          skip=("depth", "dyt", "dyt_recipe", "small"))
    text, _ = P.compose(Reference(tmp_path / "reference"))
    section = {s.split("\n", 1)[0]: s for s in text.split("\n## ")}
    f5 = section["F5"]
    assert "**Its verdict changes across settings.**" in f5
    python = next(x for x in f5.splitlines() if x.startswith("- python ("))
    assert "**partly**" in python and "✗ stream grows without a norm: paired ratio" in python
    assert "The same verdict in every setting judged so far." in section["S"]
    assert "In the other settings" not in section["F9"]
