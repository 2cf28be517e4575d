"""``bench sweep``: the old and new sweep paths side by side, on a tiny spec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli, tiny_spec

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_sweep_compares_paths_and_their_numbers(tmp_path):
    spec = tiny_spec(tmp_path / "spec.yaml", "  model.norm: [batch]\n", "seeds: [0, 1]\n")
    out = tmp_path / "bench_sweep.json"
    proc = subprocess.run([sys.executable, "-m", "trainer", "bench", "sweep", str(spec),
                           "--parallel", "1", "--no-rerun", "--out", str(out), "--workdir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    paths = json.loads(out.read_text())["paths"]
    assert set(paths) == {"baseline", "workers"}  # "rerun" too without --no-rerun
    base, workers = paths["baseline"], paths["workers"]
    assert base["runs"] == workers["runs"] == 2
    # The old path compiles every program in every run; the workers' second seed loads the
    # first seed's programs (same shapes, same network), with a fresh cache.
    assert base["loaded"] == 0 and base["compiled"] > 0
    total = base["compiled"]
    assert workers["compiled"] + workers["loaded"] == total
    assert 0 < workers["loaded"] and workers["compiled"] == total // 2
    # A variant run by a worker's forked child (after another, cache on) gives the numbers of
    # its own process without the cache: every curve but tokens/s, every result, bit for bit.
    assert workers["identical_to_baseline"], workers["differences"]
    assert all(0 < p["train_share"] < 1 for p in paths.values())
    assert "workers" in proc.stdout and "identical" in proc.stdout


def test_bench_sweep_refuses_a_missing_spec(tmp_path):
    proc = run_cli("bench", "sweep", tmp_path / "nope.yaml", "--out", tmp_path / "o.json")
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("error:") and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()
