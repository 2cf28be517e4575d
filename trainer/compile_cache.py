"""XLA's persistent compilation cache, shared by every run on this machine.

TensorFlow can persist the executables XLA builds for ``jit_compile`` functions, on CPU too
(``--tf_xla_persistent_cache_directory``): a later process that traces the same program (same
HLO, same shapes, same compiler) loads it instead of compiling. The seeds of a variant, a
rerun, a resume and ``reproduce`` trace the same programs; different variants do not. A
loaded executable is the one the compiler built, so results are unchanged (tested).

TensorFlow reads a cache entry it finds without checking it: a truncated entry (a full disk,
a kill while writing) fails the run with ``OutOfRangeError``. So TF never sees the store
itself. Each process gets a private staging directory holding links to the *verified* entries
(their SHA-256 recorded when they were promoted); entries TF writes there during the run
are promoted into the store, each written atomically with its checksum, when the run ends.
A corrupt or half-written entry is never offered to TF and is removed. The store is keyed by
TensorFlow version and CPU (model and instruction sets): an executable built for one CPU is
never loaded on another.

``NORMLAB_XLA_CACHE``: the store directory, or ``off``; default ``<cache>/xla`` next to the
data cache (``$NORMLAB_CACHE`` or ``~/.cache/normlab``). It must be enabled before TensorFlow
initialises XLA, so the command line does it first thing (``enable``).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import psutil

from trainer.atomic import atomic_write, write_atomic

ENV = "NORMLAB_XLA_CACHE"
MAX_MB = 4096  # the store keeps its newest entries up to this size
_SUFFIX = ".sha256"
_state: dict = {}  # this process: {"store": Path, "staging": Path, "offered": set[str]}


def store_dir() -> Path | None:
    """This machine's store, or None when the cache is off."""
    value = os.environ.get(ENV, "")
    if value.lower() in ("off", "0", "false", "no"):
        return None
    root = Path(value) if value else Path(os.environ.get("NORMLAB_CACHE") or
                                          "~/.cache/normlab").expanduser() / "xla"
    from trainer.machine import _cpuinfo

    model, flags, _ = _cpuinfo()
    try:
        tf_version = metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        tf_version = "unknown"
    cpu = hashlib.sha256(f"{model}|{' '.join(flags)}".encode()).hexdigest()[:12]
    return root / f"tf{tf_version}-cpu{cpu}"


def enable() -> Path | None:
    """Point TensorFlow at a fresh staging directory of verified entries (before TF starts
    XLA). Returns the store, or None when the cache is off or cannot be used (a read-only or
    full disk costs compile time, never the run)."""
    if _state:
        return _state["store"]
    # A parent's cache flags (inherited environment) give way to this process's own choice.
    kept = [f for f in os.environ.get("TF_XLA_FLAGS", "").split()
            if not f.startswith("--tf_xla_persistent_cache")]
    os.environ["TF_XLA_FLAGS"] = " ".join(kept)
    store = store_dir()
    if store is None:
        return None
    try:
        store.mkdir(parents=True, exist_ok=True)
        _remove_stale_staging(store)
        staging = Path(tempfile.mkdtemp(dir=store, prefix=f".staging-{os.getpid()}-"))
        offered = set()
        for entry in _verified(store):
            _link(entry, staging / entry.name)
            offered.add(entry.name)
    except OSError:
        return None
    os.environ["TF_XLA_FLAGS"] = " ".join(
        [*kept, f"--tf_xla_persistent_cache_directory={staging}",
         "--tf_xla_persistent_cache_device_types=CPU,XLA_CPU,GPU,XLA_GPU,TPU"])
    _state.update(store=store, staging=staging, offered=offered)
    atexit.register(close)
    return store


def snapshot() -> set[str]:
    """Names of the entries in this process's staging directory now (empty when off)."""
    staging = _state.get("staging")
    if staging is None or not staging.is_dir():
        return set()
    return {p.name for p in staging.glob("*.pb")}


def account(traced: int, before: set[str]) -> dict:
    """Of ``traced`` programs since ``before`` (a ``snapshot``): how many XLA compiled here
    (new entries) and how many were loaded from the cache. Without the cache, all compiled."""
    if not _state:
        return {"compiled": traced, "loaded": 0, "cache": False}
    compiled = len(snapshot() - before)
    return {"compiled": compiled, "loaded": max(traced - compiled, 0), "cache": True}


def promote() -> int:
    """Copy the entries XLA wrote in this process into the store (atomic, with checksum).
    Returns how many were added; I/O errors leave the store as it was."""
    if not _state:
        return 0
    store, staging = _state["store"], _state["staging"]
    added = 0
    for entry in sorted(staging.glob("*.pb")):
        if entry.name in _state["offered"] or (store / entry.name).exists():
            continue
        try:
            data = entry.read_bytes()
            write_atomic(store / (entry.name + _SUFFIX), hashlib.sha256(data).hexdigest())
            atomic_write(store / entry.name, lambda tmp: Path(tmp).write_bytes(data))
            _state["offered"].add(entry.name)
            added += 1
        except OSError:
            break
    _trim(store)
    return added


def close() -> None:
    """Promote what this process compiled and remove its staging directory."""
    if _state:
        promote()
        shutil.rmtree(_state["staging"], ignore_errors=True)
        _state.clear()


def _verified(store: Path) -> list[Path]:
    """Entries whose checksum matches; anything else is removed (corrupt or half-written)."""
    good = []
    for entry in store.glob("*.pb"):
        sidecar = entry.with_name(entry.name + _SUFFIX)
        try:
            ok = sidecar.read_text().strip() == hashlib.sha256(entry.read_bytes()).hexdigest()
        except OSError:
            ok = False
        if ok:
            good.append(entry)
        else:
            for path in (entry, sidecar):
                path.unlink(missing_ok=True)
    return good


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def _remove_stale_staging(store: Path) -> None:
    """Staging directories of processes that are gone (killed before ``close``)."""
    for staging in store.glob(".staging-*"):
        try:
            pid = int(staging.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if not psutil.pid_exists(pid):
            shutil.rmtree(staging, ignore_errors=True)


def _trim(store: Path) -> None:
    """Drop the oldest entries beyond ``MAX_MB``."""
    entries = sorted(store.glob("*.pb"), key=lambda p: p.stat().st_mtime, reverse=True)
    total = 0
    for entry in entries:
        total += entry.stat().st_size
        if total > MAX_MB * 2**20:
            for path in (entry, entry.with_name(entry.name + _SUFFIX)):
                path.unlink(missing_ok=True)
