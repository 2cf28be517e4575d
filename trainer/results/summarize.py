"""Sweep tables: one row per run directory under a results root (summary.csv, summary.md)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from omegaconf import OmegaConf

from trainer.train.rundir import read_json, write_atomic

COLUMNS = ("run", "norm", "placement", "residual", "num_layers", "lr", "seed", "status",
           "steps", "final_eval_loss", "best_eval_loss", "diverged_step", "max_grad_norm",
           "tokens_per_sec", "pad_fraction")


def find_runs(root: Path) -> list[Path]:
    """Run directories (holding config.yaml) directly or deeper under ``root``, sorted."""
    return sorted(p.parent for p in Path(root).rglob("config.yaml"))


def collect(root: Path) -> list[dict]:
    rows = []
    for run in find_runs(root):
        cfg = OmegaConf.load(run / "config.yaml")
        summary = read_json(run / "summary.json")
        rows.append({
            "run": str(run.relative_to(root)), "norm": cfg.model.norm,
            "placement": cfg.model.placement, "residual": cfg.model.residual,
            "num_layers": cfg.model.num_layers, "lr": cfg.train.lr, "seed": cfg.train.seed,
            "status": summary.get("status", "unfinished"),
            **{k: summary.get(k) for k in COLUMNS[8:]},
        })
    return rows


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def summarize(root: str | Path) -> list[dict]:
    """Write ``summary.csv`` and ``summary.md`` under ``root``; returns the rows."""
    root = Path(root)
    rows = collect(root)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: _cell(r[k]) for k in COLUMNS} for r in rows)
    write_atomic(root / "summary.csv", buf.getvalue())
    md = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    md += ["| " + " | ".join(_cell(r[k]) for k in COLUMNS) + " |" for r in rows]
    write_atomic(root / "summary.md", "\n".join(md) + "\n")
    return rows
