"""Peak RSS of a real training run (``python -m trainer train``) in a child process."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainer.bench.throughput import first_batch_of_every_shape
from trainer.rundir import SUMMARY


def steps_to_every_shape(corpus, cfg) -> int:
    """Steps a run needs until the stream has shown every bucket shape (and past warm-up)."""
    last = max(s for s, _ in first_batch_of_every_shape(corpus, cfg.train.seed).values())
    return max(last + 1, int(cfg.train.warmup_steps))


def measure_run_rss(config_path: str, overrides: list[str], steps: int) -> dict:
    """Peak RSS of a real training run (``python -m trainer train``) in a child process.

    ``steps`` is where the stream has shown every bucket shape: by then the run has compiled
    every train and eval program it will ever hold, and later steps reuse the same memory.
    """
    with tempfile.TemporaryDirectory(prefix="normlab-bench-") as tmp:
        cmd = [sys.executable, "-m", "trainer", "train", "--config", str(config_path),
               "--workdir", tmp, "--quiet", *overrides, f"train.steps={steps}"]
        t0 = time.perf_counter()
        # Through a small intermediate interpreter: a child forked straight from this (large)
        # process starts with its resident pages counted, and Linux keeps that high-water
        # mark across exec, so the run's ru_maxrss would read at least this process's RSS.
        hop = "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:]).returncode)"
        proc = subprocess.run([sys.executable, "-c", hop, *cmd], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"training child failed: {proc.stderr.strip()[-500:]}")
        summary = json.loads((Path(tmp) / SUMMARY).read_text())
    return {"command": ["python", *("<tmp>" if c == tmp else c for c in cmd[1:])], "steps": steps,
            "wall_s": time.perf_counter() - t0, "compile_count": summary["compile_count"],
            "peak_rss_bytes": int(summary["peak_rss_mb"] * 2**20)}
