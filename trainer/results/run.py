"""One run directory as an object: what every results command reads of a run, read once.

``Run(path)`` reads nothing up front. ``cfg`` (config.yaml), ``summary`` (summary.json),
``meta`` (meta.json) and the curves (``train``/``eval``: every scalar tag of that event
directory, ``{tag: [(step, value)]}``) are each read on first use and kept, so a summary
table, the plots, the findings and ``reproduce`` can share one object without reading a file
twice. Numbers derived from a run (gap, final probe, ...) live in :mod:`trainer.results.metrics`.

Tests build a run without files by passing the parts: ``Run(None, "name", cfg=..., summary=...,
train=..., eval=...)``.
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

from omegaconf import OmegaConf

from trainer import rundir
from trainer.atomic import read_json
from trainer.results.events import read_scalars

SEED_PART = re.compile(r"(^|,)seed=\d+(?=,|$)")


def variant_name(run_name: str) -> str:
    """``norm=batch,residual=false,seed=1`` -> ``norm=batch,residual=false``."""
    name = SEED_PART.sub("", run_name).strip(",")
    return name or run_name


def group_status(statuses: list[str]) -> str:
    """One status for several runs (the seeds of a variant): ``completed`` when all completed,
    else each other status with its count, ``diverged 1/3, unfinished 1/3``."""
    if len(statuses) == 1:
        return statuses[0]
    if all(s == "completed" for s in statuses):
        return "completed"
    bad = [s for s in dict.fromkeys(statuses) if s != "completed"]
    return ", ".join(f"{s} {statuses.count(s)}/{len(statuses)}" for s in bad)


class Run:
    """One run directory; ``name`` is its path relative to the results root."""

    def __init__(self, path: str | Path | None, name: str | None = None, *,
                 variant: str | None = None, **parts):
        self.path = None if path is None else Path(path)
        self.name = name if name is not None else self.path.resolve().name
        self.variant = variant if variant is not None else variant_name(self.name)
        unknown = set(parts) - {"cfg", "summary", "meta", *rundir.CURVES}
        if unknown:
            raise TypeError(f"Run() got unexpected parts {sorted(unknown)}")
        # A part given here is what its cached_property would have read: store it in its place.
        self.__dict__.update(parts)

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, {self.name!r})"

    @cached_property
    def cfg(self):
        return OmegaConf.load(self.path / rundir.CONFIG)

    @cached_property
    def summary(self) -> dict:
        return read_json(self.path / rundir.SUMMARY)

    @cached_property
    def meta(self) -> dict:
        return read_json(self.path / rundir.META)

    @cached_property
    def train(self) -> dict[str, list[tuple[int, float]]]:
        return read_scalars(self.path / rundir.TRAIN)

    @cached_property
    def eval(self) -> dict[str, list[tuple[int, float]]]:
        return read_scalars(self.path / rundir.EVAL)

    @property
    def seed(self) -> int:
        return int(self.cfg.train.seed)

    @property
    def status(self) -> str:
        return self.summary.get("status", "unfinished")

    @property
    def finished(self) -> bool:
        return self.status in rundir.FINISHED

    def final(self, group: str, tag: str):
        """Last value of a curve of ``group`` ("train"/"eval"); None when never written."""
        curve = getattr(self, group).get(tag)
        return curve[-1][1] if curve else None

    def eval_at(self, tag: str, which: str = "last"):
        """First or last point of an eval curve (None when never written)."""
        curve = self.eval.get(tag)
        return (curve[0][1] if which == "first" else curve[-1][1]) if curve else None

    def train_at(self, tag: str, which: str = "last"):
        """First, middle or last point of a training curve (None when never written)."""
        curve = self.train.get(tag)
        if not curve:
            return None
        return curve[{"first": 0, "mid": len(curve) // 2}.get(which, -1)][1]


def run_dirs(root: str | Path, skip: tuple[str, ...] = ()) -> list[Path]:
    """Run directories (holding config.yaml) at or under ``root``, sorted. Directories named
    ``*.reproduce`` (made by ``reproduce``) and anything under a directory named in ``skip``
    are left out."""
    root = Path(root)
    runs = (p.parent for p in root.rglob(rundir.CONFIG))
    return sorted(p for p in runs if not any(part.endswith(".reproduce") or part in skip
                                             for part in p.relative_to(root).parts))


def load_runs(root: str | Path) -> list[Run]:
    """Every run under ``root`` (``run_dirs``), named relative to it; nothing read yet."""
    root = Path(root)
    return [Run(path, str(path.relative_to(root)) if path != root else root.resolve().name)
            for path in run_dirs(root)]
