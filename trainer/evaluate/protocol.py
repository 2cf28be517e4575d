"""The lab's protocol for one norm at a budget: the rate grid on one seed, the best rate on
validation, more seeds at the best, the test split — and the same numbers of the baselines.

A budget (``BUDGETS``) names the model (``quick``: the quick sweep's 2-block model, 500 steps;
``reference``: ``configs/reference.yaml``, 6 blocks, 800 steps), the rate grid (the reference's
``RATE_GRID``) and where its baselines' runs are. The norm's own runs go under
``DIR/lr/lr=<rate>`` (seed 0) and ``DIR/best/lr=<best>,seed=<s>`` (seeds 1 …); seed 0 at the
best rate is the grid's run, the same configuration. Every run is an ordinary sweep run
(``trainer.sweep``): TensorBoard reads ``DIR``, ``reproduce`` reruns any of them.

Baselines (``BASELINES``: Pre-LN, RMSNorm, no norm + residual, masked BN, all Pre + residual):
at ``quick`` the protocol's own runs of each, made once under ``results/evaluate-norm/quick/``
(committed; made on first use when missing); at ``reference`` the committed
``results/reference/`` runs (sub-sweeps ``lr`` and ``best``), after one of them is reproduced on
this machine (``reproduce_baseline``) so that the report states how far this machine's numbers
are from the committed ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from trainer.atomic import write_text
from trainer import cache
from trainer.findings.thresholds import RATE_GRID
from trainer.results.baselines import read_run_baselines
from trainer.results.lr_sweep import LRVariant, lr_variants
from trainer.results.metrics import final_test_loss
from trainer.results.run import load_runs

ROOT = Path(__file__).resolve().parents[2]
GRID, SEEDS = "lr", "best"  # DIR's two sub-sweeps
DEFAULT_SEEDS = 3
EVALUATE = "evaluate-norm"  # under the cache root: reproductions of the reference baseline


@dataclass(frozen=True)
class Budget:
    """What ``--budget quick|reference`` trains: ``config`` + ``overrides``, at ``rates``."""

    name: str
    config: Path
    overrides: tuple[str, ...]
    rates: tuple[float, ...]
    baselines: Path  # the baselines' runs (quick: one DIR per norm; reference: lr/ and best/)
    minutes: str  # what a user waits, for --help and the report


BUDGETS = {
    "quick": Budget("quick", ROOT / "configs/reference.yaml",
                    ("model.num_layers=2", "train.steps=500"), RATE_GRID,
                    ROOT / "results/evaluate-norm/quick", "≤ 25 min on 2 cores"),
    "reference": Budget("reference", ROOT / "configs/reference.yaml", (), RATE_GRID,
                        ROOT / "results/reference", "~40 min on 2 cores"),
}
# The lab's norms every report compares against: display name -> model.norm (Pre + residual).
BASELINES = {"Pre-LN": "layer", "RMSNorm": "rms", "no norm + residual": "none",
             "masked BN": "masked_batch"}
# The reference run reproduced before a reference-budget comparison (seed 0 of Pre-LN).
REPRODUCED = "best/norm=layer,residual=true,placement=pre,warmup_steps=50"


@dataclass
class Outcome:
    """One norm under the protocol: its rate curve and its test losses per seed."""

    name: str
    variant: LRVariant | None  # None when no grid run finished
    test_loss: dict[int, float | None] = field(default_factory=dict)  # seed -> test loss
    baselines: dict | None = None  # unigram/bigram of the runs' validation tokens


def _spec(path: Path, budget: Budget, norm: str, rates, seeds, extra=()) -> Path:
    """The sweep spec of one sub-sweep, its base relative to it (the same file on any machine);
    ``extra``: overrides after the norm's (e.g. its placement)."""
    base = os.path.relpath(budget.config.resolve(), path.parent.resolve())
    body = {"base": base, "overrides": [*budget.overrides, f"model.norm={norm}", *extra],
            "grid": {"train.lr": [float(r) for r in rates]}, "seeds": list(seeds)}
    write_text(path, yaml.safe_dump(body, sort_keys=False))
    return path


def run_protocol(norm: str, budget: Budget, out: Path, seeds: int, parallel: int,
                 extra=()) -> Outcome:
    """Train ``norm`` at ``budget`` into ``out`` (skipping finished runs) and read it back;
    ``extra``: more overrides of every run (``placement_overrides``)."""
    from trainer.sweep import run_sweep

    out.mkdir(parents=True, exist_ok=True)
    run_sweep(str(_spec(out / f"{GRID}.yaml", budget, norm, budget.rates, [0], extra)),
              str(out / GRID), parallel)
    grid = read_outcome(norm, out)
    if grid.variant is None or grid.variant.best_lr is None:
        return grid  # trains at no rate without diverging: nothing to seed
    if seeds > 1:
        run_sweep(str(_spec(out / f"{SEEDS}.yaml", budget, norm, [grid.variant.best_lr],
                            range(1, seeds), extra)), str(out / SEEDS), parallel)
    return read_outcome(norm, out)


def read_outcome(norm: str, out: Path) -> Outcome:
    """What ``run_protocol`` left in ``out``: the grid's curve, and the test loss of seed 0 at
    the best rate (the grid's run) and of the other seeds (``out/best``)."""
    grid = [r for r in load_runs(out / GRID)] if (out / GRID).is_dir() else []
    base = read_run_baselines(out / GRID) if grid else None
    variants = lr_variants(grid, base)
    outcome = Outcome(norm, variants[0] if variants else None, baselines=base)
    best = outcome.variant.best_lr if outcome.variant else None
    if best is None:
        return outcome
    for run in grid:
        if float(run.cfg.train.lr) == best and run.finished:
            outcome.test_loss[run.seed] = final_test_loss(run)
    if (out / SEEDS).is_dir():
        for run in load_runs(out / SEEDS):
            if run.finished and float(run.cfg.train.lr) == best:
                outcome.test_loss[run.seed] = final_test_loss(run)
    return outcome


def _is_baseline(run, norm: str, model: dict) -> bool:
    c = run.cfg
    return (str(c.model.norm) == norm and str(c.model.residual).lower() == "true"
            and str(c.model.placement) == "pre" and int(c.train.warmup_steps) == 50
            and all(int(c.model[k]) == v for k, v in model.items()))


def reference_outcome(norm: str, results: Path, model: dict) -> Outcome:
    """A baseline read from the committed reference: its curve in ``lr/``, its seeds at its
    best rate in ``best/`` (``model``: the sizes the runs must have, e.g. 6 blocks)."""
    grid = [r for r in load_runs(results / "lr") if _is_baseline(r, norm, model)]
    base = read_run_baselines(results / "lr")
    variants = lr_variants(grid, base)
    outcome = Outcome(norm, variants[0] if variants else None, baselines=base)
    for run in load_runs(results / "best"):
        if _is_baseline(run, norm, model) and run.finished:
            outcome.test_loss[run.seed] = final_test_loss(run)
    return outcome


def baseline_outcomes(budget: Budget, seeds: int, parallel: int, model: dict) -> dict:
    """Display name -> ``Outcome`` of every baseline at ``budget`` (quick: made when missing)."""
    out = {}
    for name, norm in BASELINES.items():
        if budget.name == "reference":
            out[name] = reference_outcome(norm, budget.baselines, model)
        else:
            out[name] = run_protocol(norm, budget, budget.baselines / norm, seeds, parallel)
    return out


def reproduce_baseline(budget: Budget) -> dict:
    """Reproduce ``REPRODUCED`` of the committed reference on this machine (once per code
    version: the reproduction is kept under the cache root and reused) and return its verdict
    (``reproduce.json``: verdict, text, largest differences)."""
    from trainer.provenance import git_sha
    from trainer.reproduce import reproduce_subprocess

    run = budget.baselines / REPRODUCED
    out = cache.root() / EVALUATE / f"reproduce-{(git_sha() or 'nogit')[:12]}"
    flags = ["--reuse"] if out.is_dir() else []
    return reproduce_subprocess(run, out, out.with_suffix(".log"), flags)
