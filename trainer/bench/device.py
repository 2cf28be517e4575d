"""``gpu.json`` of ``scripts/device_check.sh``: each section's exit code and wall time, and what it
measured (the bench report, the mirrored run's summary, the sweep's table).

``python -m trainer.bench.device WORK OUT --gpus N --dry-run 0|1``; WORK is the script's
``device_check`` directory (``timings.tsv``: name, exit code, seconds per line).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SECTIONS = ("bench", "mirrored", "sweep")


def _timings(work: Path) -> dict:
    rows = [line.split("\t") for line in (work / "timings.tsv").read_text().splitlines() if line]
    return {name: {"exit_code": int(rc), "wall_s": float(s)} for name, rc, s in rows}


def collect(work: Path, gpus: int, dry_run: bool) -> dict:
    """The device check's JSON from the files the script left in ``work``."""
    import trainer
    from trainer.bench.runner import machine_block
    from trainer.atomic import read_json
    from trainer.rundir import SUMMARY, SUMMARY_MD

    t = _timings(work)
    out = {"dry_run": dry_run, "gpus_visible": gpus,
           "machine": machine_block(trainer.import_tensorflow_quietly()),
           "total_s": sum(s["wall_s"] for s in t.values())}
    out["bench"] = {**t["bench"], "report": read_json(work / "bench.json") or None}
    out["mirrored"] = ({**t["mirrored"], "replicas": 2,
                        "summary": read_json(work / "mirrored" / SUMMARY) or None}
                       if "mirrored" in t else
                       {"skipped": f"{gpus} GPU(s) visible; a 2-replica run needs 2"})
    table = work / "sweep" / SUMMARY_MD
    out["sweep"] = {**t["sweep"], "config": "configs/sweeps/quick.yaml",
                    "runs": sorted(p.parent.name for p in (work / "sweep").glob(f"*/{SUMMARY}")),
                    "summary_md": table.read_text() if table.exists() else None}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer.bench.device")
    p.add_argument("work", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--gpus", type=int, default=0)
    p.add_argument("--dry-run", type=int, choices=(0, 1), default=0)
    args = p.parse_args(argv)
    from trainer.atomic import write_json

    report = collect(args.work, args.gpus, bool(args.dry_run))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, report)
    print(f"wrote {args.out}: " + ", ".join(
        f"{k} {report[k]['wall_s']:.0f} s (exit {report[k]['exit_code']})"
        if "wall_s" in report[k] else f"{k} skipped" for k in SECTIONS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
