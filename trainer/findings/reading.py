"""The independent reading's fixes (issue #56; results/PREREGISTRATION-SCALE.md, section 4), each
a before → after on the page. "Before" is what the page said at 7817b32, the last commit before
the fixes (history, written once); "after" is measured now from the findings themselves, or says
which runs it still waits for."""

from __future__ import annotations

from trainer.findings.claim import VERDICTS

BEFORE_COMMIT = "7817b32"
# fix -> what the page said before it (history: the committed page at BEFORE_COMMIT)
BEFORE = {
    "F6 on shared rates": """"Post-LN needs warm-up" in wide counted 0.00948, a rate never run
        with warm-up; "trains at fewer rates" read seed 0 alone""",
    "F14's α₀": """α₀ = 0.5, chosen by 0.026 nats on seed 0's validation; F14 read **no** (~✗?) in
        the reference, its saturation part "?" although its own falsifier was met""",
    "wide's grid": "9 of 10 variants best at a grid edge, flagged and not extended",
    "\"What we found\", README": """no norm named lowest, with no word that the order reverses,
        nor whether a "lowest" is separated from the next variant""",
    "long's F6 init part": """counted as evidence in long (F6 ✗✓~), though the analysis at init
        is byte for byte the reference's""",
}
WAITING = {"wide's grid": "the edge rule's extensions of wide's grids (the ladder's rung 128)"}


def _f6_after(judged: dict) -> str:
    """F6 per setting on the shared rates, and the arms still waiting for their seeds."""
    found = judged.get("F6", {})
    if not found:
        return "F6 not judged"
    reads = ", ".join(f"{s} {VERDICTS[f.verdict]} ({f.marks})" for s, f in found.items())
    waits = [f"{s}: {p.why}" for s, f in found.items() for p in f.parts
             if "not run yet" in p.why]
    return ("each arm at its best of the rates both ran; \"fewer rates\" per seed where every "
            "seed ran every rate (the reference's Post-LN: `scale/deep_lr`), not evidence on one "
            f"seed; F6 reads {reads}" + (f"; waiting for runs: {'; '.join(waits)}" if waits
                                         else ""))


def _after(fix: str, judged: dict) -> str:
    if fix in WAITING:
        return f"not run yet: waits for {WAITING[fix]}"
    if fix == "F6 on shared rates":
        return _f6_after(judged)
    if fix == "F14's α₀":
        f = judged.get("F14", {}).get("reference")
        chosen = next((x for x in (f.lines if f else []) if x.startswith("DyT's α₀")), "")
        verdict = f"F14 reads {VERDICTS[f.verdict]} ({f.marks})" if f else "F14 not judged"
        return f"{chosen.split(',')[0]} on the mean validation loss of seeds 0–2; {verdict}"
    if fix == "long's F6 init part":
        f = judged.get("F6", {}).get("long")
        if f is None:
            return "long not judged"
        return (f"shown once, in the reference; long's F6 reads {VERDICTS[f.verdict]} "
                f"({f.marks}) on its own runs")
    return ("each setting's lowest variant with its paired gap to the next, and every order that "
            "reverses between settings, with the numbers (\"What we found\")")


def section(judged: dict) -> list[str]:
    """The fixes table: fix | before | after."""
    lines = ["", "## The reading's fixes (pre-registration 3)", "",
             f"Each defect the independent reading found, before (the page at {BEFORE_COMMIT}) "
             "and after its fix.", "", "| fix | before | after |", "|---|---|---|"]
    for fix, before in BEFORE.items():
        lines.append(f"| {fix} | {' '.join(before.split())} | {_after(fix, judged)} |")
    return lines
