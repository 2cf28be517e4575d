"""One claim's measurement: the ``Finding`` record and the formatting every claim module shares.

A claim module (``core``, ``batch``, ``depth``, ``ln``, ``stream``) defines functions
``claim(ref: Reference) -> Finding`` and lists them in its ``CLAIMS``; ``core.measure`` runs
them all and ``page`` renders them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainer.results.metrics import interval

# The variants most claims compare: Pre-norm with the residual; the norms by family.
BASE = dict(residual="true", placement="pre")
TOKEN_NORMS = ("layer", "rms", "dyt", "none")
BN_NORMS = ("batch", "masked_batch")


@dataclass
class Finding:
    id: str
    claim: str
    metric: str
    falsifier: str  # the result that would have shown the claim false
    plot: str | None = None  # relative to the reference root
    parts: list[tuple[str, bool]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # measured values, one markdown line each
    missing: list[str] = field(default_factory=list)

    def __post_init__(self):
        # The texts are written as wrapped triple-quoted strings: one space between words.
        self.claim, self.metric, self.falsifier = (" ".join(t.split()) for t in
                                                   (self.claim, self.metric, self.falsifier))

    @property
    def verdict(self) -> str:
        if self.missing:
            return "not run"
        shown = [ok for _, ok in self.parts]
        return "yes" if all(shown) else ("partly" if any(shown) else "no")


def fmt_seeds(values: dict) -> str:
    iv = interval(v for v in values.values())
    per = " / ".join("n/a" if v is None else ("∞" if math.isinf(v) else f"{v:.4g}")
                     for _, v in sorted(values.items()))
    return f"{iv if iv else 'n/a'} (per seed: {per})"


def line(name: str, values: dict) -> str:
    return f"{name}: {fmt_seeds(values)}"
