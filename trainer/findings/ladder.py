"""Pre-registration 3's model-size ladder (results/PREREGISTRATION-SCALE.md, section 3): where
each rung's runs are, and each variant's rate grid, best rate and per-seed values on a rung.
``ladder_trends`` reads them as trends over width, ``ladder_page`` and ``ladder_figures`` show
them. Nothing here judges a claim.

Rungs (d ∈ ``LADDER_WIDTHS``; 6 blocks, 800 steps, 4 heads), each a results root read by
``Reference`` like a replication setting: d = 32 ``results/ladder/d32``, d = 64 the reference
(``results/reference``), d = 128 the wide setting (``results/replication/wide``), d = 256
``results/ladder/d256`` (after the predictions file; ``TOP_RUNG_VARIANTS`` only). A variant's
runs on a rung (``source``): its rate grid and its seeds at the best rate,

- ``lr`` and ``best`` (rungs 32, 128, 256; the new variants there too);
- at d = 64, DyT by its recipe (α₀ = ``DYT_RECIPE_ALPHA``, as the replication settings run it):
  ``dyt_recipe_lr``/``dyt_recipe``; the new variants: section 2's sub-sweeps under ``scale/``
  (QK-norm, z-loss: ``inst_lr``; Peri-LN: ``place_lr``/``place_best``; DeepNorm: ``deep_lr``),
  and a comparison with one of them reads its partner where I1–I4 read it (Pre-LN: ``inst_lr``;
  Post-LN: ``deep_lr``); F6's Post-LN with and without warm-up both from ``deep_lr``, as F6
  reads them there.

Rules (section 1): a variant's best rate is the lowest mean validation loss over the seeds run at
every rate (seed 0 where only it is), a tie to the lower rate; a best at an edge of the rates
tried is an *open edge*, unless it sits at the unigram plateau (which closes that edge), and
whatever reads it "cannot be judged" there; in a paired difference a diverged run's loss is the
unigram loss of the same split's tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.findings.dynamics import stream_growth
from trainer.findings.instability import SCALE
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (DYT_RECIPE_ALPHA, HEADLINE_VARIANTS, INSTABILITY_GRID,
                                         INSTABILITY_SEEDS, LADDER_WIDTHS, RATE_GRID,
                                         SCALE_VARIANTS)
from trainer.results import lr_sweep
from trainer.results.baselines import at_plateau, or_unigram
from trainer.results.metrics import final_loss, final_test_loss, final_test_loss_precise_bn

# width -> (its results root under results/, its setting name); d = 64 is the reference itself
ROOTS = {32: ("ladder/d32", "d32"), 64: (None, "reference"), 128: ("replication/wide", "wide"),
         256: ("ladder/d256", "d256")}
REFERENCE_WIDTH = 64
VARIANTS = {**HEADLINE_VARIANTS, **SCALE_VARIANTS}
DYT = "DyT (recipe)"
# d = 64's new variants: section 2's (grid, best-rate) sub-sweeps under scale/; their partners
SCALE_64 = {"QK-norm": ("inst_lr", "inst_lr"), "z-loss": ("inst_lr", "inst_lr"),
            "Peri-LN": ("place_lr", "place_best"), "DeepNorm": ("deep_lr", "deep_lr")}
PARTNER_64 = {"Pre-LN": ("inst_lr", "inst_lr"), "Post-LN": ("deep_lr", "deep_lr")}
# F6's two arms at d = 64: both in ``deep_lr`` (seeds 0–2 at every rate), where the F6 claim
# reads them since pre-registration 3's fix; one comparison, one reading
F6_ARMS_64 = {"Post-LN": ("deep_lr", "deep_lr"), "Post-LN, no warm-up": ("deep_lr", "deep_lr")}
# The rates x seeds a grid must have finished before its best is read (sections 2 and 3; the
# edge rule's extensions come on top). Rung 128's ``lr`` ran wide's grids as they were, rung
# 256's is centred on its predictions and ``dyt_recipe_lr`` on Pre-LN's best: there, every run
# present must have finished.
GRID_DESIGN = {"lr": (RATE_GRID, (0,)), "inst_lr": (INSTABILITY_GRID, INSTABILITY_SEEDS),
               "place_lr": (RATE_GRID, (0,)), "deep_lr": (RATE_GRID, INSTABILITY_SEEDS)}
RATE_GRID_RUNGS = (32, 64)  # the rungs whose ``lr`` is RATE_GRID at seed 0
# The new variants' (grid, best-rate) sub-sweeps on every rung but 64 (configs/sweeps/ladder/)
SCALE_GROUPS = ("scale_lr", "scale_best")


def _default(key: str) -> str:
    """The lab's default of a model/train key as a run's config.yaml spells it."""
    from trainer.config import ModelConfig, TrainConfig

    cfg = ModelConfig() if hasattr(ModelConfig(), key) else TrainConfig()
    return str(getattr(cfg, key)).lower()


# Keys one variant sets and the others leave at the default: a run made before the key existed
# has no entry for it, and reads as the default.
DEFAULTS = {k: _default(k) for k in ("qk_norm", "z_loss", "init", "embed_scale")}


def rungs(reference: Reference, known: dict[str, Reference] | None = None) -> dict[int, Reference]:
    """Width -> the rung's results (a rung not run yet has no runs); ``known``: settings already
    loaded (``replication.settings``), reused so that no run is read twice."""
    out = {}
    for width in LADDER_WIDTHS:
        path, setting = ROOTS[width]
        if setting == reference.setting:
            out[width] = reference
        elif known and setting in known:
            out[width] = known[setting]
        else:
            out[width] = Reference(reference.root.parent / path, setting)
    return out


@dataclass(frozen=True)
class Source:
    ref: Reference  # the rung, or its scale/ view
    grid: str  # the sub-sweep of the rate grid (validation)
    best: str  # the sub-sweep of the seeds at the best rate (test)
    want: dict
    design: tuple | None = None  # (rates, seeds) that must have finished in ``grid``

    @property
    def where(self) -> str:
        prefix = f"{SCALE}/" if self.ref.root.name == SCALE else ""
        return prefix + self.grid + ("" if self.best == self.grid else f", {prefix}{self.best}")


def source(ref: Reference, width: int, name: str, partner: str | None = None) -> Source:
    """Where variant ``name``'s runs are on rung ``width`` (compared with ``partner``)."""
    want = {**{k: v for k, v in DEFAULTS.items()}, **VARIANTS[name]}
    if width == REFERENCE_WIDTH:
        groups = (SCALE_64.get(name) or (PARTNER_64.get(name) if partner in SCALE_64 else None)
                  or (F6_ARMS_64.get(name) if partner in F6_ARMS_64 else None))
        if groups:
            return Source(ref.below(SCALE), *groups, want, GRID_DESIGN[groups[0]])
        if name == DYT:
            return Source(ref, "dyt_recipe_lr", "dyt_recipe", dict(want, dyt_alpha=DYT_RECIPE_ALPHA))
    design = GRID_DESIGN["lr"] if width in RATE_GRID_RUNGS else None
    if name in SCALE_VARIANTS:  # in groups of their own: the headline lookups (norm, residual,
        return Source(ref, *SCALE_GROUPS, want, design)  # placement, warm-up) would take them
    return Source(ref, "lr", "best", want, design)  # for Pre-LN's runs


def _matching(ref: Reference, group: str, want: dict) -> list:
    want = {k: str(v).lower() for k, v in want.items()}
    return [r for r in ref.groups.get(group, [])
            if all(ref.values(r).get(k, DEFAULTS.get(k)) == v for k, v in want.items())]


class Side:
    """One variant on one rung: its rate grid (validation; the seeds at a rate pooled by their
    mean), its best rate, and per-seed values at a rate (the best-rate seeds' runs, then the
    grid's); ``lacking``: the grid's runs of the design not finished (its best is not read)."""

    def __init__(self, name: str, src: Source):
        self.name, self.src = name, src
        ref = src.ref
        grid = _matching(ref, src.grid, src.want)
        self.val_bl = ref.baselines(src.grid, "validation") or {}
        self.test_bl = ref.baselines(src.best) or {}
        by_rate: dict[float, list] = {}
        for r in grid:
            by_rate.setdefault(float(ref.values(r)["lr"]), []).append(r)
        self.points = [lr_sweep.rate_point(lr, runs, self.val_bl.get("bigram"))
                       for lr, runs in sorted(by_rate.items())]
        best = _matching(ref, src.best, src.want) if src.best != src.grid else []
        self.runs = {(float(ref.values(r)["lr"]), int(ref.values(r)["seed"])): r
                     for r in grid + best}  # a best-rate seed's run replaces the grid's copy
        done = {(float(ref.values(r)["lr"]), int(ref.values(r)["seed"])) for r in grid
                if r.finished}
        rates, seeds = src.design or ((), ())
        self.lacking = [f"lr {lr:g} seed {seed}" for lr in rates for seed in seeds
                        if not any(math.isclose(lr, x) and seed == y for x, y in done)]
        self.lacking += [f"{r.name} ({r.status})" for r in grid if not r.finished]

    def _points(self, steps=None) -> list:
        """Its rate points, or those on ``steps`` of the √10 lattice (``lr_sweep.rate_step``)."""
        return [p for p in self.points if steps is None or lr_sweep.rate_step(p.lr) in steps]

    def best(self, steps=None) -> lr_sweep.RatePoint | None:
        return lr_sweep.best_point(self._points(steps))

    def why_not(self, steps=None) -> str:
        """Why its best rate cannot be read ("" when it can): none finite, or an open edge."""
        points = self._points(steps)
        best = lr_sweep.best_point(points)
        if best is None:
            return f"{self.name} has no finite validation loss at any rate"
        edge = lr_sweep.edge_of(points, best)
        if edge and not at_plateau(best.final_loss, self.val_bl):
            return f"{self.name}'s best rate {best.lr:g} is the {edge} rate tried (open edge)"
        return ""

    def at(self, lr: float, fn) -> dict:
        """Seed -> ``fn(run)`` at rate ``lr``; a value None (not recorded) left out."""
        found = {s: fn(r) for (x, s), r in sorted(self.runs.items()) if math.isclose(x, lr)}
        return {s: v for s, v in found.items() if v is not None}


def on_test(side: Side, lr: float) -> dict:
    """Seed -> test loss at ``lr`` (diverged: the test tokens' unigram loss)."""
    return side.at(lr, lambda r: or_unigram(final_test_loss(r), side.test_bl))


def on_validation(side: Side, lr: float) -> dict:
    return side.at(lr, lambda r: or_unigram(final_loss(r), side.val_bl))


def precise_on_test(side: Side, lr: float) -> dict:
    return side.at(lr, lambda r: or_unigram(final_test_loss_precise_bn(r), side.test_bl))


def growth_at(side: Side, lr: float) -> dict:
    return side.at(lr, stream_growth)


class Ladder:
    """The rungs and each variant's ``Side`` on each, built once."""

    def __init__(self, reference: Reference, known: dict[str, Reference] | None = None):
        self.rungs = rungs(reference, known)
        self._sides: dict = {}

    def side(self, width: int, name: str, partner: str | None = None) -> Side:
        src = source(self.rungs[width], width, name, partner)
        key = (width, name, src.grid, src.best)
        if key not in self._sides:
            self._sides[key] = Side(name, src)
        return self._sides[key]

    def run(self) -> list[int]:
        """The widths whose rung has runs."""
        return [w for w, ref in self.rungs.items() if ref.runs]
