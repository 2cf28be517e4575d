"""results/README.md: the setting, the learning-rate table, one section per claim with its
setting, numbers, parts (evidence and controls), verdict, falsifier and figures, the runs that
never left the unigram plateau, and the provenance of every sub-sweep.

    python -m trainer findings results/reference     # or python -m trainer.findings.page
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainer.atomic import write_text
from trainer.findings import (batch, core, depth, dynamics, extra, history, inference,
                              collapse, fixes, instability, ln, lr, reading, recipes, replication,
                              stream)
from trainer.findings.claim import VERDICTS, Finding
from trainer.findings.ladder_page import PLOTS as LADDER_PLOTS, ladder_section
from trainer.findings.reference import EXTRA, Reference
from trainer.findings.thresholds import SETTINGS
from trainer.results import baselines as bl
from trainer.results.metrics import finite

# The pre-registration: the commit that fixed the design, the rules and every threshold before
# any run of this reference (results/PREREGISTRATION.md); every run here was made after it.
PREREGISTRATION = "results/PREREGISTRATION.md"
PREREGISTRATION_COMMIT = "6702ad59bcfa5f981ffd6642c524151399062109"
# Pre-registration 2 (issue #34): the statistics rule, DyT's recipe and the replication settings
PREREGISTRATION_2 = "results/PREREGISTRATION-REPLICATION.md"
PREREGISTRATION_2_COMMIT = "3b4fe0ea9c80d29644b5058336fa6d19c3588ce8"
# Pre-registration 3 (issues #55, #56): the instability claims, the model-size ladder
PREREGISTRATION_3 = "results/PREREGISTRATION-SCALE.md"


def all_claims() -> tuple:
    """Every claim function in page order."""
    return (core.CLAIMS + batch.CLAIMS + dynamics.CLAIMS + depth.CLAIMS + ln.CLAIMS + stream.CLAIMS
            + inference.CLAIMS)


# Pre-registration 3's claims (the reference setting's own section, after the replicated ones)
SCALE_CLAIMS = (*instability.CLAIMS, *fixes.CLAIMS, *collapse.CLAIMS)


def compose(ref: Reference) -> tuple[str, list[Finding]]:
    """The page of ``ref`` and the replication settings beside it, and the reference's
    findings."""
    findings = measure(ref)
    refs = replication.settings(ref)
    return render_page(ref, findings, (refs, replication.judge(refs, findings, all_claims()))), \
        findings


def measure(ref: Reference) -> list[Finding]:
    """Every claim measured, in page order: S, then F1, F2, … by number."""
    return sorted((extra.judged(claim, ref) for claim in all_claims()),
                  key=lambda f: -1 if f.id == "S" else int(f.id.lstrip("F")))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0] if argv else "results/reference")
    ref = Reference(root)
    from trainer.findings.figures import write_claim_figures

    write_claim_figures(ref)
    write_headline(replication.settings(ref), root.parent / HEADLINE_FIGURE)
    from trainer.findings.ladder import Ladder
    from trainer.findings.ladder_figures import write_ladder_figures

    write_ladder_figures(Ladder(ref), root.parent / LADDER_PLOTS)
    text, _ = compose(ref)
    write_text(root.parent / "README.md", text)
    print(text)
    return 0


def _extra_seeds(ref: Reference) -> str:
    """The extra-seed rule, and where this reference stands with it."""
    rule = ("A part that reads underpowered at the pre-registered seeds gets the variants it "
            "reads run up to 10 seeds, once (reference and python settings), and is judged again "
            "on all of them; decided parts keep their judgement.")
    plan = extra.read_plan(ref.root)
    if not plan:
        return rule + " No extra seeds have been run here yet."
    made = {r.name.split("/", 1)[1] for r in ref.groups.get(EXTRA, []) if r.finished}
    done = sum(name in made for name in plan["runs"])
    files = ", ".join(f"`{EXTRA}/{p.name}`" for p in extra.plan_files(ref.root))
    return (rule + f" Here: {len(plan['parts'])} part(s), {len(plan['runs'])} new run(s), "
            f"{done} of them made (`{EXTRA}/`, plans in {files}); a part is "
            "re-judged once every run and analysis row its plan lists is in, and its statistic "
            "then says \"with the extra seeds\" and gives the pre-registered seeds' after it "
            "(until then, how much of its plan is in).")


def _setting(ref) -> str:
    runs = ref.groups.get(core.GROUP) or ref.runs
    if not runs:
        return "No reference runs yet: every claim below reads \"not run yet\"."
    c = runs[0].cfg
    return (f"Setting: {c.model.num_layers} blocks, d={c.model.dim}, {c.model.num_heads} heads, "
            f"FFN {c.model.ffn_dim}, vocabulary {c.data.vocab_size} (byte-level BPE), "
            f"{c.train.steps} steps of {c.data.tokens_per_batch} tokens, warm-up "
            f"{c.train.warmup_steps} steps unless stated, gradient clipping at "
            f"{c.train.clip_norm:g}, init `{c.model.init}`, embedded Wikipedia sample, 2 CPU "
            f"cores; every variant at its own best learning rate (below); "
            f"{len(ref.runs)} runs (commits per sub-sweep under Provenance).")


def section_setting(f: Finding, grids: tuple = Reference.grids) -> str:
    """What a claim read: per sub-sweep, each variant's rate and seed count (a learning-rate
    grid: its variants and rates), and the analysis files."""
    parts = []
    for group, runs in f.used.items():
        by_variant: dict = {}
        for r in runs:
            name = r.variant.split("/", 1)[-1]
            if group in grids:
                name = name.split(",lr=")[0]
            by_variant.setdefault(name, set()).add((float(r.cfg.train.lr), r.seed))
        cells = []
        for v, got in sorted(by_variant.items()):
            n = len({s for _, s in got})
            cells.append(f"`{v}` lr {', '.join(f'{x:g}' for x in sorted({x for x, _ in got}))} "
                         f"({n} seed{'s' if n > 1 else ''})")
        parts.append(f"`{group}`: " + "; ".join(cells))
    parts += [f"`{path}`" for path in f.files]
    return "Setting: " + (" — ".join(parts) if parts else "no runs (LN's definition)") + "."


def _run_baselines(ref, run) -> dict | None:
    return bl.read_run_baselines(run.path, ref.root / Path(run.name).parts[0])


def _provenance(ref, findings) -> list[str]:
    """Each sub-sweep's runs and the commit(s) they were made from (one clean commit each), then
    each analysis output a claim read and the commit it was made from."""
    lines = [f"Pre-registered in commit `{PREREGISTRATION_COMMIT[:12]}` ({PREREGISTRATION}): the "
             "design, the rules, every threshold and the inconclusive conditions, before any run "
             "below.",
             f"Pre-registration 2 in commit `{PREREGISTRATION_2_COMMIT[:12]}` ({PREREGISTRATION_2}): the "
             "statistics rule, DyT's recipe sub-sweeps and the replication settings, before any of "
             "their runs.", ""]
    if not ref.groups:
        lines.append("No reference runs yet.")
    else:
        lines += ["| sub-sweep | runs | made from commit |", "|---|---|---|"]
        lines += [f"| `{group}` | {len(runs)} | {', '.join(ref.git_shas(group))} |"
                  for group, runs in sorted(ref.groups.items())]
    files = sorted({path for f in findings for path in f.files})
    if files:
        lines += ["", "| analysis output | made from commit |", "|---|---|"]
        lines += [f"| `{path}` | {ref.analysis_commit(path)} |" for path in files]
    return lines


def _plateau(ref) -> list[str]:
    """Runs at the plateau of their validation tokens (the learning-rate grids: choices) or of
    their test tokens (the seeds at the chosen rates: verdicts)."""
    out, judged = [], 0
    for run in ref.runs:
        if run.name.split("/")[0] in ref.grids:
            continue  # a grid's rates that do not train are its table's business
        judged += 1
        b = (_run_baselines(ref, run) or {}).get("test")
        loss = finite(run.summary.get("final_test_loss"))
        if bl.at_plateau(loss, b):
            out.append(f"`{run.name}` ({loss:.3f})")
    if not out:
        return ["No run at a chosen rate ends at the unigram plateau."]
    return [f"Runs at their variant's chosen rate that end at the unigram plateau (final test loss "
            f"within {bl.PLATEAU_MARGIN} nats of the unigram cross-entropy: token frequencies "
            f"learned, context unused): {len(out)} of {judged}: " + ", ".join(out) + "."]


def _part(p) -> str:
    kind = "control" if p.control else "evidence"
    stat = f": {p.statistic}" if p.stat else ""
    return f"- {p.mark} {p.text} ({kind}){stat}" + (f" — {p.reason}" if p.reason else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a bare | would end the table cell


HEADLINE_FIGURE = Path(replication.ROOT) / "plots" / "headline.png"  # under results/


def write_headline(refs, out: Path) -> None:
    """The headline figure (test loss of each headline variant per setting), when any runs."""
    from trainer.findings.headline import headline

    headline(refs, out)


# Pre-registration 3's claims in "What we found" (reference setting only)
SCALE_TITLES = {"I1": "QK-norm bounds Pre-LN's attention logits at high rates, at no cost",
                "I2": "the z-loss keeps log Z near 0 and the loss at high rates",
                "I3": "Peri-LN's stream grows less with depth than Pre-LN's, at no cost",
                "I4": "DeepNorm trains Post-LN where it collapses, without warm-up",
                "I5": "which instrument moves first in Post-LN's warm-up collapse",
                "I6": "DeepNorm's gain is its α and β, not its Xavier init (pre-registration 4)"}


def scale_summary(found: list[Finding]) -> list[str]:
    """One line of "What we found" for pre-registration 3's claims: each with its verdict, its
    marks and, where a part is refuted, the first such part's statistic."""
    if not found:
        return []
    items = []
    for f in found:
        label = f"[{f.id}](#{f.id.lower()}) {SCALE_TITLES.get(f.id, '')}".rstrip()
        refuted = next((p for p in f.parts if p.shown is False and not p.control), None)
        why = f"; {refuted.text}: {refuted.stat}" if refuted and refuted.stat else ""
        marks = f" ({f.marks})" if f.parts else ""
        items.append(f"{label}: {VERDICTS[f.verdict]}{marks}{why}")
    return [f"- **The field's instabilities and their fixes** (reference setting only, "
            f"[pre-registration 3]({Path(PREREGISTRATION_3).name})): " + "; ".join(items) + "."]


def _opening(ref, replicated, scale_found: list[Finding] = ()) -> list[str]:
    """What we found, the headline figure, the claim × setting table, each setting's losses."""
    if replicated is None:
        return []
    refs, judged = replicated
    lines = ["## What we found", "", *replication.summary(judged, refs, replication.TITLES),
             *scale_summary(list(scale_found))]
    if (ref.root.parent / HEADLINE_FIGURE).is_file():
        lines += ["", f"![test loss of each headline variant at its own best rate, per setting]"
                      f"({HEADLINE_FIGURE.as_posix()})"]
    names = list(refs)
    lines += ["", "## Replication: each claim in each setting", "",
              "Each claim that reads the headline variants, judged by the same rule in every "
              "setting ([pre-registration 2](PREREGISTRATION-REPLICATION.md)); the marks are its "
              "evidence parts in order (✓ shown, ✗ refuted, ~ underpowered, ? cannot be judged). "
              "The reference's verdicts are re-readings of runs whose numbers were known when "
              "the rule was written; the other settings' runs all came after it.", "",
              *replication.table(judged, names)]
    for setting, r in refs.items():
        lines += ["", f"### {setting}: {SETTINGS[setting][1]}", "",
                  *replication.losses_table(r)]
    return lines + [""]


def render_page(ref, findings, replicated=None) -> str:
    """The page; ``replicated`` (``replication.settings`` and ``judge``): its opening sections."""
    name = ref.root.name
    scale_found = scale_claims(ref)
    lines = [
        "# Reference results", "",
        f"Generated by `python -m trainer findings results/{name}` from the runs under "
        f"`results/{name}/` and `results/{replication.ROOT}/` (made by `scripts/reference.sh` "
        "and `scripts/replication.sh`); do not edit by hand.", "",
        *_opening(ref, replicated, scale_found),
        "## The reference setting", "",
        _setting(ref), "",
        f"Rules, fixed before any of these runs ([pre-registration]({Path(PREREGISTRATION).name}); "
        "thresholds in `trainer/findings/thresholds.py`, verdicts in "
        "`trainer/findings/claim.py`): every variant runs at its own best learning rate, chosen "
        "on the validation split; every verdict reads the test split, which no choice saw. ≥ 3 "
        "seeds per compared variant (≥ 5 for S, F3–F6, F11); a value reads mean ± 95 % "
        "t-interval [min, max] (per seed), maxima and ratios as geometric means with the interval "
        "of their logarithms. A part is *evidence* or a *control* (holds by construction: a check "
        "that the implementation is what it says, never counted).", "",
        f"Statistics ([pre-registration 2]({Path(PREREGISTRATION_2).name}), fixed before the "
        "DyT-recipe and replication runs; the reference's own numbers were known when it was "
        "written, so its verdicts here are re-readings, not tests): a comparison of two variants "
        "reads their paired per-seed difference, a null (\"not worse\", \"does not need\", "
        "\"holds\") a one-sided test at its margin. An evidence part is ✓ *shown* (every seed and "
        "the 95 % interval on the claimed side of the margin), ✗ *refuted* (the interval wholly "
        "on the other side), ~ *underpowered* (the interval straddles the margin: the data cannot "
        "tell, which is not a no) or ? cannot be judged (its precondition failed). Verdict: *yes* "
        "when every evidence part shows, *partly* when some show and some are refuted, *no* when "
        "none shows and some are refuted, *inconclusive (underpowered)* when none is refuted and "
        "some straddle, *inconclusive* when a control failed or a part could not be judged, "
        "*checks only* for a claim with controls alone. " + _extra_seeds(ref), "",
        *lr.section(ref), "",
        "| id | claim | verdict | it would have been false if |", "|---|---|---|---|",
    ]
    for f in findings:
        lines.append(f"| [{f.id}](#{f.id.lower()}) | {_cell(f.claim)} | {VERDICTS[f.verdict]} | "
                     f"{_cell(f.falsifier)} |")
    archived = history.archived_verdicts(ref.root.parent)
    judged = replicated[1] if replicated is not None else {}
    for f in findings:
        lines += _finding(ref, f, history.note(f, archived), replication.across(judged, f.id))
    lines += _scale_section(ref, scale_found)
    lines += ladder_section(ref, replicated[0] if replicated is not None else None)
    lines += reading.section(judged) if ref.setting == "reference" else []
    lines += ["", "## Recipes: each method against its source", "",
              "What the lab follows of each variant's source and every deviation, with its "
              "reason (`trainer/findings/recipes.py`).", "", recipes.recipes_table().rstrip("\n")]
    lines += ["", "## Runs at the plateau", "", *_plateau(ref),
              "", "## Provenance", "", *_provenance(ref, findings)]
    return "\n".join(lines) + "\n"


def _finding(ref, f: Finding, was: str = "", other: list[str] = ()) -> list[str]:
    """One claim's section: claim, metric, setting, numbers, parts, verdict, figures."""
    lines = ["", f"## {f.id}", "", f"**{f.claim}.**", "", f"Metric: {f.metric}.", ""]
    if f.missing:
        lines.append("Not run yet; missing: " + "; ".join(f.missing) + ".")
    else:
        lines += [section_setting(f), ""]
        lines += [f"- {line}" for line in f.lines]
        lines += [""] + [_part(p) for p in f.parts]
    lines += ["", f"Verdict: {VERDICTS[f.verdict]}. Falsified by: {f.falsifier}."]
    lines += ["", was] if was else []
    lines += ["", *other] if other else []
    return lines + [x for plot in f.plots if (ref.root / plot).is_file()
                    for x in ("", f"![{f.id}]({ref.root.name}/{plot})")]


def scale_claims(ref) -> list[Finding]:
    """Pre-registration 3's instability claims, judged with their extra seeds (reference setting
    only; else none)."""
    if ref.setting != "reference":
        return []
    return [extra.judged(claim, ref) for claim in SCALE_CLAIMS]


def _scale_section(ref, found: list[Finding]) -> list[str]:
    """Pre-registration 3's instability claims (reference setting only), judged on their own
    sub-sweeps under ``scale/``; "not run yet" until their runs are committed."""
    if ref.setting != "reference":
        return []
    lines = ["", "## Instabilities and their fixes (pre-registration 3)", "",
             f"Claims fixed in [pre-registration 3]({Path(PREREGISTRATION_3).name}) before any of "
             "their runs, judged by the same statistics rule on sub-sweeps of "
             f"`results/{ref.root.name}/{instability.SCALE}/` (`configs/sweeps/scale/`); "
             "`trainer/findings/instability.py` (I1, I2), `fixes.py` (I3, I4) and `collapse.py` (I5) "
             "read them. I6 was added by [pre-registration 4](PREREGISTRATION-INIT.md), before "
             "its runs (`scale/init_ctl`): Post-LN on DeepNorm's Xavier init, the control I4 "
             "lacks.", "",
             "| id | claim | verdict | it would have been false if |", "|---|---|---|---|"]
    lines += [f"| [{f.id}](#{f.id.lower()}) | {_cell(f.claim)} | {VERDICTS[f.verdict]} | "
              f"{_cell(f.falsifier)} |" for f in found]
    for f in found:
        lines += _finding(ref, f)
    return lines


if __name__ == "__main__":
    sys.exit(main())
