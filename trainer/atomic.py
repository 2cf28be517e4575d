"""Atomic file writes (a reader, or a crash, never leaves half a file behind), the JSON files of
a run directory (config and results read them back with ``read_json``) and the PNG figures
(drawn off-screen by ``subplots``, written by ``save_figure``)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

from trainer.faults import writing


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call ``write(tmp_path)`` then ``os.replace`` it onto ``path``; the temp file is removed
    if anything fails. Works for any writer that takes a path (tokenizers, numpy, matplotlib)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.tmp-", suffix=path.suffix)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_json(path: str | os.PathLike, obj: dict) -> None:
    """Write ``obj`` as JSON atomically; an I/O failure is a one-line ``RunIOError``."""
    with writing(Path(path).name, path):
        write_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike) -> dict:
    """The JSON object in ``path``; ``{}`` when it is missing or unreadable (an unfinished run)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def write_csv(path: str | os.PathLike, rows: list[dict]) -> None:
    """Rows (dicts with the same keys, in order) as a CSV file, written atomically."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buf.getvalue())


# pyplot.subplots' arguments that lay out the axes; the others describe the figure.
_GRID_ARGS = ("sharex", "sharey", "squeeze", "width_ratios", "height_ratios", "subplot_kw",
              "gridspec_kw")


def subplots(nrows: int = 1, ncols: int = 1, **kwargs):
    """``matplotlib.pyplot.subplots`` without pyplot: a ``Figure`` on an Agg canvas (drawn in
    memory, so it works headless) that no backend, pyplot state or GUI ever sees. Same
    arguments, same figure; nothing to close, it is freed with its last reference."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    grid = {k: kwargs.pop(k) for k in _GRID_ARGS if k in kwargs}
    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **grid)


def save_figure(fig, path: str | os.PathLike, dpi: int = 110) -> None:
    """A matplotlib figure as a PNG at ``dpi``, written atomically."""
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
