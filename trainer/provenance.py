"""Which code made a run: the git commit of this checkout and whether its tree is modified.

The training loop records both in meta.json (``trainer.train.rundir.collect_meta``);
``reproduce`` compares them with the checkout it runs from.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(*args: str) -> str:
    """``git ARGS`` run in this package's checkout; "" when git or the checkout is missing."""
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_sha() -> str | None:
    """The checkout's HEAD commit (None outside a git checkout)."""
    return git("rev-parse", "HEAD") or None


def git_dirty() -> bool:
    """Whether tracked files differ from HEAD (untracked files do not change the code)."""
    return bool(git("status", "--porcelain", "--untracked-files=no"))
