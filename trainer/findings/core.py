"""The claims of the teaching texts, measured on the reference runs -> results/README.md.

    python -m trainer findings results/reference     # or python -m trainer.findings.core

Every number on that page comes from here, computed from the committed runs (summary.json,
event files, analysis CSVs); nothing is written by hand. The rules, fixed before the runs:

- every compared variant has >= 3 seeds; values are listed per seed with mean ± 95 % t-interval;
- a comparison shows only when it holds for every seed *and* the intervals do not overlap
  (``metrics.above``); a threshold test only when every seed and the whole interval pass it
  (``metrics.beyond``);
- a claim with several parts is "yes" only when every part shows ("partly" when some do);
- a claim whose runs are missing says "not run" and names them; a claim that does not show is
  reported with its numbers, never dropped;
- the thresholds are the named constants of ``thresholds``, each with the reason for its value.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainer.atomic import write_text
from trainer.telemetry.spikes import RULE as SPIKE_RULE
from trainer.results import baselines as bl
from trainer.findings.claim import BASE, BN_NORMS, TOKEN_NORMS, Finding, fmt_seeds, line
from trainer.results.metrics import (above, beyond, final_loss, final_probe, gap, interval,
                                     precise_bn_loss)
from trainer.findings.reference import Reference
from trainer.findings.thresholds import COLLAPSE_MARGIN, DEPENDENT_MIN, FLAT_MAX, FRAGILE_SHARE, GAP_MIN, GAP_ZERO, GROWTH_FACTOR, HEALTHY_BELOW_BIGRAM, INVARIANT_MAX, LOSS_MARGIN, MIN_SEEDS, PROFILE_GROWTH, SMALL_BATCH_GAP, WARMUP_MARGIN



def scale(ref: Reference) -> Finding:
    f = Finding("S", """At this scale the healthy model (Pre-LN + residual) learns: it ends clearly
                    below the bigram table, so the variants are compared on a model that uses
                    context""",
                "final eval loss vs unigram/bigram cross-entropy of the same eval tokens",
                f"Pre-LN's mean eval loss above bigram − {HEALTHY_BELOW_BIGRAM}",
                plot="grid/plots/loss.png")
    loss = ref.per_seed(f, "grid", final_loss, norm="layer", **BASE)
    base = ref.baselines("grid")
    if f.missing or base is None:
        f.missing = f.missing or ["grid/baselines.json"]
        return f
    iv = interval(loss.values())
    f.lines += [line("Pre-LN + residual", loss),
                f"unigram {base['unigram']:.4g}, bigram {base['bigram']:.4g} nats"]
    f.parts.append(("below bigram by the margin", iv.mean <= base["bigram"] - HEALTHY_BELOW_BIGRAM))
    return f


def f1(ref: Reference) -> Finding:
    f = Finding("F1", """LN-style norms give a sequence the same output whatever its batch; BN does
                    not""", """max |Δ logits| of one sequence alone vs in a batch with others
                    and extra pads, training mode (`probe/batch_invariance`), final""",
                f"""a per-token norm moving logits by > {INVARIANT_MAX:g}, or a BN by <
                    {DEPENDENT_MIN:g}""", plot="grid/plots/invariance_and_gap.png")
    inv = {n: ref.per_seed(f, "grid", lambda r: final_probe(r, "probe/batch_invariance"), norm=n, **BASE)
           for n in TOKEN_NORMS + BN_NORMS}
    if f.missing:
        return f
    f.lines += [line(n, v) for n, v in inv.items()]
    f.parts.append(("per-token norms invariant",
                    all(beyond(inv[n], INVARIANT_MAX, "below") for n in TOKEN_NORMS)))
    f.parts.append(("batch norms depend on the batch",
                    all(beyond(inv[n], DEPENDENT_MIN, "above") for n in BN_NORMS)))
    return f


def _mode_gap(rows: list[dict], norm: str) -> dict:
    """Per seed: training-mode minus inference-mode loss of the same sequences at the largest B."""
    out = {}
    for seed in sorted({r["seed"] for r in rows if r["norm"] == norm}):
        at = {(r["mode"], r["batch_size"]): float(r["loss"]) for r in rows
              if r["norm"] == norm and r["seed"] == seed and r["batch_size"] != "1x1"}
        big = str(max(int(b) for _, b in at))
        out[seed] = at[("train", big)] - at[("inference", big)]
    return out


def f2(ref: Reference) -> Finding:
    f = Finding("F2", """BN uses batch statistics in training and running statistics at inference,
                    so the two disagree; LN is the same function in both""",
                """BN: eval loss (inference) − eval loss (batch statistics), with the EMA running
                    statistics and with population statistics recomputed after training
                    (PreciseBN); LN: training- minus inference-mode loss of the same 64 sequences
                    at B = 64 (`analyze batch-size`; the training loop reuses LN's inference
                    program, so its own train-mode eval would be equal by construction)""",
                f"LN with |gap| > {GAP_ZERO:g}, or BN's population-statistics gap < {GAP_MIN} nats",
                plot="grid/plots/invariance_and_gap.png")
    rows = ref.analysis(f, "analysis/batch_size.csv")
    ema = {n: ref.per_seed(f, "grid", gap, norm=n, **BASE)
           for n in BN_NORMS}
    pop = {n: ref.per_seed(f, "grid", lambda r: gap(r, "final_eval_loss_precise_bn"), norm=n,
                           **BASE) for n in BN_NORMS}
    ln = _mode_gap(rows, "layer")
    if not f.missing and len(ln) < MIN_SEEDS:
        f.missing.append(f"analysis/batch_size.csv: layer on {MIN_SEEDS} seeds")
    if f.missing:
        return f
    f.lines.append(line("layer, training − inference mode", ln))
    f.lines += [line(f"{n}, EMA statistics", ema[n]) for n in BN_NORMS]
    f.lines += [line(f"{n}, population statistics", pop[n]) for n in BN_NORMS]
    f.parts.append(("LN: no gap", beyond({s: abs(v) for s, v in ln.items()}, GAP_ZERO, "below")))
    f.parts.append(("BN: a gap that population statistics do not remove",
                    beyond(pop["batch"], GAP_MIN, "above")))
    return f


def f3(ref: Reference) -> Finding:
    f = Finding("F3", "Padding pollutes BN statistics unless pads are masked",
                """final eval loss (inference, population statistics) of naive `batch` vs
                    `masked_batch`, Pre-LN + residual""",
                f"""`batch` not worse than `masked_batch` by {LOSS_MARGIN} nats on every seed with
                    separate intervals""", plot="grid/plots/loss.png")
    loss = {n: ref.per_seed(f, "grid", precise_bn_loss,
                            norm=n, **BASE) for n in BN_NORMS}
    if f.missing:
        return f
    f.lines += [line(n, v) for n, v in loss.items()]
    f.lines.append(f"pad fraction of the training stream: {ref.pad_fraction('grid'):.1%}")
    f.parts.append(("masked BN ends better", above(loss["batch"], loss["masked_batch"], LOSS_MARGIN)))
    return f


def f4(ref: Reference) -> Finding:
    f = Finding("F4", """Without residual connections a deep stack loses its tokens' identity:
                    their vectors collapse toward one (Dong et al. 2021), and it trains worse""",
                """centred rank-1 residual ||X − 1·meanᵀ|| / ||X|| of the last block's tokens
                    (`probe/rank1_residual`; 0 = collapse) at step 0 and at the end; final eval
                    loss; LayerNorm, Pre-LN""",
                f"""the residual-free stack not below the residual one by {COLLAPSE_MARGIN} at
                    init, or not worse in loss by {LOSS_MARGIN} nats""",
                plot="grid/plots/collapse_by_depth.png")
    last = ref.num_layers("grid") - 1
    tag = f"probe/rank1_residual/block_{last}"
    at = {(r, when): ref.per_seed(f, "grid", (lambda run, w=when: run.eval_at(tag, w)), norm="layer",
                                  residual=r, placement="pre")
          for r in ("true", "false") for when in ("first", "last")}
    loss = {r: ref.per_seed(f, "grid", final_loss, norm="layer", residual=r, placement="pre")
            for r in ("true", "false")}
    if f.missing:
        return f
    for (r, when), v in at.items():
        f.lines.append(line(f"residual={r}, {'step 0' if when == 'first' else 'final'}", v))
    f.lines += [line(f"eval loss, residual={r}", v) for r, v in loss.items()]
    f.parts.append(("collapsed at init without residual",
                    above(at[("true", "first")], at[("false", "first")], COLLAPSE_MARGIN)))
    f.parts.append(("trains worse without residual", above(loss["false"], loss["true"], LOSS_MARGIN)))
    return f


def _ratio(a, b):
    return None if a is None or not b else a / b


def _fragile(run) -> bool:
    return run.status == "diverged" or (run.summary.get("loss_spikes") or 0) > 0


def f5(ref: Reference) -> Finding:
    f = Finding("F5", """Without normalization the residual stream grows with depth, and training
                    is fragile at high learning rates""",
                f"""token std of the stream, last block / first block, end of training (Pre,
                    residual); runs that diverged or spiked ({SPIKE_RULE}) in the high-LR
                    slice""",
                f"""no-norm growth below {GROWTH_FACTOR}× LN's, or no-norm runs fragile in not more
                    than {FRAGILE_SHARE:.0%} more of the high-LR runs than Pre-LN""",
                plot="grid/plots/token_std_by_depth.png")
    last = ref.num_layers("grid") - 1

    def growth(run):
        return _ratio(run.train_at(f"activation/block_{last}/token_std", "last"),
                      run.train_at("activation/block_0/token_std", "last"))

    g = {n: ref.per_seed(f, "grid", growth, norm=n, **BASE) for n in ("layer", "none")}
    runs = {n: ref.select(f, "lr_slice", norm=n, placement="pre") for n in ("layer", "none")}
    if f.missing:
        return f
    f.lines += [line(f"growth, {n}", v) for n, v in g.items()]
    share = {}
    for n, rs in runs.items():
        bad = [r for r in rs if _fragile(r)]
        share[n] = len(bad) / len(rs)
        f.lines.append(f"fragile at high LR, {n}: {len(bad)}/{len(rs)} "
                       f"({', '.join(_fragility(r) for r in rs)})")
    scaled = {s: GROWTH_FACTOR * v for s, v in g["layer"].items() if v is not None}
    f.parts.append(("stream grows without a norm", above(g["none"], scaled)))
    f.parts.append(("fragile at high LR", share["none"] - share["layer"] >= FRAGILE_SHARE))
    return f


def _fragility(run) -> str:
    if run.status == "diverged":
        return f"diverged at {run.summary.get('diverged_step')}"
    return f"{run.summary.get('loss_spikes') or 0} spikes"


def f6(ref: Reference) -> Finding:
    f = Finding("F6", """Post-LN needs learning-rate warm-up, Pre-LN does not (Xiong et al. 2020);
                    at init Post-LN's gradient grows toward the output blocks, Pre-LN's does not""",
                """final eval loss at a high LR with and without warm-up (diverged = ∞); FFN-out
                    gradient norm last/first block at init (`analyze grad-profile`, Xavier init as
                    in the paper); reported besides: the same ratio over training in the high-LR
                    slice (`grad_norm/ffn_out/block_i`)""",
                f"""Post-LN without warm-up not worse by {WARMUP_MARGIN} nats, Pre-LN without
                    warm-up not below bigram, or Post-LN's init ratio ≤ {PROFILE_GROWTH}""",
                plot="lr_slice/plots/loss.png")
    w = ref.warmups("lr_slice")
    loss = {(p, x): ref.per_seed(f, "lr_slice", final_loss, norm="layer", placement=p, warmup_steps=x)
            for p in ("pre", "post") for x in w}
    profile = ref.grad_profile(f, "init")
    base = ref.baselines("lr_slice")
    if f.missing:
        return f
    for (p, x), v in loss.items():
        f.lines.append(line(f"{p}-LN, warm-up {x}", v))
    last = ref.num_layers("lr_slice") - 1
    for (p, x) in loss:  # reported, not part of the verdict: how the profile evolves in training
        for when in ("first", "mid", "last"):
            f.lines.append(line(f"{p}-LN, warm-up {x}: FFN-out gradient norm last/first block, "
                                f"{ {'first': 'step 0', 'mid': 'mid-training', 'last': 'final'}[when]}",
                                ref.per_seed(f, "lr_slice", lambda r, w=when: _ratio(
                                    r.train_at(f"grad_norm/ffn_out/block_{last}", w),
                                    r.train_at("grad_norm/ffn_out/block_0", w)),
                                    norm="layer", placement=p, warmup_steps=x)))
    for init, ratios in sorted(profile.items()):
        f.lines.append(f"init ratio, {init}: " + ", ".join(
            f"{p} {fmt_seeds(v)}" for p, v in sorted(ratios.items())))
    zero, warm = min(w), max(w)
    f.parts.append(("Post-LN needs warm-up", above(loss[("post", zero)], loss[("post", warm)],
                                                   WARMUP_MARGIN)))
    f.parts.append(("Pre-LN trains without it",
                    base is not None and beyond(loss[("pre", zero)], base["bigram"], "below")))
    xavier = profile.get("xavier", {})
    f.parts.append(("Post-LN's init gradient grows with depth, Pre-LN's does not",
                    bool(xavier) and beyond(xavier.get("post", {}), PROFILE_GROWTH, "above")
                    and beyond(xavier.get("pre", {}), PROFILE_GROWTH, "below")))
    return f


def f7(ref: Reference) -> Finding:
    f = Finding("F7", """BN's output depends on the batch size in training mode and not with its
                    running statistics; LN's depends on neither""",
                """mean eval loss of the same 64 full-length validation sequences evaluated B at a
                    time, B = 1 … 64, training and inference mode, final checkpoints of the grid's
                    Pre-LN runs (`analyze batch-size`)""",
                f"""LN moving by > {FLAT_MAX:g} across B in either mode, BN in inference mode
                    moving by > {FLAT_MAX:g}, or BN in training mode at B = 1 not worse than at B =
                    64 by {SMALL_BATCH_GAP} nats""", plot="analysis/batch_size.png")
    rows = ref.analysis(f, "analysis/batch_size.csv")
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
    for norm in ("layer", "batch"):
        if norm not in norms or len({r["seed"] for r in rows if r["norm"] == norm}) < MIN_SEEDS:
            f.missing.append(f"analysis/batch_size.csv: {norm} on {MIN_SEEDS} seeds")
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
    f.parts.append(("LN flat in both modes", all(beyond(spread("layer", m), FLAT_MAX, "below")
                                                for m in ("train", "inference"))))
    f.parts.append(("BN worse at small batches in training mode",
                    beyond(small_gap("batch"), SMALL_BATCH_GAP, "above")))
    f.parts.append(("BN flat with running statistics", beyond(spread("batch", "inference"),
                                                              FLAT_MAX, "below")))
    return f


CLAIMS = (scale, f1, f2, f3, f4, f5, f6, f7)


def all_claims() -> tuple:
    """Every claim in page order: this module's, then the other claim modules'."""
    from trainer.findings import batch, depth, ln, stream

    return CLAIMS + batch.CLAIMS + depth.CLAIMS + ln.CLAIMS + stream.CLAIMS


def measure(ref: Reference) -> list[Finding]:
    """Every claim measured, in page order: S, then F1, F2, … by number."""
    return sorted((claim(ref) for claim in all_claims()),
                  key=lambda f: -1 if f.id == "S" else int(f.id.lstrip("F")))


def render(ref: Reference, findings: list[Finding]) -> str:
    from trainer.findings.page import render_page

    return render_page(ref, findings)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0] if argv else "results/reference")
    ref = Reference(root)
    from trainer.findings.figures import write_claim_figures

    write_claim_figures(ref)
    text = render(ref, measure(ref))
    write_text(root.parent / "README.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
