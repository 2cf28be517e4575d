"""Reading curves for the plots: finite points, per-block tags, seed means, spikes.

Curves are ``[(step, value)]`` lists as :class:`trainer.results.run.Run` holds them; numbers
derived from a run (final probe, gap) are :mod:`trainer.results.metrics`'.
"""

from __future__ import annotations

import bisect

import math
import re
import statistics

from trainer.telemetry.spikes import replay

BLOCK = re.compile(r"block_(\d+)")


def finite_points(points):
    """Points with a finite value (NaN, inf and None dropped)."""
    return [(s, v) for s, v in points if v is not None and math.isfinite(v)]


def positive(points):
    """Finite points above zero: what a log axis can show."""
    return [(s, v) for s, v in finite_points(points) if v > 0]


def by_block(curves: dict, prefix: str, suffix: str = "") -> dict[int, list]:
    """``{block index: curve}`` for tags ``prefix + block_i + suffix``."""
    out = {}
    for tag, curve in curves.items():
        if tag.startswith(prefix) and tag.endswith(suffix):
            m = BLOCK.fullmatch(tag[len(prefix):len(tag) - len(suffix)])
            if m:
                out[int(m.group(1))] = curve
    return dict(sorted(out.items()))


def mean_curve(curves):
    """Mean over seeds at the x values every seed has (a diverged seed ends the mean early)."""
    curves = [dict(c) for c in curves if c]
    if not curves:
        return []
    common = sorted(set(curves[0]).intersection(*curves[1:]))
    return [(x, statistics.fmean(c[x] for c in curves)) for x in common]


def before_divergence(run, curve):
    """Finite points, without the diverged step itself (its loss is inf, NaN or huge)."""
    stop = run.summary.get("diverged_step") if run.status == "diverged" else None
    return [(s, v) for s, v in finite_points(curve) if stop is None or s < stop]


def spikes(run, curve):
    """Loss spikes as (step, y): the steps the run counted (``summary["loss_spike_steps"]``,
    the rule of trainer/telemetry/spikes.py) placed on the nearest logged point of ``curve``
    (the loss of an unlogged step is not kept); for older runs without that key, the same rule
    replayed over the logged points (``spikes.replay``, V = ``data.vocab_size``)."""
    recorded = run.summary.get("loss_spike_steps")
    if recorded is None:
        return replay(finite_points(curve), int(run.cfg.data.vocab_size))
    if not curve:
        return []
    steps = [s for s, _ in curve]
    values = dict(curve)
    out = []
    for step in recorded:
        i = min(bisect.bisect_left(steps, int(step)), len(steps) - 1)
        out.append((int(step), values[steps[i]]))
    return out
