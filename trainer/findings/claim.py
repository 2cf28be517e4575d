"""One claim's measurement: the ``Finding`` record and the formatting every claim module shares.

A claim module (``core``, ``batch``, ``depth``, ``ln``, ``stream``) defines functions
``claim(ref: Reference) -> Finding`` and lists them in its ``CLAIMS``; ``page.measure`` runs
them all and ``page`` renders them.
"""

from __future__ import annotations

import math
from dataclasses import InitVar, dataclass, field

from trainer.norm_names import BATCH, TOKEN, family
from trainer.results.metrics import interval
from trainer.results.rule import REFUTED, SHOWN, STRADDLES, UNDERPOWERED, Judged

# The variants most claims compare: Pre-norm with the residual; the norms by family (the norm
# table's), sync_batch left out: on one device it is masked_batch, and the reference runs on
# one (configs/sweeps/reference/lr_b.yaml).
BASE = dict(residual="true", placement="pre")
TOKEN_NORMS = family(TOKEN)
BN_NORMS = tuple(n for n in family(BATCH) if n != "sync_batch")


@dataclass(frozen=True)
class Part:
    """One part of a claim's verdict.

    ``control``: the part holds by construction (LN is the same function in both modes; without
    γ/β every LN output has norm √C): a check that the implementation is what it says, shown on
    the page and never counted toward the verdict. Otherwise the part is *evidence*: a
    measurement that could have come out either way, judged by the statistics rule
    (``rule.compare`` / ``not_worse`` / ``threshold``): ``shown`` True (shown), False
    (refuted) or None; None with ``underpowered`` when the data cannot tell (``why`` says how:
    the interval straddles the margin, or clears it with a seed on the other side), None
    without it when the part cannot be judged (``why`` says which precondition failed: a
    compared variant trains at no rate tried, a population is empty). ``stat``: the statistic
    it read (a paired difference with its interval and margin), printed beside it; ``before``:
    when extra seeds re-judged the part, its statistic at the pre-registered seeds alone.
    """

    text: str
    shown: bool | None
    control: bool = False
    why: str = ""
    underpowered: bool = False
    stat: str = ""
    before: str = ""

    @property
    def statistic(self) -> str:
        """``stat`` as the page prints it: with the pre-registered seeds' after it, if any."""
        if not self.before:
            return self.stat
        return f"with the extra seeds, {self.stat}; at the pre-registered seeds, {self.before}"

    @property
    def reason(self) -> str:
        """Why a part is neither shown nor refuted, as the page says it ("" when it is)."""
        if self.underpowered:
            return f"underpowered: {self.why or STRADDLES}"
        return f"cannot be judged: {self.why}" if self.shown is None else ""

    @property
    def mark(self) -> str:
        if self.underpowered:
            return "~"
        return "?" if self.shown is None else ("✓" if self.shown else "✗")


def claim_id(fn) -> str:
    """A claim function's id: ``scale`` is S, ``f3`` is F3."""
    return "S" if fn.__name__ == "scale" else fn.__name__.upper()


def all_of(*parts: Judged) -> Judged:
    """Several judgements read as one part: shown when all are, refuted when one is, otherwise
    underpowered; the statistics joined."""
    outcomes = {p.outcome for p in parts}
    outcome = (SHOWN if outcomes == {SHOWN} else REFUTED if REFUTED in outcomes
               else UNDERPOWERED)
    why = "; ".join(dict.fromkeys(p.why for p in parts if p.outcome == UNDERPOWERED and p.why))
    return Judged(outcome, "; ".join(p.stat for p in parts), why if outcome == UNDERPOWERED else "")


def any_of(*parts: Judged) -> Judged:
    """Either of several judgements: shown when one is, refuted when all are, otherwise
    underpowered; the statistics joined."""
    outcomes = {p.outcome for p in parts}
    outcome = (SHOWN if SHOWN in outcomes else REFUTED if outcomes == {REFUTED}
               else UNDERPOWERED)
    why = "; ".join(dict.fromkeys(p.why for p in parts if p.outcome == UNDERPOWERED and p.why))
    return Judged(outcome, "; ".join(p.stat for p in parts), why if outcome == UNDERPOWERED else "")


@dataclass
class Finding:
    id: str
    claim: str
    metric: str
    falsifier: str  # the result that would have shown the claim false
    plot: InitVar[str | None] = None  # one figure: shorthand for ``plots=(plot,)``
    plots: tuple[str, ...] = ()  # figures, relative to the reference root, in page order
    parts: list[Part] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # measured values, one markdown line each
    missing: list[str] = field(default_factory=list)
    used: dict = field(default_factory=dict)  # group -> runs read (for the setting line)
    files: list[str] = field(default_factory=list)  # analysis files read (the same)

    def __post_init__(self, plot):
        # The texts are written as wrapped triple-quoted strings: one space between words.
        self.claim, self.metric, self.falsifier = (" ".join(t.split()) for t in
                                                   (self.claim, self.metric, self.falsifier))
        self.plots = ((plot,) if plot else ()) + tuple(self.plots)

    def evidence(self, text: str, shown: "bool | None | Judged", why: str = "") -> None:
        """A part that counts: a ``Judged`` outcome of the statistics rule; or True/False for a
        part with no interval (a single-seed grid reading); None (with ``why``) when it cannot
        be judged."""
        if isinstance(shown, Judged):
            self.parts.append(Part(text, {SHOWN: True, REFUTED: False}.get(shown.outcome), False,
                                   why or shown.why, shown.outcome == UNDERPOWERED, shown.stat))
            return
        self.parts.append(Part(text, None if shown is None else bool(shown), False, why))

    def control(self, text: str, shown: bool) -> None:
        """A part that holds by construction: shown as a check, never counted."""
        self.parts.append(Part(text, bool(shown), True))

    @property
    def verdict(self) -> str:
        return verdict(self.parts, bool(self.missing))

    @property
    def marks(self) -> str:
        """The evidence parts' marks in order (✓ ✗ ~ ?), as the page's tables print them."""
        return "".join(p.mark for p in self.parts if not p.control)


# Every verdict ``verdict`` returns, as results/README.md writes it (the ones to look at in bold).
VERDICTS = {"yes": "yes", "partly": "**partly**", "no": "**no**",
            "inconclusive (underpowered)": "**inconclusive (underpowered)**",
            "inconclusive": "**inconclusive**", "checks only": "checks only",
            "not run": "not run yet"}


def verdict(parts: list[Part], missing: bool = False) -> str:
    """The one verdict rule, over the evidence parts (controls never count; results/
    PREREGISTRATION-REPLICATION.md):

    - *not run*: some runs or analyses it reads are missing;
    - *inconclusive*: a control failed (the implementation is not what it says, so nothing
      measured through it counts);
    - *yes*: every evidence part shows; *partly*: some show and some are refuted; *no*: none
      shows and some are refuted;
    - *inconclusive (underpowered)*: none is refuted and some straddle their margin: the data
      cannot tell, which is never a "no";
    - *inconclusive*: none refuted, none underpowered, some could not be judged (a precondition
      failed: never a vacuous truth);
    - *checks only*: the claim has controls and no evidence part (a definition, demonstrated).

    A claim with no part at all has no verdict: ``ValueError`` (a claim module that added
    nothing is a bug, not a result), unless it is *not run*.
    """
    if missing:
        return "not run"
    if not parts:
        raise ValueError("no parts: a claim that judged nothing has no verdict")
    if any(p.control and not p.shown for p in parts):
        return "inconclusive"
    evidence = [p for p in parts if not p.control]
    if not evidence:
        return "checks only"
    shown = [p for p in evidence if p.shown]
    refuted = [p for p in evidence if p.shown is False]
    if refuted:
        return "partly" if shown else "no"
    if len(shown) == len(evidence):
        return "yes"
    return ("inconclusive (underpowered)" if any(p.underpowered for p in evidence)
            else "inconclusive")


def fmt_seeds(values: dict, log: bool = False) -> str:
    iv = interval((v for v in values.values()), log)
    per = " / ".join("n/a" if v is None else ("∞" if math.isinf(v) else f"{v:.4g}")
                     for _, v in sorted(values.items()))
    return f"{iv if iv else 'n/a'} (per seed: {per})"


def seed_difference(a: dict, b: dict) -> dict:
    """Seed -> a − b, on the seeds where both have a value (described beside a claim, not judged:
    ``rule.paired`` is the judged difference)."""
    return {s: a[s] - b[s] for s in sorted(a.keys() & b.keys())
            if a[s] is not None and b[s] is not None}


def line(name: str, values: dict, log: bool = False) -> str:
    return f"{name}: {fmt_seeds(values, log)}"
