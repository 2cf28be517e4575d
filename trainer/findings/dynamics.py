"""Claims F5 (no norm: a growing stream, fragile across learning rates) and F6 (Post-LN needs
warm-up), read from the learning-rate grid (sub-sweep ``lr``, 1 seed per rate, validation loss)
and from the best-rate seeds (``best``, test loss). The rules are ``core``'s.

F5 — parts: the no-norm stack's last/first-block token std ratio is above ``GROWTH_FACTOR`` × LN's
(the paired ratio of the two ratios, log scale); its LR sensitivity (Wortsman et al. 2023) exceeds
Pre-LN's by ``SENSITIVITY_MARGIN`` (inconclusive when either trains at no rate tried). The
absolute last-block std is reported beside the ratio.

F6 — parts: Post-LN needs warm-up (without it, its best-rate test loss is worse by
``WARMUP_MARGIN``, paired, or it trains at fewer rates of the grid); Pre-LN does not (a null:
not worse by ``WARMUP_MARGIN``, one-sided, and not at fewer rates); at init, with Xavier init as in Xiong et al. 2020, Post-LN's FFN-out
gradient grows toward the output (last/first block above ``PROFILE_GROWTH``, log scale) and
Pre-LN's does not. A placement that trains at no rate tried makes its part inconclusive.
"""

from __future__ import annotations

from trainer.findings.claim import BASE, Finding, all_of, fmt_seeds, line
from trainer.findings.core import GROUP
from trainer.findings.lr import describe, variant as lr_variant
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (GROWTH_FACTOR, PROFILE_GROWTH, SENSITIVITY_MARGIN,
                                         WARMUP_MARGIN)
from trainer.results.metrics import final_test_loss
from trainer.results.rule import REFUTED, SHOWN, Judged, compare, not_worse, threshold
from trainer.rundir import analysis_output

WARM, COLD = 50, 0  # the reference's warm-up steps, and none


def stream_growth(run) -> float | None:
    """The last block's token std of the residual stream over the first block's, at the last
    logged train step (None: not logged)."""
    last = int(run.cfg.model.num_layers) - 1
    top = run.train_at(f"activation/block_{last}/token_std", "last")
    bottom = run.train_at("activation/block_0/token_std", "last")
    return None if top is None or not bottom else top / bottom


def f5(ref: Reference) -> Finding:
    f = Finding("F5", """Without normalization the residual stream grows with depth, and training
                    is fragile across learning rates""",
                """token std of the stream, last block / first block, end of training (Pre,
                    residual, best rate), and the last block's std itself; LR sensitivity over the
                    rate grid (mean over rates of min(final, init loss) − best loss, validation)""",
                f"""no-norm growth not above {GROWTH_FACTOR}× LN's, or no-norm's LR sensitivity
                    not above Pre-LN's by {SENSITIVITY_MARGIN} nats""",
                plot=f"{GROUP}/plots/f5_token_std.png")
    last = ref.num_layers(GROUP) - 1
    want = dict(warmup_steps=WARM, **BASE)
    g = {n: ref.per_seed(f, GROUP, stream_growth, seeds=ref.headline_seeds, norm=n, **want)
         for n in ("layer", "none")}
    std = {n: ref.per_seed(f, GROUP, lambda r: r.train_at(f"activation/block_{last}/token_std"),
                           seeds=ref.headline_seeds, norm=n, **want) for n in ("layer", "none")}
    lr = {n: lr_variant(ref, f, norm=n, **want) for n in ("layer", "none")}
    if f.missing:
        return f
    for n in ("layer", "none"):
        f.lines += [line(f"growth, {n}", g[n], log=True),
                    line(f"last block's token std, {n}", std[n]),
                    f"learning-rate grid, {n}: {describe(lr[n])}"]
    f.evidence("stream grows without a norm", compare(g["none"], g["layer"], GROWTH_FACTOR,
                                                      log=True))
    untrained = [n for n in lr if not lr[n].trains]
    f.evidence("fragile across learning rates",
               None if untrained else
               lr["none"].sensitivity - lr["layer"].sensitivity >= SENSITIVITY_MARGIN,
               f"{' and '.join(untrained)} trains at no rate tried" if untrained else "")
    return f


def _needs_warmup(f: Finding, placement: str, loss: dict, lr: dict) -> None:
    name = f"{placement.capitalize()}-LN"
    if not lr[WARM].trains:
        f.evidence(f"{name} {'needs' if placement == 'post' else 'does not need'} warm-up", None,
                   f"{name} with warm-up trains at no rate tried")
        return
    rates = (f"trains at {len(lr[COLD].trains_at)} rates of the grid without warm-up, "
             f"{len(lr[WARM].trains_at)} with it")
    fewer = len(lr[COLD].trains_at) < len(lr[WARM].trains_at)
    if placement == "post":
        f.evidence("Post-LN needs warm-up (worse or trains at fewer rates without it)",
                   Judged(SHOWN, rates) if fewer else compare(loss[COLD], loss[WARM],
                                                              WARMUP_MARGIN))
    else:
        f.evidence("Pre-LN does not: without it not worse by the margin (a null: one-sided "
                   "test) and not at fewer rates",
                   Judged(REFUTED, rates) if fewer else not_worse(loss[COLD], loss[WARM],
                                                                  WARMUP_MARGIN))


def f6(ref: Reference) -> Finding:
    f = Finding("F6", """Post-LN needs learning-rate warm-up, Pre-LN does not (Xiong et al. 2020);
                    at init Post-LN's gradient grows toward the output blocks, Pre-LN's does not""",
                """per placement, with and without warm-up: the rates of the grid at which it
                    trains (validation loss below bigram) and its best-rate test loss; FFN-out
                    gradient norm last/first block at init (`analyze grad-profile`, Xavier init as
                    in the paper)""",
                f"""Post-LN without warm-up neither worse by {WARMUP_MARGIN} nats nor trainable at
                    fewer rates; Pre-LN without warm-up worse or trainable at fewer rates; or
                    Post-LN's init ratio not above {PROFILE_GROWTH} (Pre-LN's not below)""",
                plots=("lr/plots/lr_sensitivity.png", analysis_output("grad-profile", ".png")))
    want = dict(norm="layer", residual="true")
    loss = {(p, w): ref.per_seed(f, GROUP, final_test_loss, seeds=ref.headline_seeds, placement=p,
                                 warmup_steps=w, **want) for p in ("pre", "post") for w in (WARM, COLD)}
    lr = {(p, w): lr_variant(ref, f, placement=p, warmup_steps=w, **want)
          for p in ("pre", "post") for w in (WARM, COLD)}
    profile = ref.grad_profile(f)
    if f.missing:
        return f
    for (p, w), v in loss.items():
        f.lines += [line(f"{p}-LN, warm-up {w}, test loss at its best rate", v),
                    f"{p}-LN, warm-up {w}, grid: {describe(lr[(p, w)])}"]
    for p in ("pre", "post"):  # what "worse without warm-up" compares, seed by seed
        cold, warm = loss[(p, COLD)], loss[(p, WARM)]
        f.lines.append(line(f"{p}-LN, test loss without warm-up minus with it",
                            {s: cold[s] - warm[s] for s in sorted(cold.keys() & warm.keys())
                             if cold[s] is not None and warm[s] is not None}))
    f.lines.append("a limit of this design: every run clips the gradient's global norm at "
                   f"{ref.clip_norm(GROUP):g}, which may absorb part of a warm-up effect; no run "
                   "without clipping was pre-registered")
    for init, ratios in sorted(profile.items()):
        f.lines.append(f"init ratio, {init}: " + ", ".join(
            f"{p} {fmt_seeds(v, log=True)}" for p, v in sorted(ratios.items())))
    for p in ("post", "pre"):
        _needs_warmup(f, p, {w: loss[(p, w)] for w in (WARM, COLD)},
                      {w: lr[(p, w)] for w in (WARM, COLD)})
    xavier = profile.get("xavier", {})
    text = "Post-LN's init gradient grows with depth, Pre-LN's does not"
    if _reference_copy(ref, analysis_output("grad-profile")):
        f.lines.append(f"{text}: the analysis at init is byte for byte the reference's (it does "
                       "not depend on the step count): same runs as the reference, counted there "
                       "and not here (pre-registration 3)")
        return f
    f.evidence(text, all_of(threshold(xavier.get("post", {}), PROFILE_GROWTH, "above", log=True),
                            threshold(xavier.get("pre", {}), PROFILE_GROWTH, "below", log=True)))
    return f


def _reference_copy(ref: Reference, relpath: str) -> bool:
    """Whether a replication setting's analysis file is the reference's, byte for byte (then
    it is the same measurement, not independent evidence)."""
    if ref.setting == "reference":
        return False
    mine, theirs = ref.root / relpath, ref.root.parents[1] / "reference" / relpath
    return mine.is_file() and theirs.is_file() and mine.read_bytes() == theirs.read_bytes()


CLAIMS = (f5, f6)
