"""Claim F11 (depth): residual connections and LayerNorm are what let deep stacks train.

Sub-sweep ``depth`` trains four variants at 2 and 12 blocks, each at its own best rate at that
depth (chosen on validation from the short grid ``depth_lr``: the variant's 6-block best rate
× ``SHORT_GRID``), ``HEADLINE_SEEDS`` seeds, next to the sub-sweep ``best``'s 6 blocks: Pre-LN +
residual (the healthy model), Post-LN + residual, no norm + residual, Pre-LN without residual.
The verdict reads the shallowest and the deepest depth, test losses; 6 blocks are drawn for
context (``depth/plots/loss_by_depth.png``).

Parts (all evidence; pre-registration 2's rule, results/PREREGISTRATION-REPLICATION.md):
- the healthy model improves or holds: a null, its deepest loss not worse than its shallowest
  by NULL_MARGIN (paired by seed, one-sided);
- each other variant falls behind it with depth: (its loss − the healthy loss of the same seed)
  grows from the shallowest to the deepest depth by LOSS_MARGIN (a threshold on the per-seed
  growth); cannot be judged for a variant at the unigram plateau at both depths;
- the texts' ordering asked directly: at the deepest depth the healthy model beats no norm +
  residual by LOSS_MARGIN (paired), since at 12 blocks no norm did better at lr 6e-3.
A diverged run counts as infinitely bad (``final_test_loss``).
"""

from __future__ import annotations

import math

from trainer.findings.claim import Finding, line
from trainer.findings.core import GROUP, compare_losses
from trainer.findings.reference import Reference
from trainer.findings.thresholds import LOSS_MARGIN, NULL_MARGIN
from trainer.results.baselines import at_plateau
from trainer.results.metrics import final_test_loss, interval
from trainer.results.rule import not_worse, threshold

HEALTHY = ("Pre-LN + residual", dict(norm="layer", residual="true", placement="pre"))
NO_NORM = ("no norm + residual", dict(norm="none", residual="true", placement="pre"))
OTHERS = (("Post-LN + residual", dict(norm="layer", residual="true", placement="post")), NO_NORM,
          ("Pre-LN, no residual", dict(norm="layer", residual="false", placement="pre")))
VARIANTS = (HEALTHY, *OTHERS)


def depths(ref: Reference) -> list[int]:
    return sorted({int(r.cfg.model.num_layers) for r in ref.groups.get("depth", [])})


def losses(ref: Reference, finding, want: dict, depth: int, quiet: bool = False) -> dict:
    """Seed -> test loss of a variant at ``depth`` blocks (``best`` holds the reference's 6)."""
    group = "depth" if depth != ref.num_layers(GROUP) else GROUP
    extra = {} if group == "depth" else {"warmup_steps": 50}
    scratch = Finding("", "", "", "") if quiet else finding
    return ref.per_seed(scratch, group, final_test_loss, seeds=ref.headline_seeds, num_layers=depth,
                        **want, **extra)


def _plateau_everywhere(ref: Reference, at: dict, name: str, depths: tuple) -> bool:
    base = ref.baselines("depth")
    return bool(base) and all(at_plateau(interval(at[(name, d)].values()).mean, base)
                              for d in depths)


def _diff(a: dict, b: dict) -> dict:
    return {s: a[s] - b[s] for s in a if s in b and a[s] is not None and b[s] is not None
            and not (math.isinf(a[s]) and math.isinf(b[s]))}


def f11(ref: Reference) -> Finding:
    f = Finding("F11", """Residual connections and LN are what let deep stacks train: the healthy
                    model improves or holds from 2 to 12 blocks while the others fall behind it""",
                """final test loss at 2 and 12 blocks (6: sub-sweep `best`), each variant at its
                    own best rate per depth, per seed""",
                f"""Pre-LN + residual shown worse at 12 blocks than at 2 by {NULL_MARGIN}
                    nats (paired, one-sided null), a variant whose gap to it is shown to grow by
                    less than {LOSS_MARGIN} nats, or no norm + residual shown not worse than it at
                    12 blocks by {LOSS_MARGIN}""",
                plot="depth/plots/loss_by_depth.png")
    ds = depths(ref)
    if len(ds) < 2:
        f.missing.append("depth: runs at 2 and 12 blocks (scripts/reference.sh depth_lr depth)")
        return f
    lo, hi = ds[0], ds[-1]
    at = {(name, d): losses(ref, f, want, d) for name, want in VARIANTS for d in (lo, hi)}
    if f.missing:
        return f
    six = ref.num_layers(GROUP)
    for name, want in VARIANTS:
        for d in sorted({lo, six, hi}):
            v = at.get((name, d)) or losses(ref, f, want, d, quiet=True)
            if v:
                f.lines.append(line(f"{name}, {d} blocks", v))
    healthy = HEALTHY[0]
    f.evidence(f"{healthy} holds with depth (not worse at {hi} blocks than at {lo})",
               not_worse(at[(healthy, hi)], at[(healthy, lo)], NULL_MARGIN))
    for name, _ in OTHERS:
        gap = {d: _diff(at[(name, d)], at[(healthy, d)]) for d in (lo, hi)}
        grows = {s: gap[hi].get(s, math.inf) - gap[lo][s] if s in gap[lo] else None
                 for s in at[(name, hi)]}
        f.lines.append(line(f"{name}: growth of its gap to {healthy}, {lo} → {hi} blocks", grows))
        flat = _plateau_everywhere(ref, at, name, (lo, hi))
        f.evidence(f"{name} falls behind with depth",
                   None if flat else threshold(grows, LOSS_MARGIN, "above"),
            f"{name} ends at the unigram plateau at {lo} and {hi} blocks" if flat else "")
    compare_losses(f, ref, f"{healthy} beats {NO_NORM[0]} at {hi} blocks", at[(NO_NORM[0], hi)],
                   at[(healthy, hi)], group="depth")
    return f


CLAIMS = (f11,)
