"""The reference results as one object: runs grouped by sub-sweep, looked up by config values.

``Reference(root)`` holds every run under ``root`` (``run.load_runs``: each file of a run read
once, on first use) plus each sub-sweep's ``baselines.json`` and analysis CSVs. Lookups used by a
finding record what is missing on the finding instead of raising, so a partly regenerated
reference still renders, with "not run" where its runs are absent.
"""

from __future__ import annotations

import csv
from pathlib import Path

from trainer.atomic import read_json
from trainer.results.baselines import FILE as BASELINES_FILE
from trainer.results.metrics import finite, mean
from trainer.results.run import load_runs
from trainer.findings.thresholds import MIN_SEEDS



def _flat(cfg) -> dict:
    return {**cfg.model, **cfg.data, **cfg.train}


class Reference:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.runs = load_runs(self.root) if self.root.is_dir() else []
        self.groups: dict[str, list] = {}
        for run in self.runs:
            self.groups.setdefault(Path(run.name).parts[0], []).append(run)

    def select(self, finding, group: str, **want) -> list:
        """Runs of sub-sweep ``group`` whose config matches ``want`` (model/data/train keys);
        records a missing entry on ``finding`` when there are none."""
        found = [r for r in self.groups.get(group, [])
                 if all(str(_flat(r.cfg)[k]).lower() == str(v).lower() for k, v in want.items())]
        if not found:
            finding.missing.append(f"{group}: {_describe(want)}")
        return found

    def per_seed(self, finding, group: str, fn, **want) -> dict:
        """Seed -> ``fn(run)`` of the matching runs; fewer than MIN_SEEDS seeds is missing too."""
        runs = self.select(finding, group, **want)
        if runs and len({r.seed for r in runs}) < MIN_SEEDS:
            finding.missing.append(f"{group}: {_describe(want)} has {len(runs)} seed(s), "
                                   f"needs {MIN_SEEDS}")
        return {r.seed: fn(r) for r in sorted(runs, key=lambda r: r.seed)}

    def baselines(self, group: str) -> dict | None:
        return read_json(self.root / group / BASELINES_FILE) or None

    def num_layers(self, group: str) -> int:
        runs = self.groups.get(group) or self.runs
        return int(runs[0].cfg.model.num_layers) if runs else 1

    def pad_fraction(self, group: str) -> float:
        m = mean(finite(r.summary.get("pad_fraction")) for r in self.groups.get(group, []))
        return float("nan") if m is None else m

    def warmups(self, group: str) -> list[int]:
        return sorted({int(r.cfg.train.warmup_steps) for r in self.groups.get(group, [])}) or [0]

    def grad_profile(self, finding, group: str) -> dict:
        """``group/grad_profile.csv`` (``analyze grad-profile``): init -> placement -> seed -> ratio."""
        path = self.root / group / "grad_profile.csv"
        if not path.is_file():
            finding.missing.append(f"{group}/grad_profile.csv")
            return {}
        out: dict = {}
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                out.setdefault(row["init"], {}).setdefault(row["placement"], {})[
                    int(row["seed"])] = float(row["last_over_first"])
        return out

    def analysis(self, finding, relpath: str) -> list[dict]:
        """Rows of an analysis CSV under the reference root (``analyze … --out``)."""
        path = self.root / relpath
        if not path.is_file():
            finding.missing.append(relpath)
            return []
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:
            row["seed"] = int(row["seed"])
        return rows

    def git_shas(self, group: str | None = None) -> list[str]:
        """The commits the runs (of ``group``, or all) were made from; "(dirty)" marks a run
        made from a modified tree."""
        shas = set()
        for run in self.groups.get(group, []) if group else self.runs:
            meta = run.meta
            shas.add(f"{meta.get('git_sha') or 'unknown'}{' (dirty)' if meta.get('git_dirty') else ''}")
        return sorted(shas)


def _describe(want: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in want.items()) or "any run"
