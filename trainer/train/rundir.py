"""Writing a run directory (its names: ``trainer.rundir``): the lock and the saved config, what
an existing directory holds for a config, the provenance that goes into meta.json, and the
tokenizer and fixed prompts that make the directory usable without its data
(``save_text_files``, read back by ``load_tokenizer`` and ``load_prompts``)."""

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
from trainer.faults import EXIT_BUSY, writing
from trainer.machine import machine_identity, versions
from trainer.provenance import git_dirty, git_sha

__all__ = ["LOCK_RETRY_S", "RunDirError", "RunBusyError", "collect_meta",
           "inspect_run_dir", "is_locked", "load_prompts", "load_tokenizer", "run_lock",
           "save_text_files"]

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


def norm_contract_checks(norm: str, model) -> dict | None:
    """A norm from outside the lab: the norm contract's init-time checks on the run's own
    model (``trainer.telemetry.contract.measure``: causal, batch- and padding-invariant,
    train = inference, decode = forward; a few seconds, nothing of the model changed), for
    meta.json's ``norm_checks``, and one warning line on stderr naming each check that fails.
    None for a lab norm (their properties are declared and tested)."""
    from trainer.models import plugin

    if not plugin.is_plugin(norm):
        return None
    from trainer.telemetry.contract import measure

    checks = measure(model)
    failed = [name for name, check in checks.items() if not check["holds"]]
    if failed:
        print(f"warning: {norm} fails the norm contract at init: {', '.join(failed)} "
              f"(meta.json norm_checks; python -m trainer evaluate-norm {norm} tells more)",
              file=sys.stderr)
    return checks


def save_text_files(run_dir: Path, tok, prompts: list[list[int]]) -> None:
    """Write ``RUN_DIR/tokenizer.json`` (exactly ``tok.to_str()``: its sha256 prefix is
    meta.json's ``tokenizer_hash``) and ``RUN_DIR/prompts.json`` (the ids of the fixed
    validation ``prompts``), each atomically."""
    path = Path(run_dir) / rundir.TOKENIZER
    with writing("the tokenizer", path):
        write_text(path, tok.to_str())
    write_json(Path(run_dir) / rundir.PROMPTS, {"validation": prompts})


def load_tokenizer(run_dir: Path):
    """The run's ``tokenizers.Tokenizer`` from ``RUN_DIR/tokenizer.json``; None when the run was
    made before runs saved it. A ``RunDirError`` when it does not hash to meta.json's
    ``tokenizer_hash`` (the file is not this run's tokenizer)."""
    from tokenizers import Tokenizer

    from trainer.data.tokenizer import tokenizer_hash

    path = Path(run_dir) / rundir.TOKENIZER
    if not path.is_file():
        return None
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - tokenizers raises its own Exception type
        raise RunDirError(f"cannot read {path}: {e}") from None
    want = read_json(Path(run_dir) / rundir.META).get("tokenizer_hash")
    if want and tokenizer_hash(tok) != want:
        raise RunDirError(f"{path} hashes to {tokenizer_hash(tok)}, but the run was trained with "
                          f"tokenizer {want} (meta.json): it is not this run's tokenizer")
    return tok


def load_prompts(run_dir: Path) -> list[list[int]] | None:
    """The ids of the run's fixed validation prompts (``RUN_DIR/prompts.json``); None when the
    run was made before runs saved them."""
    prompts = read_json(Path(run_dir) / rundir.PROMPTS).get("validation")
    return None if prompts is None else [[int(i) for i in p] for p in prompts]
