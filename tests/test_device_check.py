"""``scripts/device_check.sh --dry-run``: the device check's plumbing on a CPU (tiny sizes)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "device_check.sh"


def _run(args: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow  # about 70 s on 2 busy cores (a bench, a training run and a sweep)
def test_dry_run_writes_every_section(tmp_path):
    res = _run(["--dry-run", "--out", str(tmp_path)])
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads((tmp_path / "gpu.json").read_text())
    assert r["dry_run"] is True and r["machine"]["versions"]["tensorflow"]
    for name in ("bench", "sweep"):
        assert r[name]["exit_code"] == 0 and r[name]["wall_s"] > 0, name
    assert set(r["bench"]["report"]["targets"]) >= {"telemetry_overhead", "mfu", "peak_rss"}
    assert len(r["bench"]["report"]["telemetry_overhead"]["pairs"]) == 2
    assert r["mirrored"] == {"skipped": "0 GPU(s) visible; a 2-replica run needs 2"}
    assert len(r["sweep"]["runs"]) == 1 and "|" in r["sweep"]["summary_md"]
    assert r["total_s"] >= r["bench"]["wall_s"] + r["sweep"]["wall_s"] - 1e-6


def test_help_and_bad_arguments():
    res = _run(["--help"], timeout=30)
    assert res.returncode == 0 and "--dry-run" in res.stdout and "gpu.json" in res.stdout
    for bad in (["--tokens-per-batch", "0"], ["--frobnicate"], ["--out"]):
        res = _run(bad, timeout=30)
        assert res.returncode == 2 and res.stderr.startswith("error: "), bad
