"""Claims F5 (no norm: a growing stream, fragile across learning rates) and F6 (Post-LN needs
warm-up), read from the learning-rate grid (sub-sweep ``lr``, 1 seed per rate, validation loss)
and from the best-rate seeds (``best``, test loss). The rules are ``core``'s.

F5 — parts: the no-norm stack's last/first-block token std ratio is above ``GROWTH_FACTOR`` × LN's
(the paired ratio of the two ratios, log scale); its LR sensitivity (Wortsman et al. 2023) exceeds
Pre-LN's by ``SENSITIVITY_MARGIN`` (inconclusive when either trains at no rate tried). The
absolute last-block std is reported beside the ratio.

F6 — parts: Post-LN needs warm-up (without it, its test loss is worse by ``WARMUP_MARGIN``,
paired, or it trains at fewer rates); Pre-LN does not (a null: not worse by ``WARMUP_MARGIN``,
one-sided, and not at fewer rates); at init, with Xavier init as in Xiong et al. 2020, Post-LN's
FFN-out gradient grows toward the output (last/first block above ``PROFILE_GROWTH``, log scale)
and Pre-LN's does not. A placement that trains at no rate tried makes its part inconclusive.
Pre-registration 3's fix (section 4): the two arms are compared only on the rates both ran
(one √10 step spelled 0.003 or 0.00316 is one rate, ``lr_sweep.rate_step``), each at its best of
them; "trains at fewer rates" is the per-seed count difference with margin ``RATES_MARGIN``,
read only where every seed ran every rate (Post-LN at the reference: ``scale/deep_lr``, seeds
0–2, best rate on their mean validation loss); elsewhere the loss part alone is evidence, and an
arm whose seeds ran at another rate than its best of the shared ones cannot be judged.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.findings.claim import (BASE, Finding, all_of, any_of, fmt_seeds, line,
                                    seed_difference)
from trainer.findings.core import GROUP
from trainer.findings.instability import SCALE, Grid, lr_sweep_line
from trainer.findings.lr import describe, variant as lr_variant
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (GROWTH_FACTOR, INSTABILITY_SEEDS, PROFILE_GROWTH,
                                         RATE_GRID, RATES_MARGIN, SENSITIVITY_MARGIN,
                                         WARMUP_MARGIN)
from trainer.results import lr_sweep
from trainer.results.metrics import final_test_loss
from trainer.results.rule import Judged, compare, not_worse, threshold
from trainer.rundir import analysis_output

WARM, COLD = 50, 0  # the reference's warm-up steps, and none
DEEP_LR = "deep_lr"  # scale/deep_lr: Post-LN with and without warm-up, seeds 0–2 at every rate
DEEP_POST = dict(placement="post", norm="layer", residual="true", init="normal")


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


@dataclass
class Arm:
    """One placement with or without warm-up, read on the rates both arms ran (pre-registration
    3, section 4): its best of those rates, each seed's test loss there, and each seed's count of
    them at which it trains (None: only seed 0 ran every rate, and a one-seed count is never
    evidence)."""

    name: str
    grid: str  # where it trains and its best, on every rate it ran
    best: float | None  # its best of the shared rates (None: `why`)
    test: dict  # seed -> test loss at `best` ({}: `why`)
    count: dict | None
    shared: int  # how many rates the two arms share
    trains: bool  # below bigram at one of the shared rates, on some seed
    why: str = ""


def _deep_arms(scale: Reference, f: Finding) -> dict | None:
    """Post-LN with and without warm-up in ``scale/deep_lr`` (seeds 0–2 at every rate of the
    shared grid): the best rate on the mean validation loss of the seeds."""
    grids = {w: Grid(scale, f, f"post-LN, warm-up {w}", DEEP_LR, dict(DEEP_POST, warmup_steps=w),
                     RATE_GRID, INSTABILITY_SEEDS) for w in (WARM, COLD)}
    if f.missing:
        return None
    arms = {}
    for w, g in grids.items():
        why = "" if g.best is not None else g.why_no_best()
        count = g.trains_count(RATE_GRID)
        arms[w] = Arm(g.name, f"{lr_sweep_line(g)} ({DEEP_LR}, seeds "
                      f"{INSTABILITY_SEEDS[0]}–{INSTABILITY_SEEDS[-1]} at every rate)", g.best,
                      g.test(g.best), count, len(RATE_GRID), any(count.values()), why)
    return arms


def _lr_arms(ref: Reference, f: Finding, placement: str) -> dict | None:
    """An arm's grid in ``lr`` (seed 0), cut to the rates both arms ran; its seeds in ``best``,
    read only when they ran at its best of those rates."""
    want = dict(norm="layer", residual="true", placement=placement)
    grids = {w: lr_variant(ref, f, warmup_steps=w, **want) for w in (WARM, COLD)}
    loss = {w: ref.per_seed(f, GROUP, final_test_loss, seeds=ref.headline_seeds,
                            warmup_steps=w, **want) for w in (WARM, COLD)}
    if f.missing:
        return None
    shared = lr_sweep.shared_steps(*([p.lr for p in v.points if p.tried]
                                     for v in grids.values()))
    arms = {}
    for w, v in grids.items():
        name = f"{placement}-LN, warm-up {w}"
        points = [p for p in v.points if p.tried and lr_sweep.rate_step(p.lr) in shared]
        best = lr_sweep.best_point(points)
        ran = {float(ref.values(r)["lr"]) for r in ref.matching(GROUP, warmup_steps=w, **want)}
        why = (f"{name} has no finite validation loss at the rates both arms ran" if best is None
               else "" if {lr_sweep.rate_step(x) for x in ran} == {lr_sweep.rate_step(best.lr)}
               else f"{name}'s seeds ran at {', '.join(f'{x:g}' for x in sorted(ran))}, its best "
                    f"of the shared rates is {best.lr:g}: its seeds there are not run yet")
        arms[w] = Arm(name, describe(v), best and best.lr, {} if why else loss[w], None,
                      len(shared), any(p.trains for p in points), why)
    return arms


def _arms(ref: Reference, f: Finding, placement: str) -> dict | None:
    """WARM/COLD -> the arm of ``placement``: Post-LN from ``scale/deep_lr`` where the setting
    has it (the reference), otherwise from ``lr`` and ``best``."""
    scale = ref.below(SCALE)
    if placement == "post" and scale.matching(DEEP_LR, **DEEP_POST):
        return _deep_arms(scale, f)
    return _lr_arms(ref, f, placement)


def _rates_part(arms: dict, needs: bool) -> Judged | None:
    """"Without warm-up it trains at fewer rates" (``needs``) or "not at fewer rates": the
    per-seed count difference, margin ``RATES_MARGIN``; None on one seed."""
    warm, cold = arms[WARM].count, arms[COLD].count
    if warm is None or cold is None:
        return None
    return compare(warm, cold, RATES_MARGIN) if needs else not_worse(warm, cold, RATES_MARGIN)


def _needs_warmup(f: Finding, placement: str, arms: dict) -> None:
    name = f"{placement.capitalize()}-LN"
    needs = placement == "post"
    text = (f"{name} needs warm-up (worse at its best, or trains at fewer rates, without it)"
            if needs else f"{name} does not: without it not worse by the margin (a null: "
                          "one-sided test) and not at fewer rates")
    if not arms[WARM].trains:
        f.evidence(text, None, f"{name} with warm-up trains at no rate both arms ran")
        return
    unread = next((a.why for a in arms.values() if a.why), "")
    loss = (None if unread else compare(arms[COLD].test, arms[WARM].test, WARMUP_MARGIN) if needs
            else not_worse(arms[COLD].test, arms[WARM].test, WARMUP_MARGIN))
    rates = _rates_part(arms, needs)
    parts = [p for p in (loss, rates) if p is not None]
    if not parts:
        f.evidence(text, None, unread)
    else:
        f.evidence(text, (any_of if needs else all_of)(*parts))


def f6(ref: Reference) -> Finding:
    f = Finding("F6", """Post-LN needs learning-rate warm-up, Pre-LN does not (Xiong et al. 2020);
                    at init Post-LN's gradient grows toward the output blocks, Pre-LN's does not""",
                """per placement, with and without warm-up, on the rates both ran: the rates at
                    which it trains (validation loss below bigram, per seed where every seed ran
                    every rate) and the test loss at its best of those rates; FFN-out gradient
                    norm last/first block at init (`analyze grad-profile`, Xavier init as in the
                    paper)""",
                f"""Post-LN without warm-up neither worse by {WARMUP_MARGIN} nats nor trainable at
                    fewer rates; Pre-LN without warm-up worse or trainable at fewer rates; or
                    Post-LN's init ratio not above {PROFILE_GROWTH} (Pre-LN's not below)""",
                plots=("lr/plots/lr_sensitivity.png", analysis_output("grad-profile", ".png")))
    arms = {p: _arms(ref, f, p) for p in ("pre", "post")}
    profile = ref.grad_profile(f)
    if f.missing:
        return f
    for p in ("pre", "post"):
        for w, a in arms[p].items():
            f.lines += [line(f"{a.name}, test loss at its best of the rates both ran"
                             + (f" ({a.best:g})" if a.best else ""), a.test),
                        f"{a.name}, grid: {a.grid}"]
            if a.count is not None:
                f.lines.append(line(f"{a.name}, rates of the {a.shared} shared at which it "
                                    "trains", a.count))
            if a.why:
                f.lines.append(f"{a.name}: {a.why}")
        cold, warm = arms[p][COLD].test, arms[p][WARM].test
        f.lines.append(line(f"{p}-LN, test loss without warm-up minus with it",
                            seed_difference(cold, warm)))
        if arms[p][WARM].count is None:
            f.lines.append(f"{p}-LN: one seed ran every rate, so whether it trains at fewer rates "
                           "is not evidence (pre-registration 3)")
    f.lines.append("a limit of this design: every run clips the gradient's global norm at "
                   f"{ref.clip_norm(GROUP):g}, which may absorb part of a warm-up effect; no run "
                   "without clipping was pre-registered")
    for init, ratios in sorted(profile.items()):
        f.lines.append(f"init ratio, {init}: " + ", ".join(
            f"{p} {fmt_seeds(v, log=True)}" for p, v in sorted(ratios.items())))
    for p in ("post", "pre"):
        _needs_warmup(f, p, arms[p])
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
