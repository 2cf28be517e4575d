"""Where a run's wall time goes: data, compilation, train steps, evaluation, checkpoints.

Every number is wall-clock seconds of the process that finished the run (a resumed run counts
its last process only). ``wall`` starts at the process start for the first run of a process
(a ``train`` command: interpreter and TensorFlow import included), at ``run_training`` for any
later run in the same process (tests, notebooks). ``train`` is the time inside train steps that did not compile a new
shape; ``compile`` the steps that did (tracing + XLA compilation + that step); ``eval`` covers
evaluations, probes and their compilation; ``startup`` is process start to the first train step.
``train_share`` = train / wall: the fraction of the run spent training.

``Throughput`` counts tokens over the same timed (non-compiling) train steps.
"""

from __future__ import annotations

import contextlib
import time

import psutil

PHASES = ("data", "compile", "train", "eval", "checkpoint")
_first_in_process = True


class Timings:
    def __init__(self):
        global _first_in_process
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.process_start = psutil.Process().create_time() if _first_in_process else time.time()
        _first_in_process = False
        self.first_step: float | None = None

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] += seconds

    @contextlib.contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def step_started(self) -> None:
        if self.first_step is None:
            self.first_step = time.time()

    def summary(self) -> dict:
        wall = time.time() - self.process_start
        out = {f"{k}_s": round(v, 3) for k, v in self.seconds.items()}
        out["wall_s"] = round(wall, 3)
        out["startup_s"] = round((self.first_step or time.time()) - self.process_start, 3)
        # from the rounded numbers next to it, so the three agree as written
        out["train_share"] = round(out["train_s"] / out["wall_s"], 4) if out["wall_s"] else None
        return out


class Throughput:
    """Tokens per second over timed train steps (steps that compiled a new shape don't count).

    ``summary()`` covers every timed step of this process; ``window()`` the steps since its
    previous call (the ``tokens_per_sec`` curve, one value per logged step).
    """

    def __init__(self):
        self.seconds = self.real_tokens = self.padded_tokens = 0.0
        self._window_tokens = self._window_seconds = 0.0

    def add(self, seconds: float, real_tokens: float, padded_tokens: float) -> None:
        self.seconds += seconds
        self.real_tokens += real_tokens
        self.padded_tokens += padded_tokens
        self._window_tokens += real_tokens
        self._window_seconds += seconds

    def window(self) -> float | None:
        """Real tokens per second since the last call; None when no step was timed since."""
        rate = self._window_tokens / self._window_seconds if self._window_seconds else None
        self._window_tokens = self._window_seconds = 0.0
        return rate

    def summary(self) -> dict:
        timed = self.seconds
        return {"tokens_per_sec": self.real_tokens / timed if timed else None,
                "padded_tokens_per_sec": self.padded_tokens / timed if timed else None}
