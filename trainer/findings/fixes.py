"""Pre-registration 3's claims on the field's placement fixes: I3 (Peri-LN) and I4 (DeepNorm),
and pre-registration 4's I6 (DeepNorm against Post-LN on the same Xavier init),
judged on sub-sweeps under ``results/reference/scale/`` (results/PREREGISTRATION-SCALE.md,
section 2; thresholds in ``thresholds``). The rules are ``instability``'s: best rate on the mean
of the seeds run at every rate (seed 0 alone where only seed 0 runs every rate), a best at an
open edge is "cannot be judged", a diverged run's loss is the unigram loss of the same tokens.

I3 — Peri-LN (``place_lr``: seed 0 at ``RATE_GRID`` and the edge rule's extensions;
``place_best``: seeds 0–2 at that best) against Pre-LN at its best in ``inst_lr`` (seeds 0–2 at
every rate: the same config as the reference's Pre-LN, run with the instruments, best on the
mean of seeds). The stream's growth with depth: the last block's token std of the residual
stream over the first block's, at the last logged train step. OLMo 2's output norm runs beside
it in ``place_lr``/``place_best`` as a row of the learning-rate table; no claim reads it.

I4 — DeepNorm (``deep_lr``: Post-LN on the lab's init and DeepNorm on its authors' Xavier init,
each with warm-up 50 and without, seeds 0–2 at every rate of ``RATE_GRID``; ``deep_depth``: the
same two with warm-up at 12 blocks and ``DEEP_DEPTH_RATES``). A run *trains* when its final
validation loss is below the bigram baseline; "trains at more rates" is the per-seed count
difference over ``RATE_GRID`` with margin ``RATES_MARGIN``.
"""

from __future__ import annotations

from trainer.findings.claim import Finding, line, seed_difference
from trainer.findings.dynamics import DEEP_POST as POST, stream_growth
from trainer.findings.instability import SCALE, Grid, lr_sweep_line
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (DEEP_DEPTH, DEEP_DEPTH_RATES, INSTABILITY_SEEDS,
                                         LOSS_MARGIN, NULL_MARGIN, PERI_GROWTH_FACTOR, R_POST,
                                         RATE_GRID, RATES_MARGIN, WARMUP_MARGIN)
from trainer.results.rule import compare, not_worse

PERI = dict(placement="peri", norm="layer", qk_norm="none", residual="true", warmup_steps=50)
DEEP = dict(placement="post", norm="layer", residual="deepnorm", init="xavier")
INIT_CTL = "init_ctl"  # pre-registration 4: Post-LN on Xavier init (I6)


def i3(ref: Reference) -> Finding:
    f = Finding("I3", """Peri-LN's residual stream grows less with depth than Pre-LN's, and it is
                not worse in loss (Kim et al. 2025)""",
                """Peri-LN (a LayerNorm on each sublayer's input and output) and Pre-LN, each at
                its best rate, seeds 0–2: the stream's token std, last block over first, at the
                end of training; test loss""",
                f"""Pre-LN's growth under {PERI_GROWTH_FACTOR:g}× Peri-LN's, or Peri-LN worse
                than Pre-LN by {NULL_MARGIN:g}""")
    scale = ref.below(SCALE)
    pre = Grid(scale, f, "Pre-LN")
    peri_lr = Grid(scale, f, "Peri-LN", "place_lr", PERI, RATE_GRID, (0,))
    if f.missing:
        return f
    f.lines += [f"{g.name}: {lr_sweep_line(g)}" for g in (pre, peri_lr)]
    if pre.best is None or peri_lr.best is None:
        why = (pre if pre.best is None else peri_lr).why_no_best()
        f.evidence(f"(a) Pre-LN's stream growth ≥ {PERI_GROWTH_FACTOR:g}× Peri-LN's", None, why)
        f.evidence(f"(b) Peri-LN not worse than Pre-LN by {NULL_MARGIN:g}", None, why)
        return f
    peri = Grid(scale, f, "Peri-LN", "place_best", PERI, (peri_lr.best,), INSTABILITY_SEEDS)
    if f.missing:
        return f
    growth = {g.name: g.at(b, stream_growth) for g, b in ((pre, pre.best), (peri, peri_lr.best))}
    for name, values in growth.items():
        f.lines.append(line(f"{name} stream growth (last / first block)", values, log=True))
    f.evidence(f"(a) Pre-LN's stream growth ≥ {PERI_GROWTH_FACTOR:g}× Peri-LN's, each at its best "
               f"rate ({pre.best:g}, {peri_lr.best:g})",
               compare(growth["Pre-LN"], growth["Peri-LN"], PERI_GROWTH_FACTOR, log=True))
    f.evidence(f"(b) Peri-LN's test loss not worse than Pre-LN's by {NULL_MARGIN:g}, each at its "
               "best rate", not_worse(peri.test(peri_lr.best), pre.test(pre.best), NULL_MARGIN))
    return f


def _at_best(f: Finding, text: str, grids: tuple[Grid, ...], judge) -> None:
    """A part that reads the best rate of each of ``grids``: ``judge(*grids)``, or "cannot be
    judged" when one of them has none."""
    unset = [g for g in grids if g.best is None]
    if unset:
        f.evidence(text, None, unset[0].why_no_best())
    else:
        f.evidence(text, judge(*grids))


def i4(ref: Reference) -> Finding:
    f = Finding("I4", """DeepNorm trains Post-LN at rates where plain Post-LN collapses, and needs
                no warm-up; at depth as well (Wang et al. 2022)""",
                f"""Post-LN (the lab's init) and DeepNorm (α = (2L)^¼, β = (8L)^-¼, Xavier init),
                with and without warm-up, at every rate of the reference grid, seeds 0–2; the two
                with warm-up at {DEEP_DEPTH} blocks""",
                f"""DeepNorm trains at no more rates than Post-LN; Post-LN no worse at {R_POST:g};
                DeepNorm worse without warm-up by {WARMUP_MARGIN:g}; or Post-LN no worse at
                {DEEP_DEPTH} blocks""")
    scale = ref.below(SCALE)
    seeds = INSTABILITY_SEEDS
    post = Grid(scale, f, "Post-LN", "deep_lr", dict(POST, warmup_steps=50), RATE_GRID, seeds)
    deep = Grid(scale, f, "DeepNorm", "deep_lr", dict(DEEP, warmup_steps=50), RATE_GRID, seeds)
    deep0 = Grid(scale, f, "DeepNorm, no warm-up", "deep_lr", dict(DEEP, warmup_steps=0),
                 RATE_GRID, seeds)
    depth = [Grid(scale, f, f"{name}, {DEEP_DEPTH} blocks", "deep_depth",
                  dict(want, warmup_steps=50, num_layers=DEEP_DEPTH), DEEP_DEPTH_RATES, seeds)
             for name, want in (("Post-LN", POST), ("DeepNorm", DEEP))]
    if f.missing:
        return f
    count = {g.name: g.trains_count(RATE_GRID) for g in (post, deep)}
    f.lines += [f"{g.name}: {lr_sweep_line(g)}" for g in (post, deep, deep0, *depth)]
    f.lines += [line(f"rates of {len(RATE_GRID)} at which {n} trains", c) for n, c in count.items()]
    f.evidence(f"(a) DeepNorm trains at more rates than Post-LN (per seed, margin {RATES_MARGIN:g})",
               compare(count["DeepNorm"], count["Post-LN"], RATES_MARGIN))
    f.evidence(f"(b) at {R_POST:g}, Post-LN's validation loss worse than DeepNorm's by "
               f"{LOSS_MARGIN:g}", compare(post.val(R_POST), deep.val(R_POST), LOSS_MARGIN))
    _at_best(f, f"(c) DeepNorm without warm-up not worse than with it by {WARMUP_MARGIN:g}, at the "
             "with-warm-up best rate", (deep,),
             lambda d: not_worse(deep0.test(d.best), d.test(d.best), WARMUP_MARGIN))
    _at_best(f, f"(d) at {DEEP_DEPTH} blocks, Post-LN's test loss worse than DeepNorm's by "
             f"{LOSS_MARGIN:g}, each at its best", tuple(depth),
             lambda p, d: compare(p.test(p.best), d.test(d.best), LOSS_MARGIN))
    return f


def i6(ref: Reference) -> Finding:
    """Pre-registration 4 (results/PREREGISTRATION-INIT.md): DeepNorm against Post-LN on the same
    Xavier init (``init_ctl``: DeepNorm with α = β = 1)."""
    f = Finding("I6", """DeepNorm's gain is its α and β, not its Xavier init: with the same init,
                plain Post-LN still trains worse and at fewer rates (Wang et al. 2022)""",
                f"""Post-LN on Xavier init and DeepNorm (Xavier, α = (2L)^¼, β = (8L)^-¼), warm-up
                50, at every rate of the reference grid, seeds 0–2: validation loss at
                {R_POST:g}, the rates at which each trains, test loss at each one's best""",
                f"""Post-LN on Xavier no worse at {R_POST:g} by {LOSS_MARGIN:g}, training at as many
                rates, and no worse at its best: then what I4 credits to DeepNorm is its
                init's""")
    scale = ref.below(SCALE)
    seeds = INSTABILITY_SEEDS
    xavier = Grid(scale, f, "Post-LN (Xavier)", INIT_CTL, dict(POST, init="xavier", warmup_steps=50),
                  RATE_GRID, seeds)
    if f.missing:
        return f
    deep = Grid(scale, f, "DeepNorm", "deep_lr", dict(DEEP, warmup_steps=50), RATE_GRID, seeds)
    post = Grid(scale, f, "Post-LN (the lab's init)", "deep_lr", dict(POST, warmup_steps=50),
                RATE_GRID, seeds)
    if f.missing:
        return f
    count = {g.name: g.trains_count(RATE_GRID) for g in (xavier, deep)}
    f.lines += [f"{g.name}: {lr_sweep_line(g)}" for g in (xavier, deep, post)]
    f.lines += [line(f"rates of {len(RATE_GRID)} at which {n} trains", c) for n, c in count.items()]
    f.lines.append(line(f"the init's own effect (described): Post-LN on Xavier − on the lab's "
                        f"init, validation loss at {R_POST:g}",
                        seed_difference(xavier.val(R_POST), post.val(R_POST))))
    f.evidence(f"(a) at {R_POST:g}, Post-LN (Xavier)'s validation loss worse than DeepNorm's by "
               f"{LOSS_MARGIN:g}", compare(xavier.val(R_POST), deep.val(R_POST), LOSS_MARGIN))
    f.evidence(f"(b) DeepNorm trains at more rates than Post-LN (Xavier) (per seed, margin "
               f"{RATES_MARGIN:g})", compare(count["DeepNorm"], count[xavier.name], RATES_MARGIN))
    _at_best(f, f"(c) Post-LN (Xavier)'s test loss worse than DeepNorm's by {LOSS_MARGIN:g}, each "
             "at its best", (xavier, deep),
             lambda x, d: compare(x.test(x.best), d.test(d.best), LOSS_MARGIN))
    return f


CLAIMS = (i3, i4, i6)
