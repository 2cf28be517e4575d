"""Loss spikes: the fragility that a NaN count misses.

A run at a high learning rate can blow up to a loss of hundreds and come back without ever
producing a non-finite value or crossing ``train.loss_upper_bound``. A step counts as a spike
when its training loss is clearly worse than a uniform guess (> ``UNIFORM_SLACK`` x ln V; a
freshly initialised model sits within about 1 % of ln V, so plain ln V would count init noise)
or more than ``FACTOR`` times the lowest loss of the previous ``window`` steps
(``train.log_every``).
"""

from __future__ import annotations

import math
from collections import deque

FACTOR = 2.0  # "doubled within one logging interval": no healthy run's loss doubles that fast
UNIFORM_SLACK = 1.1  # 10 % worse than uniform: far outside init noise, a real blow-up
MAX_STEPS_KEPT = 100  # spike steps listed in summary.json; the count is always exact


class SpikeCounter:
    """Feed it every step's loss; ``state()``/``from_state`` carry it across a resume."""

    def __init__(self, vocab_size: int, window: int, count: int = 0, steps=(), recent=()):
        self.ceiling = UNIFORM_SLACK * math.log(vocab_size)
        self.window = max(int(window), 1)
        self.count = int(count)
        self.steps = list(steps)
        self.recent = deque(recent, maxlen=self.window)

    def update(self, step: int, loss: float) -> bool:
        """Record ``loss`` at ``step``; True when it is a spike."""
        floor = min(self.recent) if self.recent else math.inf
        spike = math.isfinite(loss) and (loss > self.ceiling or loss > FACTOR * floor)
        if spike:
            self.count += 1
            if len(self.steps) < MAX_STEPS_KEPT:
                self.steps.append(int(step))
        self.recent.append(loss)
        return spike

    def state(self) -> dict:
        return {"count": self.count, "steps": self.steps, "recent": list(self.recent)}

    @classmethod
    def from_state(cls, vocab_size: int, window: int, state: dict | None) -> "SpikeCounter":
        return cls(vocab_size, window, **(state or {}))
