"""Loss spikes: the fragility that a NaN count misses. The lab's one definition of a spike.

A run at a high learning rate can blow up to a loss of hundreds and come back without ever
producing a non-finite value or crossing ``train.loss_upper_bound``. A step counts as a spike
when its training loss is clearly worse than a uniform guess (> ``UNIFORM_SLACK`` x ln V; a
freshly initialised model sits within about 1 % of ln V, so plain ln V would count init noise)
or more than ``FACTOR`` times the lowest loss of the previous ``window`` steps
(``train.log_every``). ``RULE`` says so in words (the findings quote it); ``SpikeCounter``
applies it during training, ``replay`` to a logged curve. No TensorFlow here.
"""

from __future__ import annotations

import math
from collections import deque

FACTOR = 2.0  # "doubled within one logging interval": no healthy run's loss doubles that fast
UNIFORM_SLACK = 1.1  # 10 % worse than uniform: far outside init noise, a real blow-up
MAX_STEPS_KEPT = 100  # spike steps listed in summary.json; the count is always exact
RULE = (f"training loss > {UNIFORM_SLACK:g}·ln V, or > {FACTOR:g}× the lowest loss of the "
        f"previous train.log_every steps")


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


def replay(points, vocab_size: int, window: int = 1) -> list[tuple[int, float]]:
    """The (step, loss) points of a curve that ``SpikeCounter`` counts as spikes. On a logged
    curve (a point every ``train.log_every`` steps) the default window of one point compares
    each loss with the logged one before it."""
    counter = SpikeCounter(vocab_size, window)
    return [(step, loss) for step, loss in points if counter.update(step, loss)]
