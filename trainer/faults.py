"""Faults a run survives, as the project's own error types and documented exit codes.

Every error the user can act on derives from ``ProjectError`` and carries its exit code
(``ConfigError``, ``DataError``, ``SweepFailed``: 2; ``RunBusyError``: ``EXIT_BUSY``; ...);
``report`` turns one into a line on stderr and that code, in the one place the command line
and a sweep worker's children share. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Callable

# Exit codes (sysexits.h), documented in docs/troubleshooting.md.
EXIT_BUSY = 73  # the run directory is locked by another live process ("running elsewhere")
EXIT_IO = 74  # a write failed (disk full, permissions, ...); the last checkpoint is intact
EXIT_STOPPED = 75  # pre-empted (SIGTERM/SIGINT) after a checkpoint: rerun the same command
EXIT_INTERRUPTED = 130  # Ctrl-C outside a run's own handler (the shell's 128 + SIGINT)


class ProjectError(Exception):
    """An error the user can act on: printed as ``error: MESSAGE``, one line, exit ``exit_code``."""

    exit_code = 2


class RunIOError(ProjectError):
    """Writing part of a run failed; the message says what, where and why."""

    exit_code = EXIT_IO


class Stopped(ProjectError):
    """Work stopped early but resumably (pre-emption); the message is the one line to print."""

    exit_code = EXIT_STOPPED


def report(command: Callable[[], int | None]) -> int:
    """Run ``command()`` and return its exit code (None is 0); a ``ProjectError`` it raises is
    printed on stderr as one line and exits with its code, Ctrl-C with ``EXIT_INTERRUPTED``."""
    try:
        return command() or 0
    except Stopped as e:  # pre-empted after a checkpoint (a sweep: some variants were)
        print(e, file=sys.stderr)
        return e.exit_code
    except ProjectError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED


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


def _write_errors() -> tuple[type[BaseException], ...]:
    """OSError, and TensorFlow's I/O error when TensorFlow is loaded (only then can a write
    raise it): this module never imports TensorFlow itself."""
    tf = sys.modules.get("tensorflow")
    return (OSError, tf.errors.OpError) if tf is not None else (OSError,)


@contextlib.contextmanager
def writing(what: str, path: str | os.PathLike):
    """Turn an ``OSError`` or TensorFlow I/O error raised inside into a ``RunIOError`` naming
    ``what`` was being written, ``path`` and the reason (e.g. "No space left on device")."""
    try:
        yield
    except _write_errors() as e:  # evaluated as the error arrives: TF is loaded if it raised
        raise RunIOError(f"cannot write {what} ({path}): {_reason(e)}") from e
