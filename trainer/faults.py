"""Faults a run survives, as the project's own error types and documented exit codes.

Only these types (and ``ConfigError``/``DataError``) become one-line messages in the CLI; any
other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import os
import re

# Exit codes (sysexits.h), documented in the README under "When things go wrong".
EXIT_BUSY = 73  # the run directory is locked by another live process ("running elsewhere")
EXIT_IO = 74  # a write failed (disk full, permissions, ...); the last checkpoint is intact
EXIT_STOPPED = 75  # pre-empted (SIGTERM/SIGINT) after a checkpoint: rerun the same command


class RunIOError(Exception):
    """Writing part of a run failed; the message says what, where and why."""


class Stopped(Exception):
    """Work stopped early but resumably (pre-emption); the message is the one line to print."""


def _reason(exc: BaseException) -> str:
    """The cause in a few words: "No space left on device", not TensorFlow's whole message."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    message = (getattr(exc, "message", None) or str(exc)).strip()
    if not message:
        return type(exc).__name__
    # TF I/O errors read "<temp file path>; <reason> [Op:SaveV2]": keep the reason.
    message = re.sub(r"\s*\[Op:\w+\]$", "", message.splitlines()[0])
    return message.rsplit("; ", 1)[-1]


@contextlib.contextmanager
def writing(what: str, path: str | os.PathLike):
    """Turn an ``OSError`` or TensorFlow I/O error raised inside into a ``RunIOError`` naming
    ``what`` was being written, ``path`` and the reason (e.g. "No space left on device")."""
    import tensorflow as tf  # only when a run writes: the CLI imports this module early

    try:
        yield
    except (OSError, tf.errors.OpError) as e:
        raise RunIOError(f"cannot write {what} ({path}): {_reason(e)}") from e
