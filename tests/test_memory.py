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


# 128 MiB of touched heap blocks (64 KiB: below glibc's mmap threshold) freed but for the top
# one, which keeps free() from shrinking the heap; prints the MiB release_free_memory returns.
TRIM = """
import ctypes, ctypes.util, os, trainer.memory
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss_kib():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
blocks = [libc.malloc(64 << 10) for _ in range(2048)]
for b in blocks:
    ctypes.memset(b, 1, 64 << 10)
for b in blocks[:-1]:
    libc.free(b)
before = rss_kib()
trainer.memory.release_free_memory()
print((before - rss_kib()) // 1024)
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim")
def test_normlab_malloc_default_turns_off_the_trim_too():
    trimmed = int(_python(TRIM))
    untouched = int(_python(TRIM, NORMLAB_MALLOC="default"))
    assert trimmed > 64, trimmed  # malloc_trim hands the freed heap pages back
    assert untouched < 8, untouched  # glibc's own behaviour: they stay with the process


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
