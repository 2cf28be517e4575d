"""Host memory allocator settings for XLA on CPU (glibc only; a no-op elsewhere).

XLA's CPU runtime allocates a step's temporary buffers afresh on every execution. The largest
(the logits and their gradient, B*T x vocab floats: 128 MiB at the default config) are far
above glibc's mmap threshold, so each step mmaps them, the kernel zero-fills every page on
first touch, and the step munmaps them again. That page-fault traffic was a quarter of the
default step (734 -> 538 ms once removed, measured with one 16x256 train step on the 2-core CPU).
Keeping large blocks on the heap and not trimming the heap top lets every step reuse the same
pages. The price is memory the process keeps after freeing it; :func:`release_free_memory`
hands it back after one-off peaks (compiling a new shape), so the peak RSS does not grow.

Allocation never changes arithmetic: runs are bit-identical with or without these settings.
``NORMLAB_MALLOC=default`` turns all of it off (both thresholds and ``malloc_trim``): the
process runs on glibc's own behaviour.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

# mallopt(3) parameters
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_HEAP_LIMIT = 1 << 30  # blocks up to 1 GiB come from (and return to) the reusable heap

_libc = None


def _glibc():
    """glibc's libc when the allocator may be tuned; False elsewhere or with
    NORMLAB_MALLOC=default (read at each call)."""
    global _libc
    if os.environ.get("NORMLAB_MALLOC", "").lower() == "default":
        return False
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc = lib if hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim") else False
        except OSError:
            _libc = False
    return _libc


def keep_large_blocks() -> bool:
    """Serve big step buffers from the heap, not fresh mmaps. Off with NORMLAB_MALLOC=default.

    Returns whether the settings were applied."""
    libc = _glibc()
    if not libc:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, _HEAP_LIMIT)) and \
        bool(libc.mallopt(_M_TRIM_THRESHOLD, _HEAP_LIMIT))


def release_free_memory() -> None:
    """Return the allocator's free pages to the OS (after compiling, when garbage peaks);
    nothing with NORMLAB_MALLOC=default."""
    libc = _glibc()
    if libc:
        libc.malloc_trim(0)
