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
A corrupt or half-written entry is never offered to TF and is removed. The store is keyed
(``store_key``) by TensorFlow version, CPU (model and instruction sets) and the accelerators the
process sees (GPU model and compute capability, TPU type): an executable built for one CPU or
GPU is never loaded on another.

The stores live under the lab's cache root (``trainer.cache``: ``data.cache_dir``, else
``$NORMLAB_CACHE``, else ``~/.cache/normlab``), in ``xla/``. ``NORMLAB_XLA_CACHE=off`` turns the
cache off; a directory there replaces ``<root>/xla`` (a benchmark's or a test's private store).
It must be enabled before TensorFlow initialises XLA, so the command line does it first thing
(``enable``), before it has read a config; ``follow`` then moves to the store under the run's
own ``data.cache_dir`` before the first program compiles.
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

from trainer import cache
from trainer.atomic import write_bytes, write_text

ENV = "NORMLAB_XLA_CACHE"
MAX_MB = 4096  # the store keeps its newest entries up to this size
_SUFFIX = ".sha256"
_state: dict = {}  # this process: {"store": Path, "staging": Path, "offered": set[str]}


def store_key(tf_version: str, cpu_model: str | None, cpu_flags: list[str],
              accelerators: list[str]) -> str:
    """The store's name for a TensorFlow version, a CPU (model, instruction sets) and the
    visible accelerators (``trainer.machine.visible_accelerators``; any order). CPU-only:
    ``tf<version>-cpu<hash>``; with accelerators ``-acc<hash>`` is added."""
    cpu = hashlib.sha256(f"{cpu_model}|{' '.join(cpu_flags)}".encode()).hexdigest()[:12]
    key = f"tf{tf_version}-cpu{cpu}"
    if accelerators:
        key += "-acc" + hashlib.sha256("|".join(sorted(accelerators)).encode()).hexdigest()[:12]
    return key


def store_dir(cache_dir: str | os.PathLike | None = None) -> Path | None:
    """This machine's store under the cache root of ``cache_dir`` (a config's
    ``data.cache_dir``), or None when the cache is off."""
    value = os.environ.get(ENV, "")
    if value.lower() in ("off", "0", "false", "no"):
        return None
    root = Path(value) if value else cache.root(cache_dir, create=False) / cache.XLA
    from trainer.machine import _cpuinfo, visible_accelerators

    model, flags, _ = _cpuinfo()
    try:
        tf_version = metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        tf_version = "unknown"
    return root / store_key(tf_version, model, flags, visible_accelerators())


def enable(cache_dir: str | os.PathLike | None = None) -> Path | None:
    """Point TensorFlow at a fresh staging directory of verified entries (before TF starts
    XLA). Returns the store, or None when the cache is off or cannot be used (a read-only or
    full disk costs compile time, never the run)."""
    if _state:
        return _state["store"]
    # A parent's cache flags (inherited environment) give way to this process's own choice.
    kept = [f for f in os.environ.get("TF_XLA_FLAGS", "").split()
            if not f.startswith("--tf_xla_persistent_cache")]
    os.environ["TF_XLA_FLAGS"] = " ".join(kept)
    store = store_dir(cache_dir)
    if store is None:
        return None
    try:
        store.mkdir(parents=True, exist_ok=True)
        _remove_stale_staging(store)
        staging = Path(tempfile.mkdtemp(dir=store, prefix=f".staging-{os.getpid()}-"))
        offered = _offer(store, staging)
    except OSError:
        return None
    os.environ["TF_XLA_FLAGS"] = " ".join(
        [*kept, f"--tf_xla_persistent_cache_directory={staging}",
         "--tf_xla_persistent_cache_device_types=CPU,XLA_CPU,GPU,XLA_GPU,TPU"])
    _state.update(store=store, staging=staging, offered=offered)
    atexit.register(close)
    return store


def follow(cache_dir: str | os.PathLike | None) -> Path | None:
    """Use the store under ``cache_dir`` (the run's ``data.cache_dir``) from now on, when the
    cache is enabled: its entries join the staging directory (TF looks entries up when it
    compiles, so this works until the first compilation) and new programs are promoted into
    it. Returns the store in use (None when the cache is off)."""
    if not _state or cache_dir is None:
        return _state.get("store")
    store = store_dir(cache_dir)
    if store is None or store == _state["store"]:
        return _state["store"]
    try:
        store.mkdir(parents=True, exist_ok=True)
        _state["offered"] |= _offer(store, _state["staging"])
    except OSError:
        return _state["store"]  # the process's store stays in use
    _state["store"] = store
    return store


def _offer(store: Path, staging: Path) -> set[str]:
    """Link the store's verified entries into ``staging``; their names."""
    offered = set()
    for entry in _verified(store):
        if not (staging / entry.name).exists():
            _link(entry, staging / entry.name)
        offered.add(entry.name)
    return offered


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
            write_text(store / (entry.name + _SUFFIX), hashlib.sha256(data).hexdigest())
            write_bytes(store / entry.name, data)
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
