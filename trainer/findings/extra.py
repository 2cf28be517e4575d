"""Pre-registration 2's extra seeds: an evidence part that reads *underpowered* at its setting's
pre-registered seeds gets the variants it reads run at seeds up to ``MAX_SEEDS``, once, and is
judged again on all of them (results/PREREGISTRATION-REPLICATION.md, "Extra seeds").

    python -m trainer extra-seeds results/reference [--parallel 2] [--dry-run]
    python -m trainer extra-seeds results/replication/python --setting python

``ROOT/extra/`` mirrors ``ROOT``: ``extra/GROUP/RUN,seed=N`` are the new seeds of ``GROUP``'s
variants (each trained from its seed-0 run's own config.yaml with only ``train.seed`` changed),
``extra/RELPATH`` the rows of an analysis CSV for the runs ``RELPATH`` did not cover (its
command re-run on them). ``extra/plan.json`` records which parts called for what, written
before the first run; a part is planned once, never topped up after seeing its seeds. A part
that becomes underpowered later (a claim added or re-read since: pre-registration 3's I1–I4,
F6 on ``scale/deep_lr``) goes into the next plan file, ``extra/plan-2.json``, … (``plan_files``),
written before its runs; ``GROUP`` may then be a path (``scale/inst_lr``).

This module holds the plan, the judging and the command; ``trainer.findings.extra_run`` the
runner (training, reproducing, re-running analyses).

``judged(claim, ref)`` is how every claim is measured: at the pre-registered seeds first; then,
once every run and analysis row the plans list for a part that was underpowered is
in, that part takes its judgement on all seeds (``Reference.with_extra``); until then it stays
underpowered and says how much of its plan is in (so a plan committed in parts is never judged
on some of its seeds). Parts already shown or refuted keep theirs: no optional stopping on
decided parts.

Which variants a part reads is ``extra_plan.PLAN``: claim id and the start of the part's text ->
the (sub-sweep, config filter) of each variant and the analysis CSVs the part reads. An
underpowered part without an entry stops the command with one error line (the rule cannot be
skipped by omission); ``tests/test_extra.py`` checks every entry against the claims.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from trainer.config import ConfigError
from trainer.findings.claim import claim_id
from trainer.findings.extra_plan import GRAD_PROFILE, needs
from trainer.findings.extra_run import run_plan
from trainer.findings.reference import EXTRA, Reference
from trainer.findings.thresholds import EXTRA_SEED_SETTINGS, MAX_SEEDS, REPLICATED

PLAN_FILE = "plan.json"

# ------------------------------------------------------------------------------------------
# Judging with the extra seeds


def judged(claim, ref: Reference) -> Finding:
    """``claim(ref)`` at the pre-registered seeds; each part underpowered there whose extra
    seeds (``extra/plan.json``) are all in re-judged on every seed (``Part.before`` keeps the
    pre-registered seeds' statistic),
    one still short of them says how many it has; the rest as they were."""
    first = claim(ref)
    plan = read_plan(ref.root) if ref.has_extra() else None
    if not plan or not any(p.underpowered for p in first.parts):
        return first
    entries = {(e["claim"], e["part"]): e for e in plan.get("parts", [])}
    everything = ref.with_extra()
    second = claim(everything)
    again = {p.text: p for p in second.parts}
    redone = False
    for i, p in enumerate(first.parts):
        entry = entries.get((first.id, p.text))
        if not p.underpowered or entry is None:
            continue
        have, want = progress(everything, entry)
        q = again.get(p.text)
        if have < want:  # a plan in progress: judged when all of it is in, not on part of it
            first.parts[i] = replace(p, stat=f"{p.stat}; extra seeds: {have} of {want} in")
        elif q is not None and q.stat != p.stat:
            first.parts[i] = replace(q, before=p.stat)
            redone = True
    if redone:
        first.lines += [f"with the extra seeds: {x}" for x in second.lines if x not in first.lines]
    return first


def progress(ref: Reference, entry: dict) -> tuple[int, int]:
    """How much of a plan part is in ``ref`` (``with_extra``): finished seeds below
    ``MAX_SEEDS`` of each variant, plus analysis rows of each of them (or, for grad-profile,
    of each seed) -- as (have, want)."""
    have = want = 0
    names = []  # GROUP/RUN of every finished seed of the part's variants
    for group, filt in entry["variants"]:
        runs = [r for r in ref.matching(group, **filt) if r.finished]
        seeds = {int(ref.values(r)["seed"]): r for r in runs}
        have += sum(s in seeds for s in range(MAX_SEEDS))
        want += MAX_SEEDS
        names += ["/".join(Path(r.name).parts[-2:]) for s, r in seeds.items() if s < MAX_SEEDS]
    for relpath in entry["analyses"]:
        todo = range(MAX_SEEDS) if relpath == GRAD_PROFILE else names
        have += len(todo) - len(_uncovered(ref, relpath, list(todo)))
        want += MAX_SEEDS * (1 if relpath == GRAD_PROFILE else len(entry["variants"]))
    return have, want


# ------------------------------------------------------------------------------------------
# Planning and running the extra seeds


@dataclass
class Plan:
    parts: list[dict] = field(default_factory=list)  # claim, part, variants, analyses
    runs: dict = field(default_factory=dict)  # "GROUP/RUN,seed=N" -> the seed-0 run it copies
    analyses: dict = field(default_factory=dict)  # relpath -> runs (or seeds) to add

    def as_json(self) -> dict:
        return {"max_seeds": MAX_SEEDS, "parts": self.parts, "runs": self.runs,
                "analyses": self.analyses}


def _claims(ref: Reference, claims) -> list:
    """The claims a setting judges: every one in the reference, ``REPLICATED`` elsewhere."""
    if ref.setting == "reference":
        return list(claims)
    return [fn for fn in claims if claim_id(fn) in REPLICATED]


def _variant(ref: Reference, group: str, want: dict) -> list:
    """The runs of one variant (one config up to the seed), seed-ordered; ConfigError when the
    filter finds none or several variants."""
    runs = ref.matching(group, **want)
    if not runs:
        raise ConfigError(f"extra seeds: no run in {ref.root / group} matches {want}")
    configs = {tuple(sorted((k, v) for k, v in ref.values(r).items() if k != "seed"))
               for r in runs}
    if len(configs) > 1:
        raise ConfigError(f"extra seeds: {want} matches {len(configs)} variants in "
                          f"{ref.root / group}; the plan's filter must name one")
    return sorted(runs, key=lambda r: int(ref.values(r)["seed"]))


def _seed_name(name: str, seed: int) -> str:
    return re.sub(r",seed=\d+$", "", name) + f",seed={seed}"


def make_plan(ref: Reference, claims, planned=frozenset()) -> Plan:
    """Every underpowered evidence part of the setting's ``claims`` (``page.all_claims``; at the
    pre-registered seeds only) not in ``planned`` ((claim, part) pairs a recorded plan has) and
    what it needs: new seeds of its variants up to ``MAX_SEEDS``, analysis rows of the runs an
    analysis it reads did not cover."""
    plan = Plan()
    for claim in _claims(ref, claims):
        finding = claim(ref)
        for part in finding.parts:
            if not part.underpowered or (finding.id, part.text) in planned:
                continue
            need = needs(ref, finding.id, part.text)
            if need is None:
                raise ConfigError(f"extra seeds: {finding.id}'s part '{part.text}' is "
                                  f"underpowered and trainer/findings/extra.py PLAN has no entry "
                                  f"for it")
            plan.parts.append({"claim": finding.id, "part": part.text,
                               "variants": [[g, w] for g, w in need.variants],
                               "analyses": list(need.analyses)})
            names = []  # GROUP/RUN of every seed of the part's variants, old and new
            for group, want in need.variants:
                runs = _variant(ref, group, want)
                have = {int(ref.values(r)["seed"]): r for r in runs}
                for seed in range(MAX_SEEDS):
                    if seed in have:
                        names.append(f"{group}/{Path(have[seed].name).name}")
                    else:
                        names.append(f"{group}/{_seed_name(Path(runs[0].name).name, seed)}")
                        plan.runs.setdefault(names[-1], runs[0].name)
            for relpath in need.analyses:
                todo = plan.analyses.setdefault(relpath, [])
                todo += [x for x in _uncovered(ref, relpath, names) if x not in todo]
    return plan


def _uncovered(ref: Reference, relpath: str, names: list[str]) -> list:
    """What the analysis CSV ``relpath`` (and, ``with_extra``, its extra copy) lacks: seeds below
    ``MAX_SEEDS`` (grad-profile, which reads no runs), else those of the runs ``names``
    (GROUP/RUN) its command did not read."""
    if relpath == GRAD_PROFILE:
        have = {int(r["seed"]) for r in ref._rows(relpath)}
        return [s for s in range(MAX_SEEDS) if s not in have]
    paths = (ref.root / relpath, *((ref.root / EXTRA / relpath,) if ref.extra else ()))
    covered = {"/".join(Path(run.name).parts[-2:])
               for path in paths for run in ref._runs_read(path)}
    return [n for n in names if n not in covered]


def plan_files(root: Path) -> list[Path]:
    """The recorded plans, in the order they were made: ``extra/plan.json``, then
    ``extra/plan-2.json``, ``plan-3.json``, … (each written once, for the parts no earlier one
    has: a part that became underpowered later, e.g. under pre-registration 3's claims)."""
    later = [root / EXTRA / f"plan-{n}.json" for n in range(2, 100)]
    return [p for p in (root / EXTRA / PLAN_FILE, *later) if p.is_file()]


def read_plan(root: Path) -> dict:
    """Every recorded plan of ``ROOT/extra/`` as one ({} when there is none): their parts, runs
    and analysis rows together."""
    from trainer.atomic import read_json

    out: dict = {}
    for path in plan_files(root):
        plan = read_json(path)
        if not out:
            out = {"max_seeds": plan["max_seeds"], "parts": [], "runs": {}, "analyses": {}}
        out["parts"] += plan["parts"]
        out["runs"].update(plan["runs"])
        for relpath, todo in plan["analyses"].items():
            have = out["analyses"].setdefault(relpath, [])
            have += [x for x in todo if x not in have]
    return out


def planned(root: Path) -> frozenset:
    """The (claim, part) pairs the recorded plans have."""
    return frozenset((p["claim"], p["part"]) for p in read_plan(root).get("parts", []))


def record_plan(root: Path, plan: Plan) -> None:
    """Write ``plan`` (the parts no recorded plan has) as the next plan file; nothing when it
    has no part. A part's seeds are added once: ``make_plan`` leaves out the parts recorded."""
    from trainer.atomic import write_json

    if not plan.parts:
        return
    known = planned(root)
    again = [p["part"] for p in plan.parts if (p["claim"], p["part"]) in known]
    if again:
        raise ConfigError(f"extra seeds: {', '.join(again)} already planned in "
                          f"{root / EXTRA}: extra seeds are added once (pre-registration 2)")
    n = len(plan_files(root))
    write_json(root / EXTRA / (PLAN_FILE if n == 0 else f"plan-{n + 1}.json"), plan.as_json())


def recorded(root: Path) -> Plan:
    """Every recorded plan as one ``Plan`` (what the runner resumes)."""
    data = read_plan(root)
    return Plan(data.get("parts", []), data.get("runs", {}), data.get("analyses", {}))


def describe(plan: Plan) -> list[str]:
    lines = [f"{p['claim']}: {p['part']}" for p in plan.parts]
    lines.append(f"{len(plan.runs)} new run(s): " + ", ".join(plan.runs))
    lines += [f"{relpath}: {len(todo)} to add ({', '.join(map(str, todo))})"
              for relpath, todo in plan.analyses.items()]
    return lines


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", type=Path, help="a setting's results (results/reference, "
                                           "results/replication/python)")
    p.add_argument("--setting", help="reference or a replication setting (default: the root's "
                                     "folder name)")
    p.add_argument("--parallel", type=int, default=1,
                   help="runs, and reproductions the analyses need, at once (default 1)")
    p.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")


def run(args: argparse.Namespace, claims) -> int:
    """The command: ``claims`` are ``page.all_claims()`` (passed in: the page imports this
    module)."""
    setting = args.setting or args.root.name
    if setting not in EXTRA_SEED_SETTINGS:
        raise ConfigError(f"extra seeds are pre-registered for {', '.join(EXTRA_SEED_SETTINGS)}, "
                          f"not '{setting}' (pre-registration 2)")
    if not args.root.is_dir():
        raise ConfigError(f"results directory not found: {args.root}")
    ref = Reference(args.root, setting)
    plan = make_plan(ref, claims, planned(args.root))
    if plan.parts:
        print("new plan (parts no recorded plan has):", flush=True)
        for text in describe(plan):
            print(text, flush=True)
    else:
        print("no underpowered part lacks a plan", flush=True)
    if args.dry_run:
        return 0
    record_plan(args.root, plan)
    everything = recorded(args.root)
    if everything.parts:
        run_plan(ref, everything, args.parallel)  # resumes: finished runs are skipped
    return 0
