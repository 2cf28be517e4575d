"""Each claim's verdict on the archived page, and why it changed.

The first reference (every variant at lr 6e-3, verdicts on the validation split, controls counted
as evidence) is archived with its page under ``results/ARCHIVE``. A section whose verdict
differs from the archived one says from what to what, and why (``WHY``, written by hand when the
new verdict came in); a claim the archived page did not have says so. Only the archived page's verdict lines are
read: none of its numbers enters a verdict here.
"""

from __future__ import annotations

import re
from pathlib import Path

from trainer.findings.claim import VERDICTS

ARCHIVE = Path("archive") / "reference-2026-11-lr6e-3"  # under results/, beside the reference
ARCHIVE_SETTING = "every variant at lr 6e-3, validation split"

# Claim id -> why its verdict differs from the archived one. tests/test_findings.py checks that
# the keys are exactly the claims whose committed verdict differs.
WHY = {
    "F2": """LN's zero gap counted as evidence there; LN is one function in both modes, so that
        part holds by construction and is a control here. The measured part, a BN gap that
        population statistics do not remove, shows for neither naive nor masked BN""",
    "F6": """at lr 6e-3 Post-LN sat at the plateau with and without warm-up, so "needs
        warm-up" could not be told from "does not train". At its own rates Post-LN trains, and
        without warm-up it is neither worse by the margin nor trainable at fewer rates; the init
        gradient profile does not show either. The one ✓ is Pre-LN's part: a difference not
        shown, not an equivalence shown""",
    "F7": """LN flat over the batch size counted as evidence there; it holds by construction (as
        BN's flatness with running statistics does), so both are controls here. The one measured
        part, BN worse at B = 1 in training mode by the margin, does not show, there as here""",
    "F8": """BN's composition |Δ logits| was far above the threshold on every seed there too;
        the part failed only because a linear t-interval of three heavy-tailed maxima reached
        below zero. Maxima are judged on their logarithms now (pre-registered), and LN's and
        RMSNorm's invariance is a control""",
    "F10": """"every token has norm √C without γ/β" counted as evidence there; it is LN's
        definition, a control here. Both measured parts (worse loss without γ/β, γ/β spreading
        the output norms) do not show, there as here""",
    "F13": """every part evaluates LN's definition on constructed inputs, so each is a control,
        and controls never count: the claim can read checks only, never yes""",
    "F14": """its ✓ part ("saturated at the plateau, unsaturated where it trains") was true there
        over an empty set: no α trained at lr 6e-3. Here each α ran at its best of three rates
        and still none ends below bigram, the pre-registered inconclusive condition""",
}

_VERDICT = re.compile(r"^Verdict: (.+?)\. Falsified by", re.M)  # as page.render_page writes it
_FROM_TEXT = {text: key for key, text in VERDICTS.items()}


def archived_verdicts(results: Path) -> dict[str, str]:
    """Claim id -> the verdict its section states on the archived page under ``results`` ({}
    when there is none: then no section mentions it)."""
    page = results / ARCHIVE / "README.md"
    if not page.is_file():
        return {}
    out = {}
    for section in re.split(r"^## ", page.read_text(encoding="utf-8"), flags=re.M)[1:]:
        cid, _, body = section.partition("\n")
        found = _VERDICT.search(body)
        verdict = _FROM_TEXT.get(found.group(1)) if found else None
        if verdict:
            out[cid.strip()] = verdict
    return out


def changed(findings, archived: dict[str, str]) -> set[str]:
    """The claims (both pages have them, the new one judged) whose verdict differs."""
    return {f.id for f in findings
            if f.id in archived and f.verdict != "not run" and f.verdict != archived[f.id]}


def note(f, archived: dict[str, str]) -> str:
    """The section's line on the archived verdict ("" while the claim is not run, or without an
    archived page)."""
    if f.verdict == "not run" or not archived:
        return ""
    if f.id not in archived:
        return "Not on the archived page: a claim of this reference."
    was = VERDICTS[archived[f.id]]
    if not changed([f], archived):
        return f"Archived page ({ARCHIVE_SETTING}): {was}, unchanged."
    why = " ".join(WHY.get(f.id, "no reason recorded in trainer/findings/history.py").split())
    return f"Changed from {was} on the archived page ({ARCHIVE_SETTING}) to " \
           f"{VERDICTS[f.verdict]}: {why}."
