"""Allocator settings (trainer.memory): big buffers reuse heap pages; arithmetic is unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]

# Allocate, free and reallocate a 128 MiB buffer (the size of the default config's logits);
# count the page faults of the reallocations. Importing trainer alone must not change the
# process's allocator ({setup} empty); a run applies the settings where it starts.
FAULTS = """
import resource, numpy as np, trainer, trainer.memory
{setup}
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(1 << 25, np.float32); del a
before = faults()
for _ in range(3):
    a = np.ones(1 << 25, np.float32); del a
print(faults() - before)
"""


def _python(code: str, **env) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=120, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc settings")
def test_run_allocator_settings_make_big_buffers_reuse_their_pages():
    setup = "trainer.memory.keep_large_blocks()"
    tuned = int(_python(FAULTS.format(setup=setup)))
    default = int(_python(FAULTS.format(setup=setup), NORMLAB_MALLOC="default"))
    imported = int(_python(FAULTS.format(setup="")))
    # default glibc: every reallocation is a fresh mmap, faulted in page by page
    assert default > 100 and tuned < default / 10, (tuned, default)
    assert imported > 100, "importing trainer changed the allocator"


@pytest.mark.slow
def test_allocator_settings_do_not_change_the_numbers(tmp_path):
    """The same tiny run with glibc's default allocator behaviour gives bit-identical results."""
    summaries = {}
    for mode in ("tuned", "default"):
        run_dir = tmp_path / mode
        subprocess.run([sys.executable, "-m", "trainer", "train", "--config", "configs/base.yaml",
                        "--workdir", str(run_dir), "--quiet", *TINY], cwd=ROOT, check=True,
                       timeout=600, capture_output=True,
                       env={**os.environ, "NORMLAB_MALLOC": mode})
        summaries[mode] = json.loads((run_dir / "summary.json").read_text())
    for key in ("final_eval_loss", "max_grad_norm", "last_finite", "probes"):
        assert summaries["tuned"][key] == summaries["default"][key], key
