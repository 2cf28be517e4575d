"""The replication settings on the page (pre-registration 2, results/PREREGISTRATION-REPLICATION.md):
the claims of ``REPLICATED`` judged in every setting, the claim × setting table, each setting's
headline variants at their own best rates, and "What we found", the page's opening summary.

A setting is a results root with the reference's group names (``lr``, ``best``, ``init``):
``results/reference`` for the reference, ``results/replication/<setting>`` for the others, read
by the same claim functions through ``Reference(root, setting)``. Nothing here judges: the
verdicts are the claims' own; this module only arranges them, by the rules fixed in the
pre-registration (what "holds everywhere" means is ``summary_group``).
"""

from __future__ import annotations


from trainer.findings.claim import VERDICTS, Finding, claim_id
from trainer.findings.extra import judged
from trainer.findings.headline import variant_runs
from trainer.findings.reference import Reference
from trainer.findings.thresholds import HEADLINE_VARIANTS, REPLICATED, REPLICATION_SEEDS, SETTINGS
from trainer.results import lr_sweep
from trainer.results.metrics import final_test_loss, interval
from trainer.results.rule import Paired, paired

ROOT = "replication"  # results/replication/<setting>, beside results/reference
NOT_IN_DESIGN = "not in this setting's design"
# The claims that read headline variants but whose other sub-sweeps only the reference has
# (pre-registration 2: not replicated, for cost).
REFERENCE_ONLY = ("F9", "F11")


def settings(reference: Reference) -> dict[str, Reference]:
    """Every setting's results, the reference first (a setting not run yet has no runs)."""
    root = reference.root.parent / ROOT
    return {"reference": reference, **{s: Reference(root / s, s) for s in REPLICATION_SEEDS}}


def judge(refs: dict[str, Reference], reference: list[Finding], claims) -> dict:
    """Claim id -> setting -> its Finding (the reference's: ``reference``, every claim; the
    others: the ``REPLICATED`` claims, measured on that setting's runs)."""
    by_id = {f.id: {"reference": f} for f in reference}
    fns = {claim_id(fn): fn for fn in claims}
    for setting, ref in refs.items():
        if setting == "reference":
            continue
        for cid in REPLICATED:
            by_id[cid][setting] = judged(fns[cid], ref)
    return by_id


def _cell(f: Finding | None) -> str:
    if f is None:
        return NOT_IN_DESIGN
    if f.verdict == "not run":
        return VERDICTS["not run"]
    marks = f.marks
    return f"{VERDICTS[f.verdict]} ({marks})" if marks else VERDICTS[f.verdict]


def table(judged: dict, names: list[str]) -> list[str]:
    """The claim × setting table: the claims judged in more than the reference, then the ones
    that read headline variants but whose other runs only the reference has."""
    head = "| claim | " + " | ".join(f"{n} ({SETTINGS[n][1]})" for n in names) + " |"
    lines = [head, "|---|" + "---|" * len(names)]
    for cid in (*REPLICATED, *REFERENCE_ONLY):
        row = judged.get(cid, {})
        lines.append(f"| [{cid}](#{cid.lower()}) | " + " | ".join(
            _cell(row.get(n)) for n in names) + " |")
    return lines


def across(judged: dict, cid: str) -> list[str]:
    """A claim's section: its verdict in each other setting that judged it, with each evidence
    part's mark and statistic, and whether the verdict changes across settings; [] when no
    other setting has judged it yet."""
    row = judged.get(cid, {})
    done = {s: f for s, f in row.items() if s != "reference" and f.verdict != "not run"}
    if not done:
        return []
    verdicts = {row["reference"].verdict, *(f.verdict for f in done.values())}
    lines = [("**Its verdict changes across settings.**" if len(verdicts) > 1 else
              "The same verdict in every setting judged so far.") + " In the other settings:"]
    for setting, f in done.items():
        parts = "; ".join(f"{p.mark} {p.text}" + (f": {p.statistic}" if p.stat else "")
                          + (f" ({p.reason})" if p.reason else "")
                          for p in f.parts if not p.control)
        lines.append(f"- {setting} ({SETTINGS[setting][1]}): {VERDICTS[f.verdict]}"
                     + (f" — {parts}" if parts else ""))
    return lines


def loss_rows(ref: Reference) -> list[dict]:
    """Per headline variant: its best rate, test loss per seed and its interval, its rank by
    best validation loss in the setting's grid, its LR sensitivity over the rates tried."""
    grid = {}
    for name, want in HEADLINE_VARIANTS.items():
        runs = [r for g in ("lr", "dyt_recipe_lr") for r in ref.matching(g, **want)]
        found = lr_sweep.lr_variants(runs) if runs else []
        grid[name] = found[0] if len(found) == 1 else None
    ranked = sorted((v.best_loss, n) for n, v in grid.items() if v and v.best_loss is not None)
    rank = {n: i + 1 for i, (_, n) in enumerate(ranked)}
    rows = []
    for name, want in HEADLINE_VARIANTS.items():
        runs = variant_runs(ref, want)
        loss = {r.seed: final_test_loss(r) for r in runs}
        rates = sorted({float(r.cfg.train.lr) for r in runs})
        v = grid[name]
        rows.append({"name": name, "config": ", ".join(f"{k}={x}" for k, x in want.items()),
                     "rates": rates, "loss": loss, "interval": interval(loss.values()),
                     "rank": rank.get(name), "sensitivity": v.sensitivity if v else None,
                     "edge": v.edge if v else None, "norm": want["norm"]})
    return rows


def losses_table(ref: Reference) -> list[str]:
    rows = loss_rows(ref)
    if not any(r["loss"] for r in rows):
        return ["Not run yet."]
    base = ref.baselines("best") or {}
    lines = ["| variant | best rate | test loss at it (95 %) | seeds | rank (validation) | "
             "LR sensitivity | config |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        rate = ", ".join(f"{x:g}" for x in r["rates"]) + (f" ({r['edge']} edge)" if r["edge"]
                                                           else "")
        sens = "" if r["sensitivity"] is None else f"{r['sensitivity']:.3f}"
        lines.append(f"| {r['name']} | {rate} | {r['interval'] or ''} | {len(r['loss'])} | "
                     f"{r['rank'] or ''} | {sens} | `{r['config']}` |")
    if base:
        lines += ["", f"Test tokens: unigram {base['unigram']:.4g}, bigram {base['bigram']:.4g} "
                  "nats. Rank: by best validation loss in the setting's grid; LR sensitivity over "
                  "the rates tried there (the reference's grid has 5 rates, the settings' 3)."]
    return lines


def lowest(ref: Reference) -> tuple[str, float] | None:
    """The headline variant with the lowest mean test loss at its best rate; None until every
    headline variant has one (a setting's ``best`` lands in parts, and the lowest of the variants
    in so far is not the setting's lowest)."""
    order = ranked(ref)
    return None if order is None else order[0]


def ranked(ref: Reference) -> list[tuple[str, float]] | None:
    """Every headline variant with its mean test loss at its best rate, lowest first; None until
    every one has it."""
    rows = loss_rows(ref)
    if not rows or not all(r["interval"] for r in rows):
        return None
    return [(name, mean) for mean, name in sorted((r["interval"].mean, r["name"]) for r in rows)]


def gap(ref: Reference, a: str, b: str) -> Paired | None:
    """Variant ``a``'s test loss − ``b``'s at their best rates, paired by seed."""
    loss = {n: {r.seed: final_test_loss(r) for r in variant_runs(ref, HEADLINE_VARIANTS[n])}
            for n in (a, b)}
    return paired(loss[a], loss[b])


def _gap_text(p: Paired | None) -> str:
    if p is None:
        return "fewer than two paired seeds"
    side = ("separated" if p.ci.hi < 0 or p.ci.lo > 0 else "not separated")
    return f"{p.ci.mean:+.3f} (95 % CI {p.ci.lo:+.3f} … {p.ci.hi:+.3f}, {side})"


def lowest_lines(refs: dict[str, Reference]) -> list[str]:
    """"What we found"'s lowest-loss lines (pre-registration 3, section 4): each setting's
    lowest variant with its paired gap to the next one (separated when the 95 % interval
    excludes 0), then, for each variant lowest somewhere, its gap to that runner-up in every
    setting: where the sign flips, the order reverses."""
    order = {s: ranked(ref) for s, ref in refs.items() if ref.runs}
    order = {s: o for s, o in order.items() if o and len(o) > 1}
    if not order:
        return []
    pairs = {}
    cells = []
    for s, o in order.items():
        (a, loss), (b, _) = o[0], o[1]
        pairs.setdefault((a, b), s)
        cells.append(f"{s} {a} ({loss:.3f}; − {b}: {_gap_text(gap(refs[s], a, b))})")
    lines = ["- **Lowest test loss at its own best rate**, per setting, with its paired gap to the "
             "next variant: " + "; ".join(cells) + "."]
    for (a, b), first in pairs.items():
        per = {s: gap(refs[s], a, b) for s in order}
        flips = [s for s, p in per.items() if p is not None and p.ci.mean > 0]
        lines.append(f"- {a} − {b}, per setting: " + "; ".join(
            f"{s} {_gap_text(p)}" for s, p in per.items()) + (
            f". The order reverses in {', '.join(flips)} ({b} lower)" if flips else
            f". {a} is lower in every setting") + ".")
    return lines


# ---- "What we found" (rules fixed in pre-registration 2) ------------------------------------
# A few words per claim for the summary (names, not results: each links to its section).
TITLES = {
    "S": "the healthy model learns at this scale",
    "F1": "LN's output does not depend on the batch, BN's does",
    "F2": "BN's train/inference gap survives population statistics",
    "F3": "padding costs naive BN loss unless masked",
    "F4": "without the residual, tokens collapse and training is worse",
    "F5": "without a norm the stream grows and training is fragile",
    "F6": "Post-LN needs warm-up, Pre-LN does not",
    "F7": "BN in training mode is worse at small batches",
    "F8": "batch partners' lengths move BN's outputs, not LN's",
    "F9": "pads pollute naive BN, masking fixes it",
    "F10": "γ/β restore what LN removes",
    "F11": "residual + LN let deep stacks train",
    "F12": "the residual keeps each token's identity",
    "F13": "LN normalises each token over its own features",
    "F14": "DyT by its authors' recipe trains and matches LN",
    "F15": "a BN model served at batch 1 is worse than an LN model",
    "F16": "a token's output does not change as its sequence grows",
    "F17": "the texts' short LN backward formula",
    "F18": "LN in float32: ε and the two-pass variance",
    "F19": "γ/β restore each token's own scale",
}
GROUPS = ("holds everywhere", "depends on the setting", "does not hold", "undecided",
          "checks only")


def summary_group(verdicts: list[str]) -> str:
    """Where a claim goes in the summary, from its verdicts in the settings it was judged in
    ("not run" is not judged): *holds everywhere* when every one is "yes"; *depends on the
    setting* when two differ; *does not hold* when every one is "no" or "partly"; *checks only*
    for a demonstration; otherwise (underpowered, inconclusive, or judged nowhere) *undecided*."""
    judged = [v for v in verdicts if v != "not run"]
    if judged and all(v == "checks only" for v in judged):
        return "checks only"
    if judged and all(v == "yes" for v in judged):
        return "holds everywhere"
    if len(set(judged)) > 1:
        return "depends on the setting"
    if judged and all(v in ("no", "partly") for v in judged):
        return "does not hold"
    return "undecided"


def summary(judged: dict, refs: dict[str, Reference], titles: dict[str, str]) -> list[str]:
    """The opening lines: one per group (claims linked, with per-setting verdicts where they
    differ and the statistic of the first refuted part where a claim does not hold, on all its
    seeds), then the
    lowest test loss per setting."""
    groups: dict[str, list[str]] = {g: [] for g in GROUPS}
    for cid, row in judged.items():
        verdicts = [f.verdict for f in row.values()]
        group = summary_group(verdicts)
        label = f"[{cid}](#{cid.lower()}) {titles.get(cid, '')}".rstrip()
        if group == "depends on the setting":
            label += " (" + ", ".join(f"{s}: {f.verdict}" for s, f in row.items()
                                      if f.verdict != "not run") + ")"
        elif group == "does not hold":
            refuted = [p for f in row.values() for p in f.parts if p.shown is False
                       and not p.control]
            if refuted and refuted[0].stat:
                label += f" ({refuted[0].text}: {refuted[0].stat})"
        groups[group].append(label)
    run = [s for s, ref in refs.items() if ref.runs]
    lines = [f"Settings with runs: {', '.join(run)} (of {', '.join(refs)}); a claim's group reads "
             "its verdicts in the settings it was judged in (pre-registration 2)."]
    words = {"holds everywhere": "**Holds in every setting judged**",
             "depends on the setting": "**Depends on the setting**",
             "does not hold": "**Does not hold** (the texts are wrong or incomplete here)",
             "undecided": "**Undecided** (underpowered, inconclusive or not run yet)",
             "checks only": "**Demonstrations** (checks only)"}
    for g in GROUPS:
        if groups[g]:
            lines.append(f"- {words[g]}: " + "; ".join(groups[g]) + ".")
    lines += lowest_lines(refs)
    return lines
