"""The reference results as one object: runs grouped by sub-sweep, looked up by config values.

``Reference(root)`` holds every run under ``root`` (``run.load_runs``: each file of a run read
once, on first use) plus each sub-sweep's ``baselines.json`` and analysis CSVs. Lookups used by a
finding record what is missing on the finding instead of raising, so a partly regenerated
reference still renders, with "not run" where its runs are absent.
"""

from __future__ import annotations

import copy
import csv
from pathlib import Path

import yaml

from trainer.atomic import read_json
from trainer.findings.thresholds import HEADLINE_SEEDS, MIN_SEEDS, REPLICATION_SEEDS
from trainer.provenance import commit_label, read_stamp
from trainer.rundir import CONFIG, analysis_output
from trainer.results.baselines import FILE as BASELINES_FILE
from trainer.results.metrics import finite, mean
from trainer.results.run import load_runs

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Pre-registration 2's extra seeds (trainer/findings/extra.py) live under ROOT/extra/, which
# mirrors ROOT: extra/GROUP/RUN are more seeds of GROUP's variants, extra/RELPATH analysis rows
# of the runs RELPATH did not cover.
EXTRA = "extra"


def _flat(path: Path) -> dict:
    """A run's model/data/train values as lower-case strings (plain YAML, no schema: a reference
    holds hundreds of runs and the claims look each up many times)."""
    with open(path / CONFIG, encoding="utf-8") as fh:
        cfg = yaml.load(fh, Loader=_Loader)
    return {k: str(v).lower() for section in ("model", "data", "train")
            for k, v in (cfg.get(section) or {}).items()}


def _logical(run) -> tuple[str, ...]:
    """A run's name as parts, without a leading ``extra/``: where its seeds join."""
    parts = Path(run.name).parts
    return parts[1:] if parts[0] == EXTRA else parts


class Reference:
    # Sub-sweeps that are learning-rate grids (choices, read on validation), not seeds at a
    # chosen rate (verdicts, read on test).
    grids = ("lr", "depth_lr", "dyt_lr", "affine_lr",
             "scale")  # pre-registration 3's sub-sweeps: rate grids, judged on their own

    # The sub-sweeps a replication setting's design has (pre-registration 2); the reference has
    # every sub-sweep its claims read.
    replication_groups = ("lr", "best", "init")

    def __init__(self, root: str | Path, setting: str = "reference"):
        self.root = Path(root)
        self.setting = setting
        # seeds the headline comparisons need: HEADLINE_SEEDS in the reference, the setting's
        # REPLICATION_SEEDS in a replication setting
        self.headline_seeds = REPLICATION_SEEDS.get(setting, HEADLINE_SEEDS)
        self.runs = load_runs(self.root) if self.root.is_dir() else []
        self.groups: dict[str, list] = {}
        self._values: dict[Path, dict] = {}
        for run in self.runs:
            self.groups.setdefault(Path(run.name).parts[0], []).append(run)
        self._by_name = {run.name: run for run in self.runs}
        self.extra = False  # with_extra(): the extra seeds read as part of their groups

    def has_extra(self) -> bool:
        return (self.root / EXTRA).is_dir()

    def with_extra(self) -> "Reference":
        """This reference with its extra seeds: each run under ``extra/GROUP`` joins ``GROUP``
        (and is found by ``GROUP/RUN`` in analysis stamps), each analysis CSV gains the rows of
        its ``extra/`` copy."""
        other = copy.copy(self)
        other.extra = True
        other.groups = {g: list(runs) for g, runs in self.groups.items() if g != EXTRA}
        other._by_name = dict(self._by_name)
        for run in self.groups.get(EXTRA, []):
            parts = Path(run.name).parts
            other.groups.setdefault(parts[1], []).append(run)
            other._by_name["/".join(parts[1:])] = run
        return other

    def below(self, group: str) -> "Reference":
        """The sub-sweeps under ``ROOT/group`` (``scale/inst_lr``, …) as a reference of their
        own, sharing this one's runs and config cache: nothing is read twice."""
        other = copy.copy(self)
        other.root = self.root / group
        runs = self.groups.get(group, [])
        other.runs = runs
        other.groups = {}
        for run in runs:
            other.groups.setdefault(_logical(run)[1], []).append(run)
        other._by_name = {"/".join(_logical(r)[1:]): r for r in runs}
        return other

    def designed(self, group: str) -> bool:
        """Whether this setting's design has sub-sweep ``group`` (a part reading a group outside
        it is not judged here: "not in this setting's design", never "not run")."""
        return self.setting == "reference" or group in self.replication_groups

    def values(self, run) -> dict:
        """``_flat`` of ``run``, read once."""
        if run.path not in self._values:
            self._values[run.path] = _flat(run.path)
        return self._values[run.path]

    def matching(self, group: str, **want) -> list:
        """Runs of sub-sweep ``group`` whose config matches ``want`` (model/data/train keys,
        values compared as lower-case strings)."""
        if "/" in group:  # a sub-sweep below a folder: scale/inst_lr
            head, rest = group.split("/", 1)
            return self.below(head).matching(rest, **want)
        want = {k: str(v).lower() for k, v in want.items()}
        return [r for r in self.groups.get(group, [])
                if all(self.values(r).get(k) == v for k, v in want.items())]

    def select(self, finding, group: str, **want) -> list:
        """``matching``, recording a missing entry on ``finding`` when there are none."""
        found = self.matching(group, **want)
        if not found:
            shown = {k: str(v).lower() for k, v in want.items()}
            finding.missing.append(f"{group}: {_describe(shown)}")
        return found

    def per_seed(self, finding, group: str, fn, seeds: int = MIN_SEEDS, **want) -> dict:
        """Seed -> ``fn(run)`` of the matching runs; fewer than ``seeds`` seeds is missing too.
        The run's config is recorded for the finding's setting line."""
        runs = self.select(finding, group, **want)
        seed = {id(r): int(self.values(r)["seed"]) for r in runs}
        if runs and len(set(seed.values())) < seeds:
            finding.missing.append(f"{group}: {_describe(want)} has {len(runs)} seed(s), "
                                   f"needs {seeds}")
        for r in runs:
            finding.used.setdefault(group, []).append(r)
        return {seed[id(r)]: fn(r) for r in sorted(runs, key=lambda r: seed[id(r)])}

    def baselines(self, group: str, split: str = "test") -> dict | None:
        """Unigram/bigram cross-entropy of ``split``'s tokens ("test": what verdicts read;
        "validation": what choices read), or None when not computed."""
        found = read_json(self.root / group / BASELINES_FILE) or None
        if found is None or split == "validation":
            return found
        return found.get("test")

    def num_layers(self, group: str) -> int:
        runs = self.groups.get(group) or self.runs
        return int(runs[0].cfg.model.num_layers) if runs else 1

    def clip_norm(self, group: str) -> float:
        runs = self.groups.get(group) or self.runs
        return float(runs[0].cfg.train.clip_norm) if runs else float("nan")

    def pad_fraction(self, group: str) -> float:
        m = mean(finite(r.summary.get("pad_fraction")) for r in self.groups.get(group, []))
        return float("nan") if m is None else m

    def grad_profile(self, finding) -> dict:
        """``init/grad_profile.csv`` (``analyze grad-profile``): init -> placement -> seed -> ratio."""
        relpath = analysis_output("grad-profile")
        if not (self.root / relpath).is_file():
            finding.missing.append(relpath)
            return {}
        finding.files.append(relpath)
        out: dict = {}
        for row in self._rows(relpath):
            out.setdefault(row["init"], {}).setdefault(row["placement"], {})[
                int(row["seed"])] = float(row["last_over_first"])
        return out

    def _rows(self, relpath: str) -> list[dict]:
        """The rows of an analysis CSV under the root, plus (``with_extra``) its extra copy's."""
        rows = []
        for path in (self.root / relpath, *((self.root / EXTRA / relpath,) if self.extra else ())):
            if path.is_file():
                with open(path, newline="") as fh:
                    rows += list(csv.DictReader(fh))
        return rows

    def analysis(self, finding, relpath: str) -> list[dict]:
        """Rows of an analysis CSV under the reference root (``analyze … --out``)."""
        path = self.root / relpath
        if not path.is_file():
            finding.missing.append(relpath)
            return []
        finding.files.append(relpath)
        for run in self._runs_read(path):  # for the setting line: the runs it read, their rates
            finding.used.setdefault(Path(run.name).parts[0], []).append(run)
        rows = self._rows(relpath)
        for row in rows:
            row["seed"] = int(row["seed"])
        return rows

    def _runs_read(self, output: Path) -> list:
        """The reference runs an analysis output was made from: the run directories on the
        command line of its stamp (``NAME.meta.json``), matched by their last two path parts
        (GROUP/RUN), so a checkpoint reproduced elsewhere (``runs/ckpt/GROUP/RUN``) counts as
        the committed run it reproduces."""
        args = (read_stamp(output) or {}).get("command", [])
        return [self._by_name[key] for key in ("/".join(Path(a).parts[-2:]) for a in args)
                if key in self._by_name]

    def git_shas(self, group: str | None = None) -> list[str]:
        """The commits the runs (of ``group``, or all) were made from (``commit_label``:
        "(dirty)" marks a run made from a modified tree)."""
        return sorted({commit_label(run.meta)
                       for run in (self.groups.get(group, []) if group else self.runs)})

    def analysis_commit(self, relpath: str) -> str:
        """The commit an analysis output under the root was made from (its ``NAME.meta.json``),
        marked as ``git_shas`` marks a run's; "unknown" when it has no record."""
        return commit_label(read_stamp(self.root / relpath))


def seed_values(finding, rows: list[dict], relpath: str, column: str, reduce=max,
                **want) -> dict:
    """Seed -> ``reduce`` over the ``column`` values of the analysis rows (``Reference.analysis``
    of ``relpath``) matching ``want`` (compared as lower-case strings): one row per seed, or
    several (per block) folded by ``reduce``; None when a value is empty or not finite. Fewer
    than ``MIN_SEEDS`` seeds is recorded as missing on ``finding`` (unless it is None, or the
    CSV itself is already recorded missing there)."""
    found: dict = {}
    for r in rows:
        if all(str(r[k]).lower() == str(v).lower() for k, v in want.items()):
            found.setdefault(r["seed"], []).append(finite(float(r[column])) if r[column] != ""
                                                   else None)
    if finding is not None and relpath not in finding.missing and len(found) < MIN_SEEDS:
        finding.missing.append(f"{relpath}: {_describe(want)} on {MIN_SEEDS} seeds "
                               f"(has {len(found)})")
    return {s: None if None in xs else reduce(xs) for s, xs in sorted(found.items())}


def _describe(want: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in want.items()) or "any run"
