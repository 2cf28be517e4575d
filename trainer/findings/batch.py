"""Claims F7 (batch size), F8 (batch composition) and F9 (padding and BN statistics), from the
analyses of the best-rate runs' final checkpoints (test-split sequences); the rules are ``core``'s.

F7 — ``analyze batch-size`` (``analysis/batch_size.csv``) evaluates the same 64 full-length test
sequences B at a time, B = 1 … 64, in training and inference mode. Evidence: BN in training mode
at B = 1 is worse than at B = 64 by ``SMALL_BATCH_GAP``. Controls (hold by construction): LN is
flat over B in both modes, BN with running statistics is flat over B.

F8 — ``analyze composition`` (``analysis/composition.csv``) evaluates the same sequences batched
with short and with long real-length partners (same batch width: the only change is how many of
the partners' positions are real), and records max |Δ logits| over the sequences' real positions
per mode. Controls only (pre-registration 2: both hold by construction): ``batch`` above
``DEPENDENT_MIN`` in training mode, ``layer`` and ``rms`` below ``INVARIANT_MAX``, every seed.

F9 — ``analyze padding`` (``analysis/padding.csv``) feeds each BN checkpoint the training stream
batched three ways (``CONDITIONS``) and measures at every BN layer |mean over all positions −
mean over real tokens| / std over real tokens, averaged over features and layers; the loss
comparison uses the sub-sweeps ``pad_to_max`` and ``small_batch`` (each variant at its best
grid rate). Evidence: the pad-to-max shift of ``batch`` >= ``POLLUTION_MIN``; ``masked_batch``
ends better than ``batch`` by ``LOSS_MARGIN`` (PreciseBN test loss, as F3) under pad-to-max and
under small batches. Control: the pad-to-max shift is above the bucketed one (the shift is
proportional to the pad share: arithmetic, not a finding).
"""

from __future__ import annotations

from trainer.analysis.padding import CONDITIONS
from trainer.findings.claim import BASE, BN_NORMS, Finding, line
from trainer.findings.core import GROUP, compare_losses, every_seed
from trainer.findings.reference import Reference, seed_values
from trainer.findings.thresholds import (DEPENDENT_MIN, FLAT_MAX, INVARIANT_MAX, LOSS_MARGIN,
                                         POLLUTION_MIN, SMALL_BATCH_GAP)
from trainer.results.metrics import final_test_loss_precise_bn
from trainer.results.rule import threshold
from trainer.rundir import analysis_output

# The sub-sweep whose runs trained with each of the padding analysis' batchings (F9's pad share)
TRAINED_IN = {"bucketed": GROUP, "pad_to_max": "pad_to_max", "small_batch": "small_batch"}


def f7(ref: Reference) -> Finding:
    f = Finding("F7", """BN's output depends on the batch size in training mode and not with its
                    running statistics; LN's depends on neither""",
                """mean loss of the same 64 full-length test sequences evaluated B at a time, B = 1
                    … 64, training and inference mode, final checkpoints of the best-rate Pre-LN
                    and BN runs (`analyze batch-size`)""",
                f"""BN in training mode at B = 1 not worse than at B = 64 by {SMALL_BATCH_GAP}
                    nats; LN, or BN with running statistics, moving by > {FLAT_MAX:g} across B is
                    a failed control""", plot=analysis_output("batch-size", ".png"))
    csv = analysis_output("batch-size")
    rows = ref.analysis(f, csv)
    if f.missing:
        return f

    def spread(norm: str, mode: str) -> dict:
        out = {}
        for seed in sorted({r["seed"] for r in rows if r["norm"] == norm}):
            xs = [float(r["loss"]) for r in rows if r["norm"] == norm and r["seed"] == seed
                  and r["mode"] == mode and r["batch_size"] != "1x1"]
            out[seed] = max(xs) - min(xs) if xs else None
        return out

    def small_gap(norm: str) -> dict:
        out = {}
        for seed in sorted({r["seed"] for r in rows if r["norm"] == norm}):
            at = {r["batch_size"]: float(r["loss"]) for r in rows if r["norm"] == norm
                  and r["seed"] == seed and r["mode"] == "train"}
            sizes = sorted(int(b) for b in at if b != "1x1")
            out[seed] = at[str(sizes[0])] - at[str(sizes[-1])] if sizes else None
        return out

    norms = sorted({r["norm"] for r in rows})
    for norm in ("layer", "batch"):  # both judged: each needs MIN_SEEDS seeds
        seed_values(f, rows, csv, "loss", norm=norm)
    if f.missing:
        return f
    for norm in norms:
        for mode in ("train", "inference"):
            f.lines.append(line(f"{norm}, {mode} mode, max − min over B", spread(norm, mode)))
        f.lines.append(line(f"{norm}, training mode, loss(B=1) − loss(B=64)", small_gap(norm)))
        for mode in ("train", "inference"):  # reported, not part of the verdict
            f.lines.append(line(f"{norm}, single-token batches (B = 1, T = 1), {mode} mode", {
                r["seed"]: float(r["loss"]) for r in rows
                if r["norm"] == norm and r["mode"] == mode and r["batch_size"] == "1x1"}))
    f.control("LN flat over B in both modes", all(every_seed(spread("layer", m), FLAT_MAX, "below")
                                                  for m in ("train", "inference")))
    f.control("BN flat over B with running statistics",
              every_seed(spread("batch", "inference"), FLAT_MAX, "below"))
    f.evidence("BN worse at small batches in training mode",
               threshold(small_gap("batch"), SMALL_BATCH_GAP, "above"))
    return f


def f8(ref: Reference) -> Finding:
    f = Finding("F8", """A sequence's output does not depend on its batch partners' real lengths
                    for per-token norms (LayerNorm, RMSNorm), and does for BN""",
                """max |Δ logits| over a half-length sequence's real positions, batched with
                    partners of 8–16 vs full real length (same batch width), max over 16 sequences,
                    final checkpoints of the best-rate Pre + residual runs
                    (`analyze composition`)""",
                f"""nothing measured here could: both parts hold by construction, so they are
                    controls: BN moving logits by ≤ {DEPENDENT_MIN:g} in training mode, or
                    LayerNorm or RMSNorm moving them by ≥ {INVARIANT_MAX:g}, is a broken
                    implementation""",
                plot=analysis_output("composition", ".png"))
    csv = analysis_output("composition")
    rows = ref.analysis(f, csv)
    if f.missing:
        return f
    train = {n: seed_values(f, rows, csv, "max_abs_delta", norm=n, mode="train")
             for n in ("layer", "rms", "batch")}
    if f.missing:
        return f
    for n in dict.fromkeys(r["norm"] for r in rows):  # masked_batch etc. reported, not judged
        for mode in ("train", "inference"):
            f.lines.append(line(f"{n}, {mode} mode",
                                seed_values(None, rows, csv, "max_abs_delta", norm=n, mode=mode),
                                log=True))
    f.control("per-token norms invariant in training mode",
              all(every_seed(train[n], INVARIANT_MAX, "below") for n in ("layer", "rms")))
    # by definition (batch statistics read the partners): a control (pre-registration 2)
    f.control("BN depends on the partners in training mode (batch statistics)",
              every_seed(train["batch"], DEPENDENT_MIN, "above"))
    return f


def f9(ref: Reference) -> Finding:
    f = Finding("F9", """Padding pollutes naive BN statistics, more so as pads grow; masking fixes
                    it""", """|mean over all positions − mean over real tokens| / std over real
                    tokens (with BN's ε) at every block's BN input, naive `batch`, the training
                    stream batched three ways (`analyze padding`); final eval loss (population
                    statistics, test split) of `batch` vs `masked_batch` in the pad-to-max and
                    small-batch sub-sweeps, each at its best grid rate""",
                f"""a pad-to-max shift < {POLLUTION_MIN} on some seed or over the interval, or
                    `masked_batch` not better than `batch` by {LOSS_MARGIN} nats under pad-to-max
                    or under small batches""", plot=analysis_output("padding", ".png"))
    csv = analysis_output("padding")
    rows = ref.analysis(f, csv)
    loss = {(g, n): ref.per_seed(f, g, final_test_loss_precise_bn, norm=n, **BASE)
            for g in ("pad_to_max", "small_batch") for n in BN_NORMS}
    if f.missing:
        return f
    shift = {c: seed_values(f, rows, csv, "shift", norm="batch", condition=c) for c in CONDITIONS}
    if f.missing:
        return f
    for n in dict.fromkeys(r["norm"] for r in rows):
        for c in CONDITIONS:
            pads = seed_values(None, rows, csv, "pad_fraction", norm=n, condition=c)
            f.lines.append(line(f"shift, {n}, {c} ({sum(pads.values()) / max(len(pads), 1):.1%} "
                                "pads in the analysed batches)",
                                seed_values(None, rows, csv, "shift", norm=n, condition=c)))
    context = Finding("", "", "", "")  # the bucketed losses (F3): context, not in the verdict
    for n in BN_NORMS:
        bucketed = ref.per_seed(context, GROUP, final_test_loss_precise_bn, norm=n, warmup_steps=50,
                                **BASE)
        if bucketed:
            f.lines.append(line(f"test loss, {n}, bucketed ({GROUP})", bucketed))
    for (g, n), v in loss.items():
        f.lines.append(line(f"test loss, {n}, {g}", v))
    f.lines.append("pad fraction of the training stream: " + ", ".join(
        f"{c} {ref.pad_fraction(TRAINED_IN[c]):.1%}" for c in CONDITIONS))
    f.control("more pads, more shift (the shift is proportional to the pad share)",
              all(shift["pad_to_max"][s] > shift["bucketed"].get(s, float("inf"))
                  for s in shift["pad_to_max"]))
    f.evidence("pad-to-max pollutes naive BN",
               threshold(shift["pad_to_max"], POLLUTION_MIN, "above"))
    for g in ("pad_to_max", "small_batch"):
        compare_losses(f, ref, f"masked BN ends better under {g}", loss[(g, "batch")],
                       loss[(g, "masked_batch")], group=g)
    return f


CLAIMS: tuple = (f7, f8, f9)
