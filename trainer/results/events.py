"""Read a run's curves back with TensorBoard's own event reader."""

from __future__ import annotations

from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util


def read_scalars(log_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """All scalar curves of one event directory: ``{tag: [(step, value), ...]}`` sorted by step.

    TF2 ``tf.summary.scalar`` stores tensors, so they are read from the tensors channel.
    A step written twice (a resumed run redoing work) keeps its last value. A directory with
    no event files gives ``{}``.
    """
    if not Path(log_dir).is_dir():
        return {}
    acc = EventAccumulator(str(log_dir), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags().get("tensors", []):
        by_step = {}
        for ev in acc.Tensors(tag):
            value = tensor_util.make_ndarray(ev.tensor_proto)
            # Scalars only: histograms are vectors, layouts and HParams are strings.
            if value.ndim == 0 and value.dtype.kind in "fiub":
                by_step[ev.step] = float(value)
        if by_step:
            out[tag] = sorted(by_step.items())
    return out
