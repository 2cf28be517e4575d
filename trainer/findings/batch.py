"""Claims F8 (batch composition) and F9 (padding and BN statistics); the rules are ``findings``'.

F8 — a sequence's logits do not depend on its batch partners' real lengths for per-token norms,
and do for BN. ``analyze composition`` (``analysis/composition.csv``) evaluates the same
sequences batched with short and with long real-length partners (same batch width: the only
change is how many of the partners' positions are real), final checkpoints of the grid's Pre-LN
+ residual runs, and records max |Δ logits| over the sequences' real positions per mode.
Parts: ``layer`` and ``rms`` below ``findings.INVARIANT_MAX`` in training mode on every seed;
``batch`` above ``findings.DEPENDENT_MIN`` in training mode on every seed.

F9 — padding pollutes naive BN statistics, more so as pads grow; masking fixes it.
``analyze padding`` (``analysis/padding.csv``) feeds each BN checkpoint the training stream
batched three ways (``CONDITIONS``) and measures at every BN layer
|mean over all positions − mean over real tokens| / std over real tokens, averaged over
features and layers. The loss comparison uses the sub-sweeps ``pad_to_max`` and ``small_batch``
(``configs/sweeps/reference_{pad_to_max,small_batch}.yaml``) next to the grid (bucketed).
Parts: the pad-to-max shift of ``batch`` >= ``POLLUTION_MIN`` on every seed; pad-to-max shift
above bucketed (separate intervals); ``masked_batch`` ends better than ``batch`` by
``findings.LOSS_MARGIN`` (PreciseBN eval loss, as F3) under pad-to-max and under small batches.
"""

from __future__ import annotations

from trainer.findings import thresholds as F
from trainer.analysis.padding import CONDITIONS
from trainer.findings.claim import BASE, BN_NORMS, Finding, line
from trainer.results.metrics import above, beyond, precise_bn_loss
from trainer.findings.reference import Reference
from trainer.findings.thresholds import MIN_SEEDS, POLLUTION_MIN



def _by_seed(rows: list[dict], key: str, **want) -> dict:
    """Seed -> float(row[key]) of the analysis rows matching ``want``."""
    return {r["seed"]: float(r[key]) for r in sorted(rows, key=lambda r: r["seed"])
            if all(r[k] == v for k, v in want.items())}


def _need_seeds(f: Finding, csv: str, values: dict, what: str) -> None:
    if len(values) < MIN_SEEDS:
        f.missing.append(f"{csv}: {what} on {MIN_SEEDS} seeds (has {len(values)})")


def f8(ref: Reference) -> Finding:
    f = Finding("F8", """A sequence's output does not depend on its batch partners' real lengths
                    for per-token norms (LayerNorm, RMSNorm), and does for BN""",
                """max |Δ logits| over a half-length sequence's real positions, batched with
                    partners of 8–16 vs full real length (same batch width), max over 16 sequences,
                    final checkpoints of the grid's Pre-LN + residual runs
                    (`analyze composition`)""",
                f"""LayerNorm or RMSNorm moving logits by ≥ {F.INVARIANT_MAX:g} in training mode,
                    or BN by ≤ {F.DEPENDENT_MIN:g}""", plot="analysis/composition.png")
    csv = "analysis/composition.csv"
    rows = ref.analysis(f, csv)
    if f.missing:
        return f
    train = {n: _by_seed(rows, "max_abs_delta", norm=n, mode="train")
             for n in ("layer", "rms", "batch")}
    for n, v in train.items():
        _need_seeds(f, csv, v, n)
    if f.missing:
        return f
    for n in dict.fromkeys(r["norm"] for r in rows):  # masked_batch etc. reported, not judged
        for mode in ("train", "inference"):
            f.lines.append(line(f"{n}, {mode} mode",
                                _by_seed(rows, "max_abs_delta", norm=n, mode=mode)))
    f.parts.append(("per-token norms invariant in training mode",
                    all(beyond(train[n], F.INVARIANT_MAX, "below") for n in ("layer", "rms"))))
    f.parts.append(("BN depends on the partners in training mode",
                    beyond(train["batch"], F.DEPENDENT_MIN, "above")))
    return f


def f9(ref: Reference) -> Finding:
    f = Finding("F9", """Padding pollutes naive BN statistics, more so as pads grow; masking fixes
                    it""", """|mean over all positions − mean over real tokens| / std over real
                    tokens (with BN's ε) at every block's BN input, naive `batch`, the training
                    stream batched three ways (`analyze padding`); final eval loss (population
                    statistics) of `batch` vs `masked_batch` in the pad-to-max and small-batch
                    sub-sweeps""",
                f"""a pad-to-max shift < {POLLUTION_MIN} on some seed or not above the bucketed
                    one, or `masked_batch` not better than `batch` by {F.LOSS_MARGIN} nats under
                    pad-to-max or under small batches""", plot="analysis/padding.png")
    csv = "analysis/padding.csv"
    rows = ref.analysis(f, csv)
    loss = {(g, n): ref.per_seed(f, g, precise_bn_loss, norm=n, **BASE)
            for g in ("pad_to_max", "small_batch") for n in BN_NORMS}
    if f.missing:
        return f
    shift = {c: _by_seed(rows, "shift", norm="batch", condition=c) for c in CONDITIONS}
    for c, v in shift.items():
        _need_seeds(f, csv, v, f"batch, {c}")
    if f.missing:
        return f
    for n in dict.fromkeys(r["norm"] for r in rows):
        for c in CONDITIONS:
            pads = _by_seed(rows, "pad_fraction", norm=n, condition=c)
            f.lines.append(line(f"shift, {n}, {c} ({sum(pads.values()) / max(len(pads), 1):.1%} "
                                "pads in the analysed batches)",
                                _by_seed(rows, "shift", norm=n, condition=c)))
    context = Finding("", "", "", "")  # the grid's bucketed losses: context, not in the verdict
    for n in BN_NORMS:
        grid = ref.per_seed(context, "grid", precise_bn_loss, norm=n, **BASE)
        if grid:
            f.lines.append(line(f"eval loss, {n}, bucketed (grid)", grid))
    for (g, n), v in loss.items():
        f.lines.append(line(f"eval loss, {n}, {g}", v))
    f.lines.append("pad fraction of the training stream: " + ", ".join(
        f"{c} {ref.pad_fraction(g):.1%}" for c, g in CONDITIONS.items()))
    f.parts.append(("pad-to-max pollutes naive BN",
                    beyond(shift["pad_to_max"], POLLUTION_MIN, "above")))
    f.parts.append(("more pads, more pollution", above(shift["pad_to_max"], shift["bucketed"])))
    for g in ("pad_to_max", "small_batch"):
        f.parts.append((f"masked BN ends better under {g}",
                        above(loss[(g, "batch")], loss[(g, "masked_batch")], F.LOSS_MARGIN)))
    return f


CLAIMS: tuple = (f8, f9)
