"""The self-describing run directory: config.yaml, meta.json, summary.json (atomic writes)."""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from omegaconf import OmegaConf

from trainer.config import ConfigError, to_yaml

PACKAGES = ("tensorflow", "keras", "tensorboard", "datasets", "tokenizers", "gensim", "omegaconf",
            "numpy")


class RunDirError(ConfigError):
    """The run directory cannot be used as asked (different config, unwritable, ...)."""


def write_atomic(path: Path, text: str) -> None:
    """Write via a temp file + rename so readers never see half a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj: dict) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def open_run_dir(run_dir: Path, cfg) -> str:
    """Create ``run_dir`` for ``cfg`` or accept it for resuming.

    Returns "new", "resume" (same config, unfinished) or "completed" (same config, done).
    A directory holding a different config is refused: its results must not be mixed.
    """
    run_dir = Path(run_dir)
    saved = run_dir / "config.yaml"
    if saved.exists():
        if OmegaConf.load(saved) != OmegaConf.create(to_yaml(cfg)):
            raise RunDirError(
                f"{run_dir} holds a run with a different config; rerun with the config in "
                f"{saved} to resume it, or choose a new --workdir")
        status = read_json(run_dir / "summary.json").get("status")
        return "completed" if status in ("completed", "diverged") else "resume"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(saved, to_yaml(cfg))
    except OSError as e:
        raise RunDirError(f"cannot write the run directory {run_dir}: {e.strerror}") from None
    return "new"


def _git(*args: str) -> str:
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def collect_meta(cfg, argv: list[str], data_info: dict) -> dict:
    """Everything needed to tell where a run came from and to rerun it."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "git_sha": _git("rev-parse", "HEAD") or None,
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "packages": versions,
        "python": sys.version.split()[0],
        "command": argv,
        "seed": cfg.train.seed,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **data_info,
    }
