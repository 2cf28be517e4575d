"""The scale (S) and claims F1–F4, judged on the reference runs at each variant's own best rate.

    python -m trainer findings results/reference     # or python -m trainer.findings.page

Every number on the page comes from the committed runs (summary.json, event files, analysis
CSVs); nothing is written by hand. The rules (``claim.verdict``, ``metrics.above``/``beyond``)
and the thresholds (``thresholds``) were fixed before the runs (results/PREREGISTRATION.md):

- the runs a claim reads are the sub-sweep ``best`` (every variant at its own best learning rate,
  chosen on the validation loss of the ``lr`` grid) and the sub-sweeps built the same way;
- losses are judged on the test split (``final_test_loss``), which no choice read;
- every compared variant has >= ``MIN_SEEDS`` seeds (``HEADLINE_SEEDS`` for the headline
  comparisons); values are listed per seed with mean ± 95 % t-interval;
- every evidence part is judged by pre-registration 2's rule (``metrics.compare``,
  ``not_worse``, ``threshold``): *shown*, *refuted* or *underpowered*; a comparison reads the
  paired per-seed difference; maxima and ratios on a log scale;
- a part that holds by construction is a *control*: shown, checked on every seed, never counted;
- a claim whose runs are missing says "not run" and names them; a claim that does not show is
  reported with its numbers, never dropped.
"""

from __future__ import annotations

from trainer.findings.claim import BASE, BN_NORMS, TOKEN_NORMS, Finding, line
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (COLLAPSE_MARGIN, DEPENDENT_MIN, GAP_MIN, GAP_ZERO,
                                         HEALTHY_BELOW_BIGRAM, INVARIANT_MAX,
                                         LOSS_MARGIN)
from trainer.results.baselines import at_plateau
from trainer.results.metrics import (final_probe, final_test_gap, final_test_loss,
                                     final_test_loss_precise_bn, interval)
from trainer.results.rule import compare, threshold
from trainer.rundir import analysis_output

GROUP = "best"  # every variant of the learning-rate table at its own best rate


def every_seed(values: dict, threshold: float, side: str) -> bool:
    """A control's check: every seed's value ``side`` ("above"/"below") ``threshold`` (no
    interval: it holds by construction, so any seed that does not is a bug)."""
    xs = list(values.values())
    if not xs or any(x is None for x in xs):
        return False
    return all((x > threshold) if side == "above" else (x < threshold) for x in xs)


def plateau_pair(ref: Reference, a: dict, b: dict, group: str = GROUP) -> str:
    """Why a loss comparison of two variants cannot be judged ("" when it can): both end at the
    unigram plateau of the test tokens, so neither learned anything to compare."""
    base = ref.baselines(group)
    means = [interval(v.values()) for v in (a, b)]
    if base and all(m is not None and at_plateau(m.mean, base) for m in means):
        return "both variants end at the unigram plateau at their best rates"
    return ""


def compare_losses(f: Finding, ref: Reference, text: str, worse: dict, better: dict,
                   margin: float = LOSS_MARGIN, group: str = GROUP) -> None:
    """An evidence part: ``worse`` ends above ``better`` by ``margin`` (``metrics.compare``:
    the paired difference); cannot be judged when both sit at the plateau."""
    why = plateau_pair(ref, worse, better, group)
    f.evidence(text, None if why else compare(worse, better, margin), why)


def scale(ref: Reference) -> Finding:
    f = Finding("S", """At this scale the healthy model (Pre-LN + residual, at its best rate) learns:
                    it ends clearly below the bigram table, so the variants are compared on a model
                    that uses context""",
                "final test loss vs unigram/bigram cross-entropy of the same test tokens",
                f"""Pre-LN's test loss not below bigram − {HEALTHY_BELOW_BIGRAM} on every seed
                    and over its whole interval""", plot=f"{GROUP}/plots/loss.png")
    loss = ref.per_seed(f, GROUP, final_test_loss, seeds=ref.headline_seeds, norm="layer", warmup_steps=50,
                        **BASE)
    base = ref.baselines(GROUP)
    if f.missing or base is None:
        f.missing = f.missing or [f"{GROUP}/baselines.json with the test split"]
        return f
    f.lines += [line("Pre-LN + residual", loss),
                f"test tokens: unigram {base['unigram']:.4g}, bigram {base['bigram']:.4g} nats"]
    f.evidence("below bigram by the margin",
               threshold(loss, base["bigram"] - HEALTHY_BELOW_BIGRAM, "below"))
    return f


def f1(ref: Reference) -> Finding:
    f = Finding("F1", """LN-style norms give a sequence the same output whatever its batch; BN does
                    not""", """max |Δ logits| of one sequence alone vs in a batch with others
                    and extra pads, training mode (`probe/batch_invariance`), final""",
                f"""nothing measured here could: both parts hold by construction (batch
                    statistics read the batch; a per-token norm reads one token), so they are
                    controls: a BN whose logits move by < {DEPENDENT_MIN:g}, or a per-token norm
                    moving them by > {INVARIANT_MAX:g}, is a broken implementation""",
                plot=f"{GROUP}/plots/invariance_and_gap.png")
    inv = {n: ref.per_seed(f, GROUP, lambda r: final_probe(r, "probe/batch_invariance"), norm=n,
                           warmup_steps=50, **BASE) for n in TOKEN_NORMS + BN_NORMS}
    if f.missing:
        return f
    f.lines += [line(n, v, log=True) for n, v in inv.items()]
    f.control("per-token norms invariant (each token normalised over its own features)",
              all(every_seed(inv[n], INVARIANT_MAX, "below") for n in TOKEN_NORMS))
    for n in BN_NORMS:  # by definition (pre-registration 2): a control, not evidence
        f.control(f"{n} depends on the batch in training mode (batch statistics)",
                  every_seed(inv[n], DEPENDENT_MIN, "above"))
    return f


def f2(ref: Reference) -> Finding:
    f = Finding("F2", """BN uses batch statistics in training and running statistics at inference,
                    so the two disagree, and recomputing the statistics over the population does
                    not remove the gap; LN is the same function in both""",
                """BN: test loss (inference) − test loss with batch statistics, with the EMA
                    running statistics and with population statistics recomputed after training
                    (PreciseBN); LN: training- minus inference-mode loss of the same 64 test
                    sequences at B = 64 (`analyze batch-size`)""",
                f"""BN's population-statistics gap < {GAP_MIN} nats; LN with |gap| > {GAP_ZERO:g}
                    is a failed control""", plot=f"{GROUP}/plots/f2_test_gap.png")
    csv = analysis_output("batch-size")
    rows = ref.analysis(f, csv)
    want = dict(warmup_steps=50, **BASE)
    ema = {n: ref.per_seed(f, GROUP, final_test_gap, norm=n, **want) for n in BN_NORMS}
    pop = {n: ref.per_seed(f, GROUP, lambda r: final_test_gap(r, precise=True), norm=n, **want)
           for n in BN_NORMS}
    ln = mode_gap(rows, "layer")
    if not f.missing and not ln:
        f.missing.append(f"{csv}: layer")
    if f.missing:
        return f
    f.lines.append(line("layer, training − inference mode", ln))
    f.lines += [line(f"{n}, EMA statistics", ema[n]) for n in BN_NORMS]
    f.lines += [line(f"{n}, population statistics", pop[n]) for n in BN_NORMS]
    f.control("LN: no gap (one function in both modes)",
              every_seed({s: abs(v) for s, v in ln.items()}, GAP_ZERO, "below"))
    for n in BN_NORMS:
        f.evidence(f"{n}: a gap that population statistics do not remove",
                   threshold(pop[n], GAP_MIN, "above"))
    return f


def mode_gap(rows: list[dict], norm: str) -> dict:
    """Per seed: training-mode minus inference-mode loss of the same sequences at the largest B."""
    out = {}
    for seed in sorted({r["seed"] for r in rows if r["norm"] == norm}):
        at = {(r["mode"], r["batch_size"]): float(r["loss"]) for r in rows
              if r["norm"] == norm and r["seed"] == seed and r["batch_size"] != "1x1"}
        big = str(max(int(b) for _, b in at))
        out[seed] = at[("train", big)] - at[("inference", big)]
    return out


def f3(ref: Reference) -> Finding:
    f = Finding("F3", """On the bucketed training stream (6 % pads), padding pollutes BN statistics
                    enough to cost loss unless pads are masked (F9 asks the same on streams with
                    more pads)""",
                """final test loss (inference, population statistics) of naive `batch` vs
                    `masked_batch`, Pre-LN + residual, each at its own best rate""",
                f"""the paired difference `batch` − `masked_batch` shown below {LOSS_MARGIN} nats
                    (its 95 % interval below the margin), on the bucketed stream or under
                    pad-to-max""", plot=f"{GROUP}/plots/f3_precise_bn.png")
    loss = {n: ref.per_seed(f, GROUP, final_test_loss_precise_bn, seeds=ref.headline_seeds,
                            norm=n, warmup_steps=50, **BASE) for n in BN_NORMS}
    # pre-registration 2: the same question where pads double (F9's pad-to-max runs)
    pad = ({n: ref.per_seed(f, "pad_to_max", final_test_loss_precise_bn, norm=n, **BASE)
            for n in BN_NORMS} if ref.designed("pad_to_max") else None)
    if f.missing:
        return f
    f.lines += [line(n, v) for n, v in loss.items()]
    f.lines.append(f"pad fraction of the training stream: {ref.pad_fraction(GROUP):.1%}")
    compare_losses(f, ref, "masked BN ends better", loss["batch"], loss["masked_batch"])
    if pad is not None:
        f.lines += [line(f"{n}, pad-to-max", v) for n, v in pad.items()]
        f.lines.append(f"pad fraction under pad-to-max: {ref.pad_fraction('pad_to_max'):.1%}")
        compare_losses(f, ref, "masked BN ends better under pad-to-max", pad["batch"],
                       pad["masked_batch"], group="pad_to_max")
    return f


def f4(ref: Reference) -> Finding:
    f = Finding("F4", """Without residual connections a deep stack loses its tokens' identity:
                    their vectors collapse toward one (Dong et al. 2021), and it trains worse""",
                """centred rank-1 residual ||X − 1·meanᵀ|| / ||X|| of the last block's tokens
                    (`probe/rank1_residual`; 0 = collapse) at step 0 and at the end; final test
                    loss; LayerNorm, Pre-LN, each at its own best rate""",
                f"""the residual-free stack not below the residual one by {COLLAPSE_MARGIN} at
                    init, or not worse in test loss by {LOSS_MARGIN} nats""",
                plot=f"{GROUP}/plots/collapse_by_depth.png")
    last = ref.num_layers(GROUP) - 1
    tag = f"probe/rank1_residual/block_{last}"
    want = dict(norm="layer", placement="pre", warmup_steps=50)
    at = {(r, when): ref.per_seed(f, GROUP, (lambda run, w=when: run.eval_at(tag, w)),
                                  seeds=ref.headline_seeds, residual=r, **want)
          for r in ("true", "false") for when in ("first", "last")}
    loss = {r: ref.per_seed(f, GROUP, final_test_loss, seeds=ref.headline_seeds, residual=r, **want)
            for r in ("true", "false")}
    if f.missing:
        return f
    for (r, when), v in at.items():
        f.lines.append(line(f"residual={r}, {'step 0' if when == 'first' else 'final'}", v))
    f.lines += [line(f"test loss, residual={r}", v) for r, v in loss.items()]
    f.evidence("collapsed at init without residual",
               compare(at[("true", "first")], at[("false", "first")], COLLAPSE_MARGIN))
    compare_losses(f, ref, "trains worse without residual", loss["false"], loss["true"])
    return f


CLAIMS = (scale, f1, f2, f3, f4)
