"""The lab's norms by name — one table — and the syntax of a norm from outside the lab.

``NORM_TABLE`` maps each ``model.norm`` name to how pages, reports and figures show it, and to
its family (per-token or batch statistics: ``family``, which the claims group norms by). It is
the vocabulary itself: ``trainer.choices.Norm`` is built from its keys, and the norm registry
(``trainer.models.norms.NORMS``) checks at import that it implements exactly these names. So
adding a norm to the lab takes, in code, its class (registered in ``trainer/models/norms.py``),
its test and its row here; the documentation's lists of the norms are checked against this
table (docs/development.md, "Adding a norm to the lab"). No TensorFlow here: configs are
validated without it.

A norm from outside the lab is named ``PATH.py:ClassName`` or ``package.module:ClassName``
(``plugin_target``); ``trainer.models.plugin`` loads and checks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


TOKEN = "token"  # each token normalised (or not) by itself: no statistic crosses tokens
BATCH = "batch"  # statistics over batch x time (the BatchNorm family)


@dataclass(frozen=True)
class NormRow:
    """How one norm is shown: ``name`` on pages and reports, ``short`` in figure labels,
    ``color`` in every figure (so "LayerNorm is blue" holds everywhere); and its ``family``,
    ``TOKEN`` or ``BATCH`` (None for a norm from outside the lab: not declared)."""

    name: str
    short: str
    color: str
    family: str | None = None


# tab10 hues: the batch-statistics norms warm (red, orange, brown), the per-token norms cool
# (blue, green, purple), no norm grey. Not every pair is colour-blind safe (red/green), which is
# why panels, labels and line styles carry the same information.
NORM_TABLE: dict[str, NormRow] = {
    "layer": NormRow("LayerNorm", "LN", "#1f77b4", TOKEN),
    "batch": NormRow("naive BN", "BN", "#d62728", BATCH),
    "masked_batch": NormRow("masked BN", "mBN", "#ff7f0e", BATCH),
    "sync_batch": NormRow("sync BN", "sBN", "#8c564b", BATCH),
    "rms": NormRow("RMSNorm", "RMS", "#2ca02c", TOKEN),
    "dyt": NormRow("DyT", "DyT", "#9467bd", TOKEN),
    "none": NormRow("no norm", "no-norm", "#7f7f7f", TOKEN),
}
# A norm from outside the lab (or one not yet in the table): visible, never a crash.
OUTSIDE_COLOR = "#17becf"

_FILE = re.compile(r"(?P<target>.+\.py):(?P<cls>[A-Za-z_]\w*)")
_MODULE = re.compile(r"(?P<target>[A-Za-z_]\w*(\.[A-Za-z_]\w*)*):(?P<cls>[A-Za-z_]\w*)")


def plugin_target(spec: str) -> tuple[str, str, str] | None:
    """``(kind, target, class name)`` of a norm from outside the lab, kind "file" (target a
    path ending in .py) or "module" (a dotted module name); None when ``spec`` is neither."""
    spec = str(spec)
    for kind, pattern in (("file", _FILE), ("module", _MODULE)):
        m = pattern.fullmatch(spec)
        if m:
            return kind, m["target"], m["cls"]
    return None


def family(kind: str) -> tuple[str, ...]:
    """The lab's norms of one family (``TOKEN`` or ``BATCH``), in table order."""
    return tuple(name for name, r in NORM_TABLE.items() if r.family == kind)


def row(norm: str) -> NormRow:
    """The table's row of ``norm``; a norm from outside the lab is shown by its class name."""
    norm = str(norm)
    if norm in NORM_TABLE:
        return NORM_TABLE[norm]
    found = plugin_target(norm)
    label = found[2] if found else norm
    return NormRow(label, label, OUTSIDE_COLOR)
