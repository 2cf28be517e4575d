"""A sweep spec's ``best_lr:``: every variant trains at the best rate an earlier learning-rate
sweep found for it.

    best_lr:
      from: ../../results/lr_sweep   # a results group; relative to the spec file, like base:
      match: [model.norm, model.placement, model.residual]
      factors: [1.0]                 # optional; [0.5, 1.0, 2.0]: three rates around the best
      reuse: true                    # optional: seed 0 is the grid's run, copied, not retrained

For each variant the runs under ``from`` whose ``match`` keys have the variant's values are
read as one loss-vs-rate curve; the variant gets ``train.lr`` = that curve's best rate × each
factor (best rate, tie rule: :mod:`trainer.results.lr_sweep`). The rate is an ordinary
override, so it is written into the run's config.yaml and ``reproduce`` needs nothing more.
With ``factors: [1.0]`` (the default) run names are unchanged; otherwise each name gets
``lr=<rate>`` (before ``seed=N``). A factor other than 1 gives best × f rounded to 12 significant digits (no float
noise such as 0.0030000000000000005 in a config). ``reuse: true`` (factor 1 only): a variant
whose seed has a run at the best rate under ``from`` (seed 0: the grid's) is that run, copied
by the sweep into its directory (the same config and seed give the same run on CPU; the copy
keeps the original's meta.json, so its provenance says where it was trained); the sweep's
config check refuses a copy whose config is not the variant's.

Every problem is one ConfigError line: ``from`` missing or without runs, no run matching a
variant, matched runs that form several variants (a key missing from ``match``) or are not all
finished, every matched rate diverged, ``train.lr`` also set by the grid or the overrides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from trainer.config import ConfigError
from trainer.results.lr_sweep import LR_KEY, lr_variants, variant_keys
from trainer.results.config_values import value_of
from trainer.results.run import load_runs

FIELDS = ("from", "match", "factors", "reuse")
_ABSENT = object()


@dataclass(frozen=True)
class BestLR:
    """The parsed ``best_lr:`` section.

    Args:
        source: the results group the rates are read from (resolved against the spec's folder).
        match: config keys whose values a variant and its source runs share.
        factors: multiples of the best rate, one variant each.
    """

    source: Path
    match: tuple[str, ...]
    factors: tuple[float, ...] = (1.0,)
    reuse: bool = False


def _sets_lr(overrides) -> bool:
    return any(str(o).split("=", 1)[0].strip() == LR_KEY for o in overrides)


def parse(raw: dict, spec_path: Path, grid: dict, overrides: list[str]) -> BestLR:
    """Check the section's shape and that nothing else sets ``train.lr``."""
    where = f"{spec_path}: best_lr"
    if not isinstance(raw, dict) or set(raw) - set(FIELDS) or not {"from", "match"} <= set(raw):
        raise ConfigError(f"{where} must be a mapping with 'from:' and 'match:' "
                          f"(and optionally 'factors:'), got {raw}")
    match, factors = raw["match"], raw.get("factors", [1.0])
    if not isinstance(match, list) or not all(isinstance(k, str) for k in match):
        raise ConfigError(f"{where}.match must be a list of config keys, got {match}")
    if LR_KEY in match or "train.seed" in match:
        raise ConfigError(f"{where}.match cannot name {LR_KEY} or train.seed")
    if (not isinstance(factors, list) or not factors or len(set(factors)) != len(factors)
            or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0
                       for f in factors)):
        raise ConfigError(f"{where}.factors must be distinct positive numbers, got {factors}")
    reuse = raw.get("reuse", False)
    if not isinstance(reuse, bool) or (reuse and list(factors) != [1.0]):
        raise ConfigError(f"{where}.reuse must be true or false, and true only with factors [1.0]"
                          f", got reuse={reuse}, factors={factors}")
    if LR_KEY in grid or _sets_lr(overrides):
        raise ConfigError(f"{where} sets {LR_KEY}: remove it from the grid and the overrides")
    return BestLR((spec_path.parent / str(raw["from"])).resolve(), tuple(match),
                  tuple(float(f) for f in factors), reuse)


def _source_runs(best: BestLR) -> list:
    if not best.source.is_dir():
        raise ConfigError(f"best_lr.from: {best.source} does not exist")
    runs = load_runs(best.source)
    if not runs:
        raise ConfigError(f"best_lr.from: no run directories under {best.source}")
    return runs


def best_curve(best: BestLR, runs, cfg, name: str):
    """The loss-vs-rate curve (``lr_sweep.LRVariant``) of the source ``runs`` whose ``match``
    values are ``cfg``'s; it has a best rate."""
    want = {k: value_of(cfg, k) for k in best.match}
    shown = ", ".join(f"{k}={v}" for k, v in want.items())
    matched = [r for r in runs if all(value_of(r, k) == v for k, v in want.items())]
    if not matched:
        raise ConfigError(f"best_lr: no run under {best.source} has {shown} (variant {name})")
    unfinished = [r.name for r in matched if not r.finished]
    if unfinished:
        raise ConfigError(f"best_lr: {best.source}/{unfinished[0]} is unfinished; finish that "
                          f"sweep first (variant {name})")
    curves = lr_variants(matched)
    if len(curves) > 1:
        raise ConfigError(f"best_lr: the runs under {best.source} with {shown} form {len(curves)}"
                          f" variants differing in {', '.join(variant_keys(matched))}: add "
                          f"them to best_lr.match (variant {name})")
    if curves[0].best_lr is None:
        raise ConfigError(f"best_lr: every run under {best.source} with {shown} diverged: no "
                          f"best rate (variant {name})")
    return curves[0]


def _reused(curve, cfg):
    """The source run at the curve's best rate with ``cfg``'s seed, or None."""
    found = [r for r in curve.runs if float(r.cfg.train.lr) == curve.best_lr
             and int(r.cfg.train.seed) == int(cfg.train.seed)]
    return found[0].path if len(found) == 1 else None


def _named(name: str, rate: float) -> str:
    head, sep, seed = name.partition(",seed=")
    return f"{head},lr={rate:g}{sep}{seed}"


def apply(best: BestLR, variants: list, configs: list, extra=()) -> list:
    """``variants`` (``trainer.sweep.Variant``) with their ``train.lr`` set, one per factor;
    ``configs`` are the variants' loaded configs (``match`` values are read from them)."""
    if _sets_lr(extra):
        raise ConfigError(f"best_lr sets {LR_KEY}: do not also pass it on the command line")
    for key in best.match:
        if configs and OmegaConf.select(configs[0], key, default=_ABSENT) is _ABSENT:
            raise ConfigError(f"best_lr.match: unknown config key '{key}'")
    runs, found, out = _source_runs(best), {}, []
    for variant, cfg in zip(variants, configs):
        want = tuple(value_of(cfg, k) for k in best.match)
        if want not in found:
            found[want] = best_curve(best, runs, cfg, variant.name)
        best_lr = found[want].best_lr
        for factor in best.factors:
            rate = best_lr if factor == 1 else float(f"{best_lr * factor:.12g}")
            name = variant.name if best.factors == (1.0,) else _named(variant.name, rate)
            copy = _reused(found[want], cfg) if best.reuse else None
            out.append(type(variant)(name, [*variant.overrides, f"{LR_KEY}={rate!r}"], copy))
    names = [v.name for v in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"best_lr.factors {list(best.factors)} give runs of the same name "
                          f"(rates equal to 6 significant digits)")
    return out
