"""Pre-emption: SIGTERM (what SLURM and Kubernetes send) or SIGINT become a flag the loop polls.

The loop finishes the step it is in, checkpoints at that step and stops with ``Stopped``; the
CLI prints one line and exits ``EXIT_STOPPED``. A second Ctrl-C interrupts at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading


class StopFlag:
    """Set by a signal handler, read by the loop once per step."""

    def __init__(self):
        self.signal: int | None = None

    @property
    def requested(self) -> bool:
        return self.signal is not None


@contextlib.contextmanager
def stop_requests():
    """Install SIGTERM/SIGINT handlers that set the yielded ``StopFlag``; restore them on exit.

    Outside the main thread (where Python cannot install handlers) the flag is never set and
    signals keep their previous behaviour.
    """
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag.requested and signum == signal.SIGINT == flag.signal:
            raise KeyboardInterrupt  # Ctrl-C twice: the user does not want to wait for the step
        flag.signal = flag.signal or signum  # a sweep may forward SIGTERM after a group Ctrl-C

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
