"""Atomic writes: a reader, or a crash, never sees half a file or half a directory.

One primitive, ``atomic_write(path, write)``: ``write`` fills a temporary file beside ``path``,
which then replaces ``path`` in one rename. Everything else is built on it: ``write_text``,
``write_bytes``, ``write_json`` (with ``read_json`` to read it back), ``write_csv`` and
``save_figure`` (figures drawn off-screen by ``subplots``, no pyplot). ``atomic_dir`` does the
same for a directory (a cache entry built by parallel processes).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

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


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 ``text`` to ``path`` atomically."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def write_json(path: str | os.PathLike, obj: dict) -> None:
    """Write ``obj`` as JSON atomically; an I/O failure is a one-line ``RunIOError``."""
    with writing(Path(path).name, path):
        write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


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
    write_text(path, buf.getvalue())


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


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``final`` to fill; on success it is renamed into place.

    Parallel processes may build the same entry at once; a rename is atomic on one filesystem,
    so readers only ever see a complete directory. The loser of a race discards its copy.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.tmp-"))
    try:
        yield tmp
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
