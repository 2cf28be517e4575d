"""Claim F11 (depth): residual connections and LayerNorm are what let deep stacks train.

Sub-sweeps ``depth_2`` and ``depth_12`` (``configs/sweeps/reference_depth_{2,12}.yaml``, into
group ``depth``) train four variants at 2 and 12 blocks, 3 seeds each, next to the grid's 6:
Pre-LN + residual (the healthy model), Post-LN + residual (with the reference's warm-up),
no norm + residual, and Pre-LN without residual. The verdict reads the shallowest and the
deepest depth; the grid's 6 blocks are drawn for context (``depth/plots/loss_by_depth.png``).

Parts, fixed before the runs:
- the healthy model improves or holds: its deepest loss is at most its shallowest + LOSS_MARGIN
  on every seed;
- each other variant falls behind it with depth: (its loss − the healthy loss of the same seed)
  grows from the shallowest to the deepest depth by at least LOSS_MARGIN on every seed.
A diverged run counts as infinitely bad (``final_loss``).
"""

from __future__ import annotations

import math

from trainer.findings.claim import Finding, line
from trainer.results.metrics import final_loss
from trainer.findings.reference import Reference
from trainer.findings.thresholds import LOSS_MARGIN, MIN_SEEDS

HEALTHY = ("Pre-LN + residual", dict(norm="layer", residual="true", placement="pre"))
OTHERS = (("Post-LN + residual", dict(norm="layer", residual="true", placement="post")),
          ("no norm + residual", dict(norm="none", residual="true", placement="pre")),
          ("Pre-LN, no residual", dict(norm="layer", residual="false", placement="pre")))
VARIANTS = (HEALTHY, *OTHERS)


def depths(ref: Reference) -> list[int]:
    return sorted({int(r.cfg.model.num_layers) for r in ref.groups.get("depth", [])})


def losses(ref: Reference, finding, want: dict, depth: int, quiet: bool = False) -> dict:
    """Seed -> final loss of a variant at ``depth`` blocks (the grid holds the reference's 6)."""
    group = "depth" if depth != ref.num_layers("grid") else "grid"
    scratch = Finding("", "", "", "") if quiet else finding
    runs = ref.select(scratch, group, num_layers=depth, **want)
    if not quiet and runs and len({r.seed for r in runs}) < MIN_SEEDS:
        finding.missing.append(f"{group}: {want} at {depth} blocks has {len(runs)} seed(s)")
    return {r.seed: final_loss(r) for r in sorted(runs, key=lambda r: r.seed)}


def _diff(a: dict, b: dict) -> dict:
    return {s: a[s] - b[s] for s in a if s in b and a[s] is not None and b[s] is not None
            and not (math.isinf(a[s]) and math.isinf(b[s]))}


def f11(ref: Reference) -> Finding:
    f = Finding("F11", """Residual connections and LN are what let deep stacks train: the healthy
                    model improves or holds from 2 to 12 blocks while the others fall behind it""",
                "final eval loss at 2 and 12 blocks (6: the grid), 3 seeds, per variant",
                f"""Pre-LN + residual worse at 12 blocks than at 2 by > {LOSS_MARGIN} nats on a
                    seed, or a variant whose gap to it does not grow by {LOSS_MARGIN} nats""",
                plot="depth/plots/loss_by_depth.png")
    ds = depths(ref)
    if len(ds) < 2:
        f.missing.append("depth: runs at 2 and 12 blocks (scripts/reference.sh depth_2 depth_12)")
        return f
    lo, hi = ds[0], ds[-1]
    at = {(name, d): losses(ref, f, want, d) for name, want in VARIANTS for d in (lo, hi)}
    if f.missing:
        return f
    six = ref.num_layers("grid")
    for name, want in VARIANTS:
        for d in sorted({lo, six, hi}):
            v = at.get((name, d)) or losses(ref, f, want, d, quiet=True)
            if v:
                f.lines.append(line(f"{name}, {d} blocks", v))
    healthy = HEALTHY[0]
    f.parts.append((f"{healthy} holds with depth", all(
        d <= LOSS_MARGIN for d in _diff(at[(healthy, hi)], at[(healthy, lo)]).values())
        and len(at[(healthy, hi)]) >= MIN_SEEDS))
    for name, _ in OTHERS:
        gap = {d: _diff(at[(name, d)], at[(healthy, d)]) for d in (lo, hi)}
        grows = {s: gap[hi].get(s, math.inf) - gap[lo][s] if s in gap[lo] else None
                 for s in at[(name, hi)]}
        f.lines.append(line(f"{name}: growth of its gap to {healthy}, {lo} → {hi} blocks", grows))
        f.parts.append((f"{name} falls behind with depth", len(grows) >= MIN_SEEDS and all(
            v is not None and v >= LOSS_MARGIN for v in grows.values())))
    return f


CLAIMS = (f11,)
