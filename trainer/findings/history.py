"""Each claim's verdict on the archived page, and why it changed.

The reference's runs were first judged by pre-registration 1's rule (every seed and separate
intervals; a part either showed or did not); that page is archived under ``ARCHIVE`` (its
own sections say how they changed from the first reference at lr 6e-3, archived beside it).
A section whose verdict differs from the archived one says from what to what, and why (``WHY``,
written by hand when the new verdict came in); a claim the archived page did not have says so.
Only the archived page's verdict lines are read: none of its numbers enters a verdict here.
"""

from __future__ import annotations

import re
from pathlib import Path

from trainer.findings.claim import VERDICTS

ARCHIVE = Path("archive") / "reference-rule-1"  # under results/, beside the reference
ARCHIVE_SETTING = "the same runs judged by pre-registration 1's rule"

# Claim id -> why its verdict differs from the archived one. tests/test_findings.py checks that
# the keys are exactly the claims whose committed verdict differs.
WHY = {
    "F1": """its evidence, "BN depends on its batch in training mode", holds by definition
        (batch statistics read the batch), so pre-registration 2 makes it a control, as LN's
        invariance already was: the claim demonstrates, it does not test""",
    "F3": """the bucketed part still shows (paired); the new part, F9's pad-to-max comparison
        asked here too, straddles its margin at 3 seeds, and with the extra-seed rule's 10 it is
        refuted (paired +0.011, 95 % −0.004 … +0.027 against 0.05): with pads doubled, naive BN
        is not worse than masked BN by the margin. One part shown, one refuted: partly""",
    "F6": """"Pre-LN does not need warm-up" is a null: judged as one (not worse by the margin,
        one-sided), Pre-LN without warm-up is shown worse on every seed, so the part is refuted;
        the first rule marked it ✓ because a difference was not shown by non-overlap. Post-LN
        without warm-up is better, not worse: refuted as before; and at the extra-seed rule's 10
        seeds Post-LN's init gradient does not grow with depth (last/first block 0.93, 95 %
        0.71 … 1.21, against 1.5): refuted""",
    "F8": """its evidence, BN's outputs moving with the partners' lengths in training mode, holds
        by definition (batch statistics): a control now, so "checks only" """,
    "F14": """DyT now runs by its authors' recipe (a learnable embedding scalar, the stream at
        std 1 at init). The α chosen on validation (0.5) trained on two seeds of three, so at 3
        seeds "trains" and "matches Pre-LN" straddled their margins; with the extra-seed rule's
        10 it stays at the unigram plateau on 6 of them (test 2.85, 95 % 2.52 … 3.18 against
        bigram 2.54: still underpowered) and is worse than Pre-LN by 0.78 nats (paired, 95 %
        0.44 … 1.12: refuted). α 1.0 trains on every seed (2.33) but 0.26 nats behind Pre-LN.
        Without the recipe no α left the plateau (the archived page's "inconclusive")""",
    "F15": """it compares the BN model with the LN model served at batch 1 (BN's running
        statistics make the serving batch irrelevant), paired by seed. At 3 seeds both parts
        straddled the margin (naive BN +0.143, 95 % −0.040 … +0.326); with the extra-seed rule's
        10, naive BN is shown worse (+0.150, 95 % +0.116 … +0.183) and masked BN is refuted
        (+0.011, 95 % −0.018 … +0.040, against 0.05): partly""",
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
