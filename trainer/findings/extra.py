"""Pre-registration 2's extra seeds: an evidence part that reads *underpowered* at its setting's
pre-registered seeds gets the variants it reads run at seeds up to ``MAX_SEEDS``, once, and is
judged again on all of them (results/PREREGISTRATION-REPLICATION.md, "Extra seeds").

    python -m trainer extra-seeds results/reference [--parallel 2] [--dry-run]
    python -m trainer extra-seeds results/replication/python --setting python

``ROOT/extra/`` mirrors ``ROOT``: ``extra/GROUP/RUN,seed=N`` are the new seeds of ``GROUP``'s
variants (each trained from its seed-0 run's own config.yaml with only ``train.seed`` changed),
``extra/RELPATH`` the rows of an analysis CSV for the runs ``RELPATH`` did not cover (its
command re-run on them). ``extra/plan.json`` records which parts called for what, written
before the first run; a later call whose plan differs is refused (seeds are added once, never
topped up after seeing them).

This module holds the plan, the judging and the command; ``trainer.findings.extra_run`` the
runner (training, reproducing, re-running analyses).

``judged(claim, ref)`` is how every claim is measured: at the pre-registered seeds first; then,
once every run and analysis row ``extra/plan.json`` lists for a part that was underpowered is
in, that part takes its judgement on all seeds (``Reference.with_extra``); until then it stays
underpowered and says how much of its plan is in (so a plan committed in parts is never judged
on some of its seeds). Parts already shown or refuted keep theirs: no optional stopping on
decided parts.

Which variants a part reads is ``PLAN``: claim id and the start of the part's text -> the
(sub-sweep, config filter) of each variant and the analysis CSVs the part reads. An
underpowered part without an entry stops the command with one error line (the rule cannot be
skipped by omission); ``tests/test_extra.py`` checks every entry against the claims.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from trainer.config import ConfigError
from trainer.findings.claim import BASE, Finding, claim_id
from trainer.findings.extra_run import run_plan
from trainer.findings.reference import EXTRA, Reference
from trainer.findings.thresholds import (DYT_RECIPE_ALPHA, EMBED_UNIT_SCALE, EXTRA_SEED_SETTINGS,
                                         MAX_SEEDS, REPLICATED)
from trainer.rundir import analysis_output

PLAN_FILE = "plan.json"
GRAD_PROFILE = analysis_output("grad-profile")  # no runs: ``analyze grad-profile`` over seeds
DECODE, STREAM, BATCH_SIZE, PADDING, LN_BACKWARD = map(
    analysis_output, ("decode", "stream", "batch-size", "padding", "ln-backward"))


@dataclass(frozen=True)
class Needs:
    """What one part reads: ``variants`` as (sub-sweep, config filter) pairs, ``analyses`` as
    CSVs under the root (re-run on the variants' runs they do not cover)."""

    variants: tuple[tuple[str, dict], ...] = ()
    analyses: tuple[str, ...] = ()


def _best(norm: str = "layer", residual: str = "true", placement: str = "pre",
          warmup: int = 50) -> tuple[str, dict]:
    return ("best", dict(norm=norm, residual=residual, placement=placement,
                         warmup_steps=warmup))


def _pair(group: str, a: dict, b: dict) -> tuple:
    return ((group, {**BASE, **a}), (group, {**BASE, **b}))


def _dyt(ref: Reference) -> tuple[str, dict]:
    """F14's DyT variant: in the reference, the α chosen on validation in ``dyt_recipe``; in a
    replication setting, the pre-registered α in ``best``."""
    from trainer.findings.stream import _best_alpha

    alpha = (_best_alpha(ref, Finding("", "", "", "")) if ref.setting == "reference"
             else DYT_RECIPE_ALPHA)
    return ("dyt_recipe" if ref.setting == "reference" else "best",
            dict(norm="dyt", embed_scale=EMBED_UNIT_SCALE, dyt_alpha=alpha, **BASE))


def _depth(ref: Reference, other: str | None = None) -> tuple:
    """F11's variants at its shallowest and deepest depth: the healthy model, and ``other``."""
    from trainer.findings.depth import HEALTHY, VARIANTS, depths

    ds = depths(ref)
    wants = [HEALTHY[1], *(w for name, w in VARIANTS if name == other)]
    return tuple(("depth", dict(num_layers=d, warmup_steps=50, **want))
                 for want in wants for d in (ds[0], ds[-1])) if ds else ()


def _dyt_alphas(ref: Reference) -> tuple:
    from trainer.findings.thresholds import DYT_RECIPE_ALPHAS

    return tuple(("dyt_recipe", dict(norm="dyt", embed_scale=EMBED_UNIT_SCALE, dyt_alpha=a,
                                     **BASE)) for a in DYT_RECIPE_ALPHAS)


_AFFINE_OFF = ("affine", dict(norm="layer", norm_affine="false", **BASE))

# (claim id, start of the part's text) -> Needs, or a function of the Reference giving it. Every
# evidence part the statistics rule judges has one (tests/test_extra.py), so that a part that
# reads underpowered in any setting has its extra seeds defined before anyone sees it.
PLAN = {
    ("S", "below bigram"): Needs((_best(),)),
    ("F2", "batch: a gap"): Needs((_best("batch"),)),
    ("F2", "masked_batch: a gap"): Needs((_best("masked_batch"),)),
    ("F3", "masked BN ends better under pad"): Needs(_pair("pad_to_max", {"norm": "batch"},
                                                           {"norm": "masked_batch"})),
    ("F3", "masked BN ends better"): Needs((_best("batch"), _best("masked_batch"))),
    ("F4", "collapsed at init without residual"): Needs((_best(), _best(residual="false"))),
    ("F4", "trains worse without residual"): Needs((_best(), _best(residual="false"))),
    ("F5", "stream grows without a norm"): Needs((_best(), _best("none"))),
    ("F6", "Post-LN needs warm-up"): Needs((_best(placement="post"),
                                            _best(placement="post", warmup=0))),
    ("F6", "Pre-LN does not"): Needs((_best(), _best(warmup=0))),
    ("F6", "Post-LN's init gradient"): Needs(analyses=(GRAD_PROFILE,)),
    ("F7", "BN worse at small batches"): Needs((_best(), _best("batch")), (BATCH_SIZE,)),
    ("F9", "pad-to-max pollutes naive BN"): Needs((_best("batch"),), (PADDING,)),
    ("F9", "masked BN ends better under pad_to_max"): Needs(_pair(
        "pad_to_max", {"norm": "batch"}, {"norm": "masked_batch"})),
    ("F9", "masked BN ends better under small_batch"): Needs(_pair(
        "small_batch", {"norm": "batch"}, {"norm": "masked_batch"})),
    ("F10", "trains worse without γ/β"): Needs((_best(), _AFFINE_OFF)),
    ("F10", "γ/β spread the output norms"): Needs((_best(),), (STREAM,)),
    ("F11", "Pre-LN + residual holds"): lambda ref: Needs(_depth(ref)),
    ("F11", "Pre-LN + residual beats"): lambda ref: Needs(_depth(ref, "no norm + residual")),
    **{("F11", f"{name} falls behind"): (lambda ref, n=name: Needs(_depth(ref, n)))
       for name in ("Post-LN + residual", "no norm + residual", "Pre-LN, no residual")},
    ("F12", "the last block keeps the token"): Needs((_best(), _best(residual="false")),
                                                     (STREAM,)),
    ("F12", "and loses it without"): Needs((_best(), _best(residual="false")), (STREAM,)),
    ("F14", "DyT trains with its authors' recipe"): lambda ref: Needs((_dyt(ref),)),
    ("F14", "DyT matches Pre-LN"): lambda ref: Needs((_dyt(ref), _best())),
    ("F14", "saturated where it stalls"): lambda ref: Needs(_dyt_alphas(ref)),
    ("F15", "the batch model"): Needs((_best(), _best("batch")), (DECODE,)),
    ("F15", "the masked_batch model"): Needs((_best(), _best("masked_batch")), (DECODE,)),
    ("F17", "the short formula matches autodiff"): Needs((_best(),), (LN_BACKWARD,)),
    # F18 computes LayerNorm on draws fixed in code: no run or analysis to add seeds to
    ("F18", "the lab's LayerNorm keeps"): Needs(),
    ("F19", "the scale reads better with γ/β"): Needs((_best(), _AFFINE_OFF), (STREAM,)),
}


def needs(ref: Reference, claim: str, text: str) -> Needs | None:
    """The entry of ``PLAN`` for a part (the longest matching start of its text), or None."""
    keys = [k for k in PLAN if k[0] == claim and text.startswith(k[1])]
    if not keys:
        return None
    entry = PLAN[max(keys, key=lambda k: len(k[1]))]
    return entry(ref) if callable(entry) else entry


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


def make_plan(ref: Reference, claims) -> Plan:
    """Every underpowered evidence part of the setting's ``claims`` (``page.all_claims``; at the
    pre-registered seeds only) and what it needs: new seeds of its variants up to
    ``MAX_SEEDS``, analysis rows of the runs an analysis it reads did not cover."""
    plan = Plan()
    for claim in _claims(ref, claims):
        finding = claim(ref)
        for part in finding.parts:
            if not part.underpowered:
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


def read_plan(root: Path) -> dict:
    """``ROOT/extra/plan.json`` ({} when there is none)."""
    from trainer.atomic import read_json

    return read_json(root / EXTRA / PLAN_FILE)


def _check_plan(root: Path, plan: Plan) -> None:
    """Write ``extra/plan.json`` the first time; refuse a plan that differs from it."""
    from trainer.atomic import write_json

    path = root / EXTRA / PLAN_FILE
    old = read_plan(root)
    if old and old != plan.as_json():
        raise ConfigError(f"{path} records a different plan: extra seeds are added once "
                          f"(pre-registration 2); remove it only if no extra run was made")
    if not old:
        write_json(path, plan.as_json())


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
    plan = make_plan(ref, claims)
    for text in describe(plan):
        print(text, flush=True)
    if args.dry_run or not plan.parts:
        return 0
    _check_plan(args.root, plan)
    run_plan(ref, plan, args.parallel)
    return 0
