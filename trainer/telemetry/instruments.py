"""The instability instruments' extremes over a run, for summary.json (no TensorFlow).

The train step returns the instruments every step (``trainer.telemetry.stats``): per block the
largest pre-softmax attention logit (``attention/block_i/max_logit``) and the mean attention
entropy (``attention/block_i/entropy``), and over real tokens the mean and max of log Z =
logsumexp(logits) (``output/log_z_mean``, ``output/log_z_max``); with ``train.z_loss`` also the
penalty (``z_loss``). The event files hold them every ``log_every`` steps; ``Extremes`` keeps
every step's: each tag's last value, maximum and minimum (an entropy collapses downwards, and
log Z drifts either way), carried through a resume by the checkpoint's history.
"""

from __future__ import annotations

import math

# Tags of the instruments, by prefix: the curves a run written before they existed lacks
# (``trainer.results.compare`` does not count them missing in such a run's reproduction).
INSTRUMENT_PREFIXES = ("attention/", "output/")
Z_LOSS = "z_loss"


def is_instrument(tag: str) -> bool:
    """Whether ``tag`` is an instrument (or the z-loss penalty)."""
    return tag.startswith(INSTRUMENT_PREFIXES) or tag == Z_LOSS


class Extremes:
    """Each instrument tag's final value, maximum and minimum over every step seen."""

    def __init__(self, state: dict | None = None):
        state = state or {}
        self.final = dict(state.get("final", {}))
        self.max = dict(state.get("max", {}))
        self.min = dict(state.get("min", {}))

    def update(self, scalars: dict[str, float]) -> None:
        """Take one step's scalars (``expand``ed tags); tags that are no instrument, and values
        that are not finite (a step about to diverge), are skipped."""
        for tag, value in scalars.items():
            if not is_instrument(tag) or not math.isfinite(value):
                continue
            self.final[tag] = value
            self.max[tag] = max(value, self.max.get(tag, value))
            self.min[tag] = min(value, self.min.get(tag, value))

    def state(self) -> dict:
        """What a checkpoint keeps, so a resumed run's extremes cover the steps before it."""
        return {"final": dict(self.final), "max": dict(self.max), "min": dict(self.min)}

    def summary(self) -> dict:
        """summary.json's ``instruments`` (last step), ``instruments_max``, ``instruments_min``."""
        return {"instruments": dict(self.final), "instruments_max": dict(self.max),
                "instruments_min": dict(self.min)}
