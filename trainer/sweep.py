"""Sweeps: a grid of config overrides, one run directory per variant, one summary table.

A sweep spec is YAML (strict schema below). Each variant is a ``python -m trainer train``
command line. By default ``--parallel N`` worker processes run them in turn, each variant in a
forked child of a worker, through the ``train`` command's own function (``trainer.launch``);
``--no-reuse`` and the submitit launchers run each as its own process. Either way variants
never share TensorFlow state. Completed variants are skipped and unfinished ones resume when
the sweep is run again.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from trainer import best_lr
from trainer.config import ConfigError, load_config, network_key
from trainer.faults import ProjectError
from trainer.rundir import LOCK


# Run and sweep names become directory names: no separators, no leading dot, so no escaping.
SAFE_NAME = re.compile(r"[\w,=+-][\w.,=+-]*")


class SweepFailed(ProjectError):
    """Some variants of a sweep failed (their logs say why); the others' tables were written."""


@dataclass
class SweepSpec:
    base: str = "../base.yaml"  # experiment config every variant extends (relative to the spec)
    name: Optional[str] = None  # results/<name>/ (default: the spec's file name)
    overrides: list[str] = field(default_factory=list)  # applied to every variant
    grid: dict[str, list[Any]] = field(default_factory=dict)  # key -> values; all combinations
    seeds: list[int] = field(default_factory=lambda: [0])  # each variant runs once per seed
    exclude: list[dict[str, Any]] = field(default_factory=list)  # partial assignments to skip
    launcher_params: dict[str, Any] = field(default_factory=dict)  # submitit/SLURM parameters
    best_lr: Optional[dict[str, Any]] = None  # {from, match, factors}: trainer/best_lr.py


@dataclass
class Variant:
    name: str  # run directory name, derived from the grid overrides
    overrides: list[str]  # spec overrides + grid overrides + seed
    copy_from: Optional[Path] = None  # best_lr reuse: an earlier run of this config, copied
    base: Optional[Path] = None  # its own base config (default: the sweep's)


def _fmt(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def load_spec(path: str | os.PathLike) -> tuple[SweepSpec, Path]:
    """Read and check a sweep spec; returns it and the resolved base config path."""
    path = Path(path)
    raw = _raw(path)
    try:
        spec = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SweepSpec), raw))
    except (OmegaConfBaseException, TypeError, ValueError) as e:  # OmegaConf raises all three
        raise ConfigError(f"{path}: malformed sweep spec: {str(e).splitlines()[0]}") from None
    base = (path.parent / spec.base).resolve()
    if spec.name is not None and not SAFE_NAME.fullmatch(spec.name):
        raise ConfigError(f"{path}: sweep name '{spec.name}' must be a plain directory name")
    if not spec.grid:
        raise ConfigError(f"{path}: a sweep needs a non-empty 'grid:'")
    if "train.seed" in spec.grid:
        raise ConfigError(f"{path}: list seeds under 'seeds:', not as a grid axis 'train.seed'")
    for key, values in spec.grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{path}: grid '{key}' must be a non-empty list")
    expand_variants(spec)  # every run name must be a safe directory name (spec-level check)
    if spec.best_lr is not None:
        best_lr.parse(spec.best_lr, path, spec.grid, spec.overrides)
    return spec, base


def _raw(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read sweep spec ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a sweep spec is a mapping with 'grid:' (and 'base:', 'seeds:')")
    return data


def expand_variants(spec: SweepSpec, base_seed: int = 0) -> list[Variant]:
    """Every grid combination x seed, minus exclusions; names like ``norm=batch,residual=false``.

    A run's name lists its grid values, plus ``seed=N`` when N is not the base config's seed
    (``base_seed``): adding seeds to a sweep later adds runs and never renames the existing
    ones. An exclusion may name ``seed`` to run some variants on fewer seeds.
    """
    keys = list(spec.grid)
    leaves = [k.split(".")[-1] for k in keys]
    labels = [leaf if leaves.count(leaf) == 1 else k for k, leaf in zip(keys, leaves)]
    variants = []
    for values in itertools.product(*(spec.grid[k] for k in keys)):
        assignment = dict(zip(keys, values))
        base_name = ",".join(f"{label}={_fmt(v)}" for label, v in zip(labels, values))
        for seed in spec.seeds:
            point = {**assignment, "seed": seed}
            if any(all(_fmt(point.get(k)) == _fmt(v) for k, v in ex.items()) for ex in spec.exclude):
                continue
            name = base_name + (f",seed={seed}" if seed != base_seed else "")
            if not SAFE_NAME.fullmatch(name):
                raise ConfigError(f"grid values make an unsafe run name '{name}'")
            overrides = [*spec.overrides, *(f"{k}={_fmt(v)}" for k, v in assignment.items()),
                         f"train.seed={seed}"]
            variants.append(Variant(name, overrides))
    return variants


def dedupe(variants: list[Variant], configs: list) -> tuple[list[Variant], list, list[str]]:
    """Drop variants that train the same network as an earlier one (``network_key``), e.g.
    ``norm=none`` at both placements; returns the kept variants and configs, and one note per
    dropped variant naming the one it duplicates."""
    seen: dict[str, str] = {}
    kept, kept_cfgs, notes = [], [], []
    for variant, cfg in zip(variants, configs):
        key = network_key(cfg)
        if key in seen:
            notes.append(f"skipping {variant.name}: the same network as {seen[key]}")
            continue
        seen[key] = variant.name
        kept.append(variant)
        kept_cfgs.append(cfg)
    return kept, kept_cfgs, notes


def resolve_variants(spec: SweepSpec, spec_path: Path, base: Path, extra=()
                     ) -> tuple[list[Variant], list, list[str]]:
    """The variants to run with their loaded configs (every one validated before anything
    runs, so a typo fails the sweep up front), each at its best rate when the spec has
    ``best_lr:``, minus duplicates of one network (``dedupe``: its notes are returned)."""
    base_seed = load_config(base, [*spec.overrides, *extra]).train.seed
    variants = expand_variants(spec, base_seed)
    configs = [load_config(base, [*v.overrides, *extra]) for v in variants]
    if spec.best_lr is not None:  # each variant at the best rate of an earlier lr sweep
        best = best_lr.parse(spec.best_lr, spec_path, spec.grid, spec.overrides)
        variants = best_lr.apply(best, variants, configs, extra)
        configs = [load_config(base, [*v.overrides, *extra]) for v in variants]
    return dedupe(variants, configs)


def _hparams_config(root: Path, spec: SweepSpec) -> None:
    """The results directory's HParams experiment (its swept keys), once per directory."""
    from trainer.telemetry.tensorboard import write_hparams_config
    from trainer.train.loop import HPARAM_KEYS

    if not list(root.glob("events.out.tfevents.*")):  # not again when the sweep is rerun
        swept = [k for k in spec.grid if k in HPARAM_KEYS] + (
            ["train.seed"] if len(spec.seeds) > 1 else []) + (
            ["train.lr"] if spec.best_lr is not None else [])
        write_hparams_config(root, [k.split(".")[-1] for k in HPARAM_KEYS],
                             swept=tuple(k.split(".")[-1] for k in swept))


def run_sweep(spec_path: str, out_dir: str | None = None, parallel: int = 1,
              extra: list[str] = (), launcher: str = "local", wait: bool = True,
              wait_limit_s: float = 24 * 3600, reuse: bool = True, edge_rule: bool = False
              ) -> Path:
    """Run every variant of the sweep into ``out_dir`` and write its summary table; with
    ``edge_rule`` (a learning-rate sweep), then each variant's edge-rule steps
    (:mod:`trainer.edge_rule`) until no best rate sits at an open edge.

    ``launcher``: local (``parallel`` processes here), submitit (SLURM when the cluster has
    it, one job per variant), or submitit-local (the same jobs as local processes). ``reuse``
    (local): ``parallel`` worker processes run the variants in turn (``launch.Worker``).
    Variants another live process is writing are waited for (up to ``wait_limit_s``), or
    left to it when ``wait`` is false; the table is written once every variant has ended.
    The spec and every variant's config are checked before TensorFlow is imported.
    """
    from trainer import import_tensorflow_quietly
    from trainer.faults import writing
    from trainer.results.summarize import summarize

    spec, base = load_spec(spec_path)
    name = spec.name or Path(spec_path).stem
    root = Path(out_dir) if out_dir else Path("results") / name
    if edge_rule:
        from trainer import edge_rule as rule

        rule.check(spec, spec_path)
    variants, configs, notes = resolve_variants(spec, Path(spec_path), base, extra)
    import_tensorflow_quietly()  # only now: a bad spec or override fails in a second
    for note in notes:
        print(note, flush=True)
    root.mkdir(parents=True, exist_ok=True)
    _hparams_config(root, spec)
    ended = run_variants(root, name, base, variants, configs, parallel, extra, launcher, wait,
                         wait_limit_s, reuse, spec.launcher_params)
    if edge_rule and not ended["failed"]:
        ended["failed"] = _edge_steps(spec, base, root, name, variants, parallel, extra,
                                      launcher=launcher, wait=wait, wait_limit_s=wait_limit_s,
                                      reuse=reuse, launcher_params=spec.launcher_params)
    with writing("sweep tables", root):
        summarize(root)
    if ended["failed"]:
        raise SweepFailed(f"{len(ended['failed'])} variant(s) failed: "
                           f"{', '.join(ended['failed'])}")
    return root


def _edge_steps(spec: SweepSpec, base: Path, root: Path, name: str, variants: list[Variant],
                parallel: int, extra=(), **run_options) -> list[str]:
    """``--edge-rule``: run the edge rule's steps (:func:`trainer.edge_rule.steps`, each
    printed with its reason) until no variant of the sweep asks for one. Returns the runs that
    failed (it stops at the first step with one: the rule would ask for that rate again)."""
    from trainer.edge_rule import steps

    while todo := steps(spec, variants, root):
        for step in todo:
            print(step.describe(), flush=True)
        runs = [v for step in todo for v in step.runs]
        configs = [load_config(v.base or base, [*v.overrides, *extra]) for v in runs]
        ended = run_variants(root, name, base, runs, configs, parallel, extra, **run_options)
        if ended["failed"]:
            return ended["failed"]
    return []


def run_variants(root: Path, name: str, base: Path, variants: list[Variant], configs: list,
                 parallel: int = 1, extra=(), launcher: str = "local", wait: bool = True,
                 wait_limit_s: float = 24 * 3600, reuse: bool = True,
                 launcher_params: dict | None = None) -> dict[str, list[str]]:
    """Run ``variants`` (with their loaded ``configs``), one directory each under ``root``: copies first
    (``copy_from``), then every variant not finished (``launch.run_all``; the arguments as
    ``run_sweep``'s). Returns the variant names by outcome; raises ``Stopped`` when some did
    not end (pre-empted, or still running elsewhere)."""
    from trainer import launch as lc
    from trainer.data import prepare
    from trainer.faults import Stopped

    prepare(configs[0].data)  # build the dataset/tokenizer cache once, not in N processes
    commands = [[sys.executable, "-m", "trainer", "train", "--config", str(v.base or base),
                 "--workdir", str(root / v.name), *v.overrides, *extra,
                 *(["--quiet"] if parallel > 1 or launcher != "local" else [])]
                for v in variants]
    cluster = "local" if launcher == "submitit-local" else None

    def run(indices: list[int]) -> list[int]:
        todo = [commands[i] for i in indices]
        if launcher == "local":
            return lc.run_local(todo, parallel, desc=f"sweep {name}", reuse=reuse,
                                steps=[configs[i].train.steps for i in indices])
        return lc.job_codes(lc.submit_jobs(todo, root, cluster, launcher_params or {}))

    for v in variants:  # best_lr reuse: the grid's run of this config is this variant's run
        if v.copy_from is not None and not (root / v.name).exists():
            shutil.copytree(v.copy_from, root / v.name, ignore=shutil.ignore_patterns(LOCK))
            print(f"{v.name}: the run {v.copy_from} (same config and seed), copied", flush=True)
    ended = lc.run_all([root / v.name for v in variants], configs, run, wait, wait_limit_s, name)
    if ended["stopped"] or ended["elsewhere"]:  # not every variant has ended: no table yet
        parts = ([f"{len(ended['stopped'])} variant(s) pre-empted ({', '.join(ended['stopped'])})"]
                 if ended["stopped"] else [])
        if ended["elsewhere"]:
            parts.append(f"{len(ended['elsewhere'])} variant(s) left running elsewhere "
                         f"({', '.join(ended['elsewhere'])})")
        raise Stopped(f"sweep {name} stopped: {'; '.join(parts)}; rerun the same command to "
                      f"resume and write the tables")
    return ended
