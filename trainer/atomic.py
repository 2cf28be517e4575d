"""Atomic file writes: a reader (or a crash) never leaves half a file behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


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


def write_csv(path: str | os.PathLike, rows: list[dict]) -> None:
    """Rows (dicts with the same keys, in order) as a CSV file, written atomically."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buf.getvalue())


def save_figure(fig, path: str | os.PathLike, dpi: int = 110) -> None:
    """A matplotlib figure as a PNG, written atomically; the figure is closed either way."""
    import matplotlib.pyplot as plt

    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    finally:
        plt.close(fig)
