"""The edge rule (results/PREREGISTRATION-SCALE.md, section 1): no best rate at an open edge.

When a variant's best rate (the lowest mean validation loss over its seeds, a tie going to the
lower rate: :mod:`trainer.results.lr_sweep`) is the lowest or the highest rate tried, the rate
one ``RATE_STEP`` beyond that edge runs at the same seeds, and again while the best stays at an
edge, at most ``MAX_EXTENSIONS`` times per side. An edge rate that diverged or sits at the
plateau closes that edge (the best is then inside the rates tried); a variant whose best loss
sits at the unigram plateau never trains and is not extended.

``next_rate`` decides one step for one variant; ``steps`` applies the rule to a learning-rate
sweep (``python -m trainer sweep SPEC --edge-rule`` runs them: ``trainer.sweep``): a spec with
``train.lr`` in its grid, or one whose ``best_lr:`` gives each variant several rates
(``factors``, as the replication settings' ``lr`` sub-sweeps do). After the spec's runs, each of its variants (its runs but the
rate) gets its steps at the seeds it ran, into the sweep's directory and named as the spec names
its runs (``...,lr=0.0316``, ``,seed=N``): a second call finds them, resumes an unfinished one
and asks for no step twice. A run another spec wrote into the same directory is never read as
this spec's, since only the spec's own names are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from trainer.config import ConfigError
from trainer.findings.thresholds import MAX_EXTENSIONS, RATE_GRID, RATE_STEP
from trainer.results.baselines import at_plateau, read_run_baselines
from trainer.results.lr_sweep import LR_KEY, LRVariant, lr_variants
from trainer.results.run import Run

_LR = re.compile(r"(?:^|,)(?:train\.)?lr=([^,]+)")  # a run name's rate component


def sig3(x: float) -> float:
    """``x`` to three significant digits (0.01 × 3.16 = 0.0316, 0.03 × 3.16 = 0.0948)."""
    return float(f"{x:.3g}")


def next_rate(v: LRVariant | None, baselines: dict | None, grid=RATE_GRID) -> float | None:
    """The edge rule's next rate for ``v``: when its best rate is the lowest or the highest rate
    tried, and it neither diverged nor sits at the unigram plateau (either closes that edge),
    the rate one ``RATE_STEP`` beyond it (three significant digits), while fewer than
    ``MAX_EXTENSIONS`` rates lie beyond ``grid`` on that side. None when the best is inside,
    the edge is closed or the extensions are spent."""
    if v is None or v.best is None or v.edge not in ("lowest", "highest"):
        return None
    if at_plateau(v.best_loss, baselines):
        return None
    tried = [p.lr for p in v.points if p.tried]
    if v.edge == "highest":
        beyond = [x for x in tried if x > max(grid) * 1.001]
        return None if len(beyond) >= MAX_EXTENSIONS else sig3(max(tried) * RATE_STEP)
    beyond = [x for x in tried if x < min(grid) / 1.001]
    return None if len(beyond) >= MAX_EXTENSIONS else sig3(min(tried) / RATE_STEP)


@dataclass(frozen=True)
class Step:
    """One extension: ``variant`` (its run names but the rate and seed) was best at ``best``,
    the ``edge`` rate tried, so ``rate`` runs, one run per seed (``runs``: sweep Variants)."""
    variant: str
    edge: str
    best: float
    rate: float
    runs: tuple

    def describe(self) -> str:
        return (f"edge rule: {self.variant}: best rate {self.best:g} is the {self.edge} rate "
                f"tried, so {self.rate:g} runs next")


def check(spec, path) -> None:
    """Refuse, in one line, a sweep the edge rule cannot extend (before anything runs)."""
    factors = (spec.best_lr or {}).get("factors", [1.0])
    if LR_KEY not in spec.grid and (spec.best_lr is None or len(factors) < 2):
        raise ConfigError(f"{path}: --edge-rule needs a learning-rate sweep: '{LR_KEY}' in "
                          f"its grid, or best_lr: with several factors")


def _variant(name: str) -> str:
    """A run name without its rate and seed: the variant it belongs to."""
    return _LR.sub("", name.partition(",seed=")[0]).lstrip(",")


def _at_rate(v, rate: float, plain: bool):
    """Sweep variant ``v`` moved to ``rate``: its name's rate as the spec writes it (a grid
    value's ``str``, best_lr's ``:g``) and its ``train.lr`` override."""
    text = str(rate) if plain else f"{rate:g}"
    m = _LR.search(v.name)
    name = v.name[:m.start(1)] + text + v.name[m.end(1):]
    overrides = [f"{LR_KEY}={rate}" if o.split("=", 1)[0] == LR_KEY else o for o in v.overrides]
    return replace(v, name=name, overrides=overrides, copy_from=None)


def _rate_of(v) -> float:
    return float(next(o.split("=", 1)[1] for o in v.overrides if o.split("=", 1)[0] == LR_KEY))


def _groups(variants) -> dict[str, list]:
    groups: dict[str, list] = {}
    for v in variants:
        groups.setdefault(_variant(v.name), []).append(v)
    return groups


def _runs_of(group: list, root: Path) -> list[Run]:
    """The finished runs under ``root`` that the group's names give, at its rates and at
    every rate an earlier step added (found by name)."""
    patterns = [re.compile(re.escape(v.name[:m.start(1)]) + "[0-9.eE+-]+"
                           + re.escape(v.name[m.end(1):]))
                for v in group if (m := _LR.search(v.name))]
    names = {v.name for v in group}
    if root.is_dir():
        names |= {p.name for p in root.iterdir()
                  if p.is_dir() and any(pat.fullmatch(p.name) for pat in patterns)}
    runs = [Run(root / n, n) for n in sorted(names) if (root / n).is_dir()]
    return [r for r in runs if r.finished]


def steps(spec, variants, root: Path) -> list[Step]:
    """The edge rule's next step for every variant of the sweep ``spec`` (``variants``: its
    resolved sweep Variants, best_lr applied) whose runs under ``root`` ask for one; a variant
    with no finished run asks for none."""
    baselines = read_run_baselines(root)
    plain = spec.best_lr is None
    out = []
    for label, group in _groups(variants).items():
        runs = _runs_of(group, root)
        variant = lr_variants(runs, baselines)[0] if runs else None
        rate = next_rate(variant, baselines, sorted({_rate_of(v) for v in group}))
        if rate is not None:
            seeds = {v.name.partition(",seed=")[2]: v for v in group}  # one variant per seed
            out.append(Step(label, variant.edge, variant.best_lr, rate,
                            tuple(_at_rate(v, rate, plain) for v in seeds.values())))
    return out
