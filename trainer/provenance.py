"""Which code made a run: the git commit of this checkout and whether its tree is modified.

The training loop records both in meta.json (``trainer.train.rundir.collect_meta``);
``reproduce`` compares them with the checkout it runs from. An output that is not a run (a
checkpoint analysis) gets the same record beside it, ``NAME.meta.json`` (``write_stamp``), which
the findings page's Provenance reads (``read_stamp``).
"""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path

from trainer.atomic import read_json, write_json


def git(*args: str, cwd: str | Path | None = None) -> str:
    """``git ARGS`` run in this package's checkout (or ``cwd``'s); "" when git or the checkout is
    missing."""
    here = Path(cwd) if cwd is not None else Path(__file__).resolve().parent
    try:
        return subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_sha() -> str | None:
    """The checkout's HEAD commit (None outside a git checkout)."""
    return git("rev-parse", "HEAD") or None


def git_dirty(cwd: str | Path | None = None) -> bool:
    """Whether tracked files outside ``results/`` differ from HEAD: the code, configs and scripts.
    Untracked files do not change the code, and neither do the committed results a command is
    rewriting (an analysis rerun into ``results/reference/analysis`` modifies tracked outputs
    before its own stamp is written)."""
    return bool(git("status", "--porcelain", "--untracked-files=no", "--",
                    ":(top)", ":(top,exclude)results", cwd=cwd))


def short_sha(sha, digits: int = 7) -> str:
    """A git commit's first ``digits`` hex digits, or "unknown"."""
    return str(sha)[:digits] if sha else "unknown"


def stamp_path(output: str | Path) -> Path:
    """Where the record of ``output`` (``NAME.csv``) lives: ``NAME.meta.json`` beside it."""
    return Path(output).with_suffix(".meta.json")


def write_stamp(output: str | Path, command: list[str]) -> None:
    """Record beside ``output`` the commit and tree state that made it, and its command line."""
    write_json(stamp_path(output), {
        "git_sha": git_sha(), "git_dirty": git_dirty(), "command": list(command),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds")})


def commit_label(meta: dict | None) -> str:
    """``meta``'s commit as the findings page shows it: its first 12 hex digits, "unknown"
    without one, "(dirty)" after one whose tree was modified."""
    meta = meta or {}
    return f"`{short_sha(meta.get('git_sha'), 12)}`{' (dirty)' if meta.get('git_dirty') else ''}"


def read_stamp(output: str | Path) -> dict | None:
    """The record ``write_stamp`` left beside ``output``; None when there is none."""
    return read_json(stamp_path(output)) or None
