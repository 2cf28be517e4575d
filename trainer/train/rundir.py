"""Writing a run directory (its names: ``trainer.rundir``): the lock and the saved config, what
an existing directory holds for a config, and the provenance that goes into meta.json."""

from __future__ import annotations

import contextlib
import fcntl
import platform
import socket
import sys
import time
from pathlib import Path

from trainer import rundir
from trainer.atomic import read_json, write_json, write_text
from trainer.config import ConfigError, load_config, to_dict, to_yaml
from trainer.faults import EXIT_BUSY
from trainer.machine import machine_identity, versions
from trainer.provenance import git_dirty, git_sha

# read_json/write_json live in trainer.atomic; the training loop imports them from here.
__all__ = ["LOCK_RETRY_S", "RunDirError", "RunBusyError", "collect_meta",
           "inspect_run_dir", "is_locked", "read_json", "run_lock", "write_json"]

class RunDirError(ConfigError):
    """The run directory cannot be used as asked (different config, unwritable, ...)."""


class RunBusyError(RunDirError):
    """Another live process holds the run's lock: the run is being written elsewhere."""

    exit_code = EXIT_BUSY  # a sweep counts the variant as running elsewhere


# How long run_lock retries a held lock before refusing: a sweep's probe (is_locked) holds it
# for microseconds and must never make a real run be refused.
LOCK_RETRY_S = 1.0


def inspect_run_dir(run_dir: Path, cfg) -> str:
    """What ``run_dir`` holds for ``cfg``: "new", "resume" (same config, unfinished), or the
    status of the same config's finished run, "completed" or "diverged" (``rundir.FINISHED``).
    Reads only.

    A directory holding a different config is refused: its results must not be mixed.
    """
    run_dir = Path(run_dir)
    saved = run_dir / rundir.CONFIG
    if not saved.exists():
        return "new"
    if _as_today(saved) != to_dict(cfg):
        raise RunDirError(
            f"{run_dir} holds a run with a different config; rerun with --config {saved} to "
            f"resume it, or choose a new --workdir")
    status = read_json(run_dir / rundir.SUMMARY).get("status")
    return status if status in rundir.FINISHED else "resume"


def _as_today(saved: Path) -> dict | None:
    """A saved config as the schema reads it today (None if it no longer loads): a key added
    since the run was made takes its default, which is how the run was made (a new key's
    default keeps existing runs unchanged, e.g. data.corpus=wikipedia)."""
    try:
        return to_dict(load_config(saved))
    except ConfigError:
        return None


@contextlib.contextmanager
def run_lock(run_dir: Path, cfg):
    """Create ``run_dir`` (saving the resolved config) and hold an exclusive lock on it.

    A second process asked to write the same run (two sweeps over one results dir) is refused
    instead of interleaving its checkpoints and curves with the first one's.
    """
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = open(run_dir / rundir.LOCK, "a+")
    except OSError as e:
        raise RunDirError(f"cannot write the run directory {run_dir}: {e.strerror}") from None
    with lock:
        deadline = time.monotonic() + LOCK_RETRY_S
        while not _try_lock(lock):
            if time.monotonic() > deadline:
                raise RunBusyError(f"{run_dir} is being written by another process; wait for it "
                                   f"or choose a new --workdir")
            time.sleep(0.05)
        if not (run_dir / rundir.CONFIG).exists():
            write_text(run_dir / rundir.CONFIG, to_yaml(cfg))
        yield run_dir


def _try_lock(lock) -> bool:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def is_locked(run_dir: Path) -> bool:
    """Whether another live process holds ``run_dir``'s lock (reads only; never blocks)."""
    path = Path(run_dir) / rundir.LOCK
    try:
        with open(path, "r") as lock:
            if not _try_lock(lock):
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
            return False
    except OSError:  # no lock file: nobody has started this run
        return False


def collect_meta(cfg, argv: list[str], data_info: dict) -> dict:
    """Everything needed to tell where a run came from and to rerun it."""
    return {
        "git_sha": git_sha(),
        "git_dirty": git_dirty(),
        "packages": versions(),
        "python": sys.version.split()[0],
        "command": argv,
        "seed": cfg.train.seed,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "machine": machine_identity(),  # what decides bit-identity on CPU (reproduce reads it)
        "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **data_info,
    }
