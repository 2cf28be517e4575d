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
from trainer.findings.dynamics import DEEP_LR, DEEP_POST
from trainer.findings.extra_run import run_plan
from trainer.findings.fixes import DEEP, INIT_CTL, PERI, POST
from trainer.findings.instability import SCALE, VARIANTS, Grid
from trainer.findings.reference import EXTRA, Reference
from trainer.findings.thresholds import (DEEP_DEPTH, DEEP_DEPTH_RATES, DYT_RECIPE_ALPHA,
                                         EMBED_UNIT_SCALE, EXTRA_SEED_SETTINGS, INSTABILITY_GRID,
                                         INSTABILITY_SEEDS, MAX_SEEDS, R_POST, R_TOP, RATE_GRID,
                                         REPLICATED)
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


# Pre-registration 3's sub-sweeps (``scale/GROUP``): a variant at given rates, and its best rate
# by the claims' own rule (``instability.Grid``: the mean over the seeds run at every rate).
def _scale(group: str, want: dict, *rates) -> tuple:
    return tuple((f"{SCALE}/{group}", {**want, "lr": lr}) for lr in rates)


def _grid(ref: Reference, group: str, want: dict, rates=INSTABILITY_GRID,
          seeds=INSTABILITY_SEEDS):
    return Grid(ref.below(SCALE), Finding("", "", "", ""), group, group, want, rates, seeds)


def _every_rate(ref: Reference, group: str, *wants: dict) -> tuple:
    """Each of ``wants`` at every rate it ran in ``scale/GROUP`` (a per-seed count or
    sensitivity reads them all)."""
    return tuple(v for want in wants for v in _scale(group, want, *sorted(
        {float(ref.values(r)["lr"]) for r in ref.matching(f"{SCALE}/{group}", **want)})))


def _inst(ref: Reference, other: str, part: str) -> Needs:
    """I1's and I2's parts: Pre-LN against ``other`` (QK-norm, z-loss) in ``inst_lr``."""
    pre, new = VARIANTS["Pre-LN"], VARIANTS[other]
    best = {name: _grid(ref, "inst_lr", VARIANTS[name]).best for name in ("Pre-LN", other)}
    return Needs({"top": _scale("inst_lr", pre, R_TOP) + _scale("inst_lr", new, R_TOP),
                  "own": _scale("inst_lr", pre, R_TOP, best["Pre-LN"]),
                  "best": (_scale("inst_lr", pre, best["Pre-LN"])
                           + _scale("inst_lr", new, best[other])),
                  "every": _every_rate(ref, "inst_lr", pre, new)}[part])


def _peri(ref: Reference) -> Needs:
    pre = VARIANTS["Pre-LN"]
    return Needs(_scale("inst_lr", pre, _grid(ref, "inst_lr", pre).best)
                 + ((f"{SCALE}/place_best", PERI),))


def _deep(ref: Reference, part: str) -> Needs:
    """I4's parts: Post-LN and DeepNorm in ``deep_lr`` and ``deep_depth``."""
    post, deep = dict(POST, warmup_steps=50), dict(DEEP, warmup_steps=50)
    if part == "rates":
        return Needs(_every_rate(ref, "deep_lr", post, deep))
    if part == "at":
        return Needs(_scale("deep_lr", post, R_POST) + _scale("deep_lr", deep, R_POST))
    if part == "cold":
        best = _grid(ref, "deep_lr", deep, RATE_GRID).best
        return Needs(_scale("deep_lr", dict(DEEP, warmup_steps=0), best)
                     + _scale("deep_lr", deep, best))
    return Needs(tuple(v for want in (post, deep) for v in _scale(
        "deep_depth", dict(want, num_layers=DEEP_DEPTH),
        _grid(ref, "deep_depth", dict(want, num_layers=DEEP_DEPTH), DEEP_DEPTH_RATES).best)))


def _init_ctl(ref: Reference, part: str) -> Needs:
    """I6's parts: Post-LN on Xavier init (``init_ctl``) against DeepNorm (``deep_lr``)."""
    xavier, deep = dict(POST, init="xavier", warmup_steps=50), dict(DEEP, warmup_steps=50)
    if part == "rates":
        return Needs(_every_rate(ref, INIT_CTL, xavier) + _every_rate(ref, "deep_lr", deep))
    if part == "at":
        return Needs(_scale(INIT_CTL, xavier, R_POST) + _scale("deep_lr", deep, R_POST))
    return Needs(_scale(INIT_CTL, xavier, _grid(ref, INIT_CTL, xavier, RATE_GRID).best)
                 + _scale("deep_lr", deep, _grid(ref, "deep_lr", deep, RATE_GRID).best))


def _post_warmup(ref: Reference) -> Needs:
    """F6's Post-LN part: in ``scale/deep_lr`` where the setting has it (the reference, since
    pre-registration 3), each arm at its best rate; else in ``best``."""
    if not ref.matching(f"{SCALE}/{DEEP_LR}", **DEEP_POST):
        return Needs((_best(placement="post"), _best(placement="post", warmup=0)))
    arms = [dict(DEEP_POST, warmup_steps=w) for w in (50, 0)]
    return Needs(tuple(v for want in arms for v in _scale(
        DEEP_LR, want, _grid(ref, DEEP_LR, want, RATE_GRID).best)))


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
    ("F6", "Post-LN needs warm-up"): _post_warmup,
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
    # pre-registration 3 (results/PREREGISTRATION-SCALE.md): its parts, by their letter
    ("I1", "(a)"): lambda ref: _inst(ref, "QK-norm", "own"),
    ("I1", "(b)"): lambda ref: _inst(ref, "QK-norm", "top"),
    ("I1", "(c)"): lambda ref: _inst(ref, "QK-norm", "top"),
    ("I1", "(d)"): lambda ref: _inst(ref, "QK-norm", "every"),
    ("I1", "(e)"): lambda ref: _inst(ref, "QK-norm", "best"),
    ("I2", "(a)"): lambda ref: _inst(ref, "z-loss", "best"),
    ("I2", "(b)"): lambda ref: _inst(ref, "z-loss", "top"),
    ("I2", "(c)"): lambda ref: _inst(ref, "z-loss", "top"),
    ("I2", "(d)"): lambda ref: _inst(ref, "z-loss", "best"),
    ("I3", "(a)"): _peri,
    ("I3", "(b)"): _peri,
    ("I4", "(a)"): lambda ref: _deep(ref, "rates"),
    ("I4", "(b)"): lambda ref: _deep(ref, "at"),
    ("I4", "(c)"): lambda ref: _deep(ref, "cold"),
    ("I4", "(d)"): lambda ref: _deep(ref, "depth"),
    # pre-registration 4 (results/PREREGISTRATION-INIT.md)
    ("I6", "(a)"): lambda ref: _init_ctl(ref, "at"),
    ("I6", "(b)"): lambda ref: _init_ctl(ref, "rates"),
    ("I6", "(c)"): lambda ref: _init_ctl(ref, "best"),
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
