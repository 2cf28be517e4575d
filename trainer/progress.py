"""A sweep's progress on the console: one bar in training steps over its variants, and what
the variants print written above the bar (``tqdm.write``), never glued onto it.

Each launcher slot of a local sweep (``trainer.launch.run_local``) has a ``Feed``: three pipes
that the variants it runs write to, a worker's forked children inheriting them. Their stdout
and stderr are relayed line by line to the sweep's own; the third, whose descriptor is in
``$NORMLAB_PROGRESS_FD``, carries the steps done, written by the training loop
(``StepReporter``) and counted on the sweep's bar (``StepBar``). A run started any other way
has no such variable, and reports nothing.
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time

from tqdm.auto import tqdm

ENV = "NORMLAB_PROGRESS_FD"
INTERVAL_S = 0.2  # the loop writes its step count at most this often (and at the end)
REDRAW_S = 1.0  # the sweep's bar is redrawn at least this often: its clock runs while runs compile


class StepReporter:
    """The training loop's side: ``reporter(step)`` writes the steps done to the launcher's
    steps pipe, at most every ``INTERVAL_S`` unless ``force``. It never blocks and never fails
    a run: a full or closed pipe drops the number."""

    def __init__(self, environ=os.environ):
        value = environ.get(ENV, "")
        self.fd = int(value) if value.isdigit() else None
        self.last = -INTERVAL_S
        if self.fd is not None:
            try:
                os.set_blocking(self.fd, False)
            except OSError:  # not an open descriptor here: nobody to report to
                self.fd = None

    def __call__(self, step: int, force: bool = False) -> None:
        now = time.monotonic()
        if self.fd is None or (not force and now - self.last < INTERVAL_S):
            return
        self.last = now
        try:
            os.write(self.fd, f"{step}\n".encode())
        except BlockingIOError:  # the sweep has not read the last ones yet: skip this one
            pass
        except OSError:  # the sweep is gone
            self.fd = None


class StepBar:
    """One bar over a sweep's variants in steps (``steps[i]``: variant i's ``train.steps``),
    with the variants ended as its postfix (``N/M runs``). Thread-safe: each launcher slot
    updates it."""

    def __init__(self, steps: list[int], desc: str):
        self.steps, self.done, self.ended = list(steps), [0] * len(steps), 0
        self.lock, self.drawn = threading.Lock(), time.monotonic()
        self.bar = tqdm(total=sum(self.steps), desc=desc, unit="step", dynamic_ncols=True,
                        postfix=self._runs())

    def _runs(self) -> str:
        return f"{self.ended}/{len(self.steps)} runs"

    def advance(self, i: int, step: int) -> None:
        """Variant ``i`` has done ``step`` steps (counted once however often it says so)."""
        with self.lock:
            step = min(step, self.steps[i])
            if step > self.done[i]:
                self.bar.update(step - self.done[i])
                self.done[i] = step

    def tick(self) -> None:
        """Redraw the bar at most every ``REDRAW_S``: tqdm draws only on updates, and its clock
        would stand still while variants start and compile."""
        with self.lock:
            if time.monotonic() - self.drawn >= REDRAW_S:
                self.bar.refresh()
                self.drawn = time.monotonic()

    def finish(self, i: int) -> None:
        """Variant ``i`` ended (completed, diverged early or failed): its steps are counted as
        done, so the bar reaches its total when the last variant ends."""
        self.advance(i, self.steps[i])
        with self.lock:
            self.ended += 1
            self.bar.set_postfix_str(self._runs())

    def write(self, line: str, file) -> None:
        """``line`` on ``file`` above the bar."""
        self.bar.write(line, file=file)

    def close(self) -> None:
        self.bar.close()


class Feed:
    """One launcher slot's pipes (module docstring): ``popen()`` gives the keyword arguments
    that hand them to a process; ``wait`` and ``poll`` relay what arrives while waiting for
    something else, ``ended`` what is left once the variant ``index`` ended."""

    def __init__(self, bar: StepBar):
        self.bar, self.index = bar, 0  # the variant the slot runs now
        steps, self.steps_w = os.pipe()
        out, self.out_w = os.pipe()
        err, self.err_w = os.pipe()
        self.streams = {steps: None, out: sys.stdout, err: sys.stderr}  # None: the steps pipe
        self.partial = {fd: b"" for fd in self.streams}
        for fd in self.streams:
            os.set_blocking(fd, False)

    def popen(self) -> dict:
        """``subprocess.Popen`` keyword arguments: stdout, stderr and the steps pipe."""
        return {"stdout": self.out_w, "stderr": self.err_w, "pass_fds": (self.steps_w,),
                "env": {**os.environ, ENV: str(self.steps_w)}}

    def poll(self, proc) -> int | None:
        """Relay for up to half a second; ``proc``'s exit code, None while it runs."""
        self.wait([], 0.5)
        return proc.poll()

    def wait(self, others: list, timeout: float) -> list:
        """Relay what arrives until one of ``others`` (files or descriptors) is readable or
        ``timeout`` passes; returns those readable."""
        ready = select.select([*self.streams, *others], [], [], timeout)[0]
        for fd in ready:
            if fd in self.streams:
                self._read(fd)
        self.bar.tick()
        return [f for f in ready if f not in self.streams]

    def ended(self, stopped: bool = False) -> None:
        """The slot's variant ended: what it printed, then all its steps counted, unless it
        was ``stopped`` (pre-empted, or never started): then only those it reported."""
        self.drain()
        if not stopped:
            self.bar.finish(self.index)

    def drain(self) -> None:
        """Relay everything written so far, a last line without its newline included."""
        for fd, stream in self.streams.items():
            while self._read(fd):
                pass
            if self.partial[fd] and stream is not None:
                self.bar.write(self.partial[fd].decode(errors="replace"), stream)
            self.partial[fd] = b""

    def _read(self, fd: int) -> bool:
        """Read what ``fd`` holds, relay its whole lines; False when it held nothing."""
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return False
        if not data:
            return False
        *lines, self.partial[fd] = (self.partial[fd] + data).split(b"\n")
        stream = self.streams[fd]
        if stream is None:  # the steps pipe: the last number is the one that counts
            if lines and lines[-1].strip().isdigit():
                self.bar.advance(self.index, int(lines[-1]))
        else:
            for line in lines:
                self.bar.write(line.decode(errors="replace"), stream)
        return True

    def close(self) -> None:
        """Relay what is left and close the pipes."""
        self.drain()
        for fd in [*self.streams, self.steps_w, self.out_w, self.err_w]:
            os.close(fd)
