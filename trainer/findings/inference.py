"""The inference claims F15–F19 (issue #24), pre-registered in the addendum of
results/PREREGISTRATION.md with the thresholds of ``thresholds``' F15–F19 section; the rules are
``core``'s (pre-registration 2: paired differences, thresholds, shown / refuted /
underpowered). Checkpoints: ``best`` seeds 0–2 of the Pre + residual variants of each norm; ``affine``
seeds 0–2 for F19.

- F15 streaming (``analyze decode``): evidence: the naive and masked BN *models* served at batch
  1, token by token with the KV cache and running statistics (a fixed per-feature map), worse
  than the LN model served the same way by ``LOSS_MARGIN`` (paired by seed) (inconclusive when BN and LN both sit at the plateau). Controls: every norm's
  request alone vs in a continuous batch below ``INVARIANT_MAX``; BN with batch statistics at
  batch 1 (each token normalised by itself: output β) at or above unigram − ``PLATEAU_MARGIN``.
- F16 growing sequence (``analyze decode``): controls only ("checks only"): every norm's logits
  at positions 0…t−1 from t vs t + k tokens below ``INVARIANT_MAX`` in inference mode; BN in
  training mode above ``DEPENDENT_MIN``.
- F17 LN backward (``analyze ln-backward``): evidence: the texts' short formula matches autodiff
  within ``FORMULA_TOL`` (max over blocks, every seed and the interval); control: the full one.
- F18 ε and the two-pass variance (``analyze ln-epsilon``; a mechanism demonstration):
  evidence: the lab's LayerNorm keeps the offset token's spread and a constant token finite;
  controls: one-pass loses the spread at every ε, two-pass keeps it; ε = 0 turns a constant
  token into NaN, ε = 1e-5 into 0.
- F19 γ/β and scale (``analyze stream``): evidence: the scale probe's R² at the last block with
  γ/β above without by ``SCALE_PROBE_MARGIN``; control: read from x̂ it is the same
  (``PROBE_SAME_TOL``).
"""

from __future__ import annotations

import math

from trainer.analysis.ln_epsilon import METHODS, describe_output
from trainer.findings.claim import BN_NORMS, TOKEN_NORMS, Finding, all_of, line
from trainer.findings.core import GROUP, compare_losses, every_seed
from trainer.findings.ln import definition_rows
from trainer.findings.reference import Reference, seed_values
from trainer.findings.thresholds import (DEPENDENT_MIN, EPSILONS, FORMULA_TOL, INVARIANT_MAX,
                                         LOSS_MARGIN, OFFSET, OFFSET_SPREAD, PLATEAU_MARGIN,
                                         PROBE_SAME_TOL, SCALE_PROBE_MARGIN, SPREAD_KEPT,
                                         SPREAD_LOST)
from trainer.rundir import analysis_output
from trainer.results.rule import REFUTED, SHOWN, Judged, compare, threshold

DECODE_CSV, LN_BACKWARD_CSV, LN_EPSILON_CSV, STREAM_CSV = map(
    analysis_output, ("decode", "ln-backward", "ln-epsilon", "stream"))
NORMS = TOKEN_NORMS + BN_NORMS
ROW = dict(residual="true")  # the best-rate Pre + residual variants (every analysed run is Pre)


def _decode(f, rows: list[dict], column: str, norms=NORMS) -> dict:
    """norm -> seed -> ``column`` of ``analyze decode``'s rows."""
    return {n: seed_values(f, rows, DECODE_CSV, column, norm=n, **ROW) for n in norms}


def f15(ref: Reference) -> Finding:
    f = Finding("F15", """Served one token at a time with a KV cache, a request's logits do not
                    depend on the requests decoded beside it, BatchNorm cannot use batch
                    statistics at batch 1, and a BN model served at batch 1 (with its running
                    statistics: a fixed per-feature map, so the serving batch does not matter)
                    predicts worse than an LN model served the same way""",
                """`analyze decode`, final checkpoints of the best-rate Pre + residual runs: max
                    |Δ logits| of 4 requests (test prompts of different lengths, greedy) decoded
                    alone vs in a continuous batch of 2 rows (they wait, join, finish, refill);
                    next-token loss of 4 test windows fed token by token at batch 1 with the
                    cache (teacher forcing), with running statistics and, for BN, with batch
                    statistics over the one token""",
                f"""the BN model (`batch` or `masked_batch`) served at batch 1 shown less than
                    {LOSS_MARGIN} nats worse than the LN model (paired by seed); a request
                    moving by > {INVARIANT_MAX:g} in the batch, or BN with batch statistics below
                    unigram − {PLATEAU_MARGIN}, is a failed control""",
                plot=analysis_output("decode", ".png"))
    rows = ref.analysis(f, DECODE_CSV)
    stream = _decode(f, rows, "stream_max_delta")
    served = _decode(f, rows, "served_loss")
    batch_stats = _decode(f, rows, "served_loss_batch_stats", BN_NORMS)
    base = ref.baselines(GROUP)
    if base is None:
        f.missing.append(f"{GROUP}/baselines.json with the test split")
    if f.missing:
        return f
    f.lines += [line(f"{n}, a request alone vs in the batch, max |Δ logits|", v, log=True)
                for n, v in stream.items()]
    f.lines += [line(f"{n}, served at batch 1, running statistics", v) for n, v in served.items()]
    f.lines += [line(f"{n}, served at batch 1, batch statistics", v)
                for n, v in batch_stats.items()]
    f.lines.append(f"test tokens: unigram {base['unigram']:.4g}, bigram {base['bigram']:.4g} nats")
    for n in BN_NORMS:
        compare_losses(f, ref, f"the {n} model served at batch 1 worse than the LN model",
                       served[n], served["layer"])
    f.control("every norm: a request's logits do not depend on the batch (inference mode)",
              all(every_seed(v, INVARIANT_MAX, "below") for v in stream.values()))
    floor = base["unigram"] - PLATEAU_MARGIN
    f.control("BN with batch statistics at batch 1 predicts no better than the unigram table",
              all(v and all(x is not None and x >= floor for x in v.values())
                  for v in batch_stats.values()))
    return f


def f16(ref: Reference) -> Finding:
    f = Finding("F16", """A token's output does not change as its own sequence grows (causal
                    attention and per-token norms; BN with running statistics too); BN with batch
                    statistics does""",
                """`analyze decode`: max |Δ| of the logits at positions 0…t−1 of 4 test windows
                    computed from their first t tokens vs from t + k (t = k = half the window),
                    full forward, inference mode and (BN) training mode""",
                f"""nothing (causal attention and per-token statistics make it so): a norm's
                    logits moving by > {INVARIANT_MAX:g} in inference mode, or BN's in training
                    mode by < {DEPENDENT_MIN:g}, would be a bug""", plot=analysis_output("decode", ".png"))
    rows = ref.analysis(f, DECODE_CSV)
    grow = _decode(f, rows, "grow_max_delta")
    train = _decode(f, rows, "grow_max_delta_train", BN_NORMS)
    if f.missing:
        return f
    f.lines += [line(f"{n}, inference mode", v, log=True) for n, v in grow.items()]
    f.lines += [line(f"{n}, training mode", v, log=True) for n, v in train.items()]
    f.control("every norm in inference mode: earlier positions unchanged",
              all(every_seed(v, INVARIANT_MAX, "below") for v in grow.values()))
    f.control("BN in training mode: earlier positions move (batch statistics see later tokens)",
              all(every_seed(v, DEPENDENT_MIN, "above") for v in train.values()))
    return f


def f17(ref: Reference) -> Finding:
    f = Finding("F17", """The texts' short LayerNorm backward formula ∂L/∂x = (1/σ)(g − mean(g))
                    (g = ∂L/∂x̂) is exact""",
                """`analyze ln-backward`: on 8 test windows through each final checkpoint of the
                    best-rate Pre-LN + residual runs, every block's attention LN: max |formula −
                    autodiff| / max |autodiff| of dL/dx, autodiff through the lab's LayerNorm with
                    the test loss's gradient at the LN output; the short formula and the full
                    (1/σ)(g − mean(g) − x̂·mean(g ⊙ x̂)); worst block per seed""",
                f"""the short formula's error at or above {FORMULA_TOL:g} on some seed or
                    interval; the full formula's above it is a failed control""",
                plot=analysis_output("ln-backward", ".png"))
    rows = ref.analysis(f, LN_BACKWARD_CSV)
    want = dict(norm="layer", placement="pre", **ROW)
    short = seed_values(f, rows, LN_BACKWARD_CSV, "short_error", **want)
    full = seed_values(f, rows, LN_BACKWARD_CSV, "full_error", **want)
    share = seed_values(f, rows, LN_BACKWARD_CSV, "missing_share",
                        reduce=lambda xs: sum(xs) / len(xs), **want)
    if f.missing:
        return f
    f.lines += [line("short formula, max error / max |grad| (worst block)", short, log=True),
                line("full formula, max error / max |grad| (worst block)", full, log=True),
                line("‖x̂·mean(g⊙x̂)‖ / ‖g − mean(g)‖, the term the short formula drops (mean "
                     "over blocks)", share)]
    shown = threshold(short, FORMULA_TOL, "below", log=True)
    if shown.outcome != SHOWN and every_seed(full, FORMULA_TOL, "below"):
        f.lines.append("The short formula drops the term x̂·mean(g ⊙ x̂), which is not small on "
                       "a trained model's activations: the full formula (1/σ)(g − mean(g) − "
                       "x̂·mean(g ⊙ x̂)) is the right one.")
    f.evidence("the short formula matches autodiff", shown)
    f.control("the full formula matches autodiff",
              every_seed(full, FORMULA_TOL, "below"))
    return f


def f18(ref) -> Finding:
    f = Finding("F18", """A mechanism demonstration: LN in float32 stays finite and keeps the
                    spread of a token with a large common offset because it computes the variance
                    in two passes and adds ε; the lab's LayerNorm does""",
                f"""float32 LN of one token of 64 features, numpy with a one-pass (E[x²] − E[x]²)
                    or two-pass variance at ε ∈ {{{', '.join(f'{e:g}' for e in EPSILONS)}}}, and
                    the lab's layer (its own ε): max error against the float64 two-pass LN of the
                    same float32 input on a token {OFFSET:g} + {OFFSET_SPREAD:g}·N(0, 1) (seeds
                    0, 1, 2; NaN/Inf count as ∞); and the output on a constant token (every
                    feature {OFFSET:g}). No runs""",
                f"""the lab's LayerNorm with an error ≥ {SPREAD_KEPT:g} on the offset token, or a
                    NaN/Inf on the constant one; one-pass keeping the spread (≤ {SPREAD_LOST:g}),
                    two-pass losing it, or a constant token not NaN at ε = 0 / not 0 at ε = 1e-5
                    is a failed control""", plot=analysis_output("ln-epsilon", ".png"))
    offset, constant = _epsilon_table(f, ref)
    if f.missing:
        return f
    lab = next(k for k in offset if k[0] == "lab")
    name = {"lab": "the lab's LayerNorm"}
    f.lines += [line(f"offset token, {name.get(m, m)} at ε = {e:g}, max error vs float64", v,
                     log=True) for (m, e), v in offset.items()]
    f.lines.append("constant token: " + ", ".join(
        f"{name.get(m, m)} at ε = {e:g} → {describe_output(r)}" for (m, e), r in constant.items()))
    finite = not int(constant[lab]["nan"]) and not int(constant[lab]["inf"])
    f.evidence("the lab's LayerNorm keeps the offset token's spread and a constant token finite",
               all_of(threshold(offset[lab], SPREAD_KEPT, "below", log=True),
                      Judged(SHOWN if finite else REFUTED,
                             "constant token finite" if finite else "constant token not finite")))
    f.control("one-pass variance loses the offset token's spread at every ε",
              all(all(x > SPREAD_LOST for x in offset[("one-pass", e)].values())
                  for e in EPSILONS))
    f.control("two-pass variance keeps it at every ε",
              all(every_seed(offset[("two-pass", e)], SPREAD_KEPT, "below") for e in EPSILONS))
    f.control("ε = 0 turns a constant token into NaN, ε = 1e-5 into 0",
              all(_all_nan(constant[(m, 0.0)]) and _all_zero(constant[(m, 1e-5)])
                  for m in METHODS))
    return f


def _epsilon_table(f: Finding, ref) -> tuple[dict, dict]:
    """F18's numbers from ``analyze ln-epsilon``'s rows, in their order: ``offset`` (method, ε)
    -> seed -> error (the lab's layer as method "lab", at its own ε); ``constant`` (method, ε)
    -> the constant token's row. A table short of any of these is recorded missing."""
    offset: dict = {}
    constant: dict = {}
    for r in definition_rows(f, ref, LN_EPSILON_CSV):
        key = (r["method"], float(r["epsilon"]))
        if r["token"] == "offset":
            offset.setdefault(key, {})[int(r["seed"])] = float(r["error"])
        else:
            constant[key] = r
    want = {(m, e) for m in METHODS for e in EPSILONS}
    lab = {k for k in offset if k[0] == "lab"}
    if not f.missing and not (want <= set(offset) and want <= set(constant) and lab
                              and lab <= set(constant)):
        f.missing.append(f"{LN_EPSILON_CSV}: every method at every ε, and the lab's LayerNorm")
    return offset, constant


def _all_nan(row: dict) -> bool:
    return int(row["nan"]) == int(row["features"])


def _all_zero(row: dict) -> bool:
    return not int(row["nan"]) and not int(row["inf"]) and not float(row["max_abs"])


def f19(ref: Reference) -> Finding:
    f = Finding("F19", """γ and β restore each token's own scale: a linear probe reads a token's
                    pre-LN scale from the last block's LN output better when the model was
                    trained with γ/β than without""",
                """`analyze stream`: held-out R² of a ridge probe (closed form, standardised
                    features) for each real token's log std of the last block's attention-LN
                    input, read from that LN's output; fitted on 48 test windows, scored on the
                    next 16; final checkpoints of Pre-LN + residual with γ/β (`best`) and without
                    (`affine`), each at its best rate; the same probe read from x̂ (before γ/β)""",
                f"""R² with γ/β shown less than {SCALE_PROBE_MARGIN} above R² without (paired
                    by seed); R² from x̂ differing from R² from γ⊙x̂ + β by more than
                    {PROBE_SAME_TOL:g} is a failed control""", plot=analysis_output("stream", ".png"))
    rows = ref.analysis(f, STREAM_CSV)
    if rows and "scale_probe_r2" not in rows[0]:
        f.missing.append(f"{STREAM_CSV}: scale_probe_r2 (made before F19's probe)")
    if f.missing:
        return f
    last = ref.num_layers(GROUP) - 1
    want = dict(norm="layer", block=last, **ROW)
    r2 = {a: seed_values(f, rows, STREAM_CSV, "scale_probe_r2", norm_affine=a, **want)
          for a in ("true", "false")}
    xhat = {a: seed_values(f, rows, STREAM_CSV, "scale_probe_r2_xhat", norm_affine=a, **want)
            for a in ("true", "false")}
    if f.missing:
        return f
    for a, name in (("true", "with γ/β"), ("false", "without γ/β")):
        f.lines += [line(f"R², {name}, from the LN output", r2[a]),
                    line(f"R², {name}, from x̂", xhat[a])]
    f.evidence("the scale reads better with γ/β", compare(r2["true"], r2["false"],
                                                            SCALE_PROBE_MARGIN))
    f.control("γ/β add no per-token information: x̂ reads the same (every model, every seed)",
              all(_same(r2[a], xhat[a]) for a in r2))
    return f


def _same(a: dict, b: dict) -> bool:
    """Every seed of ``a`` within ``PROBE_SAME_TOL`` of ``b``'s (both there and finite)."""
    return bool(a) and set(a) == set(b) and all(
        a[s] is not None and b[s] is not None and math.isfinite(a[s] - b[s])
        and abs(a[s] - b[s]) <= PROBE_SAME_TOL for s in a)


CLAIMS = (f15, f16, f17, f18, f19)
