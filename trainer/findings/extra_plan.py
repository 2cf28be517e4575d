"""Which runs each evidence part reads, for the extra seeds (``trainer.findings.extra``): ``PLAN``
maps a claim id and the start of a part's text to the (sub-sweep, config filter) of each variant
the part reads and the analysis CSVs it reads; ``needs`` looks a part up. Every part the
statistics rule judges has an entry (``tests/test_extra.py``), so that the extra runs of a part
are fixed before anyone sees it underpowered. Pre-registration 2's claims read the reference's
sub-sweeps (``best``, ``pad_to_max``, …); pre-registration 3's and 4's (I1–I4, I6; F6's Post-LN
part since pre-registration 3) read ``scale/GROUP`` at the rates each part reads, the best rates
by the claims' own rule (``instability.Grid``).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.findings.claim import BASE, Finding
from trainer.findings.dynamics import DEEP_LR, DEEP_POST
from trainer.findings.fixes import DEEP, INIT_CTL, PERI, POST
from trainer.findings.instability import SCALE, VARIANTS, Grid
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (DEEP_DEPTH, DEEP_DEPTH_RATES, DYT_RECIPE_ALPHA,
                                         EMBED_UNIT_SCALE, INSTABILITY_GRID, INSTABILITY_SEEDS,
                                         R_POST, R_TOP, RATE_GRID)
from trainer.rundir import analysis_output

GRAD_PROFILE = analysis_output("grad-profile")  # no runs: ``analyze grad-profile`` over seeds
DECODE, STREAM, BATCH_SIZE, PADDING, LN_BACKWARD = map(
    analysis_output, ("decode", "stream", "batch-size", "padding", "ln-backward"))


@dataclass(frozen=True)
class Needs:
    """What one part reads: ``variants`` as (sub-sweep, config filter) pairs, ``analyses`` as
    CSVs under the root (re-run on the variants' runs they do not cover)."""

    variants: tuple[tuple[str, dict], ...] = ()
    analyses: tuple[str, ...] = ()


def _best(norm: str = "layer", residual: str = "true", placement: str = "pre",
          warmup: int = 50) -> tuple[str, dict]:
    return ("best", dict(norm=norm, residual=residual, placement=placement,
                         warmup_steps=warmup))


def _pair(group: str, a: dict, b: dict) -> tuple:
    return ((group, {**BASE, **a}), (group, {**BASE, **b}))


def _dyt(ref: Reference) -> tuple[str, dict]:
    """F14's DyT variant: in the reference, the α chosen on validation in ``dyt_recipe``; in a
    replication setting, the pre-registered α in ``best``."""
    from trainer.findings.stream import _best_alpha

    alpha = (_best_alpha(ref, Finding("", "", "", "")) if ref.setting == "reference"
             else DYT_RECIPE_ALPHA)
    return ("dyt_recipe" if ref.setting == "reference" else "best",
            dict(norm="dyt", embed_scale=EMBED_UNIT_SCALE, dyt_alpha=alpha, **BASE))


def _depth(ref: Reference, other: str | None = None) -> tuple:
    """F11's variants at its shallowest and deepest depth: the healthy model, and ``other``."""
    from trainer.findings.depth import HEALTHY, VARIANTS, depths

    ds = depths(ref)
    wants = [HEALTHY[1], *(w for name, w in VARIANTS if name == other)]
    return tuple(("depth", dict(num_layers=d, warmup_steps=50, **want))
                 for want in wants for d in (ds[0], ds[-1])) if ds else ()


def _dyt_alphas(ref: Reference) -> tuple:
    from trainer.findings.thresholds import DYT_RECIPE_ALPHAS

    return tuple(("dyt_recipe", dict(norm="dyt", embed_scale=EMBED_UNIT_SCALE, dyt_alpha=a,
                                     **BASE)) for a in DYT_RECIPE_ALPHAS)


_AFFINE_OFF = ("affine", dict(norm="layer", norm_affine="false", **BASE))


# Pre-registration 3's sub-sweeps (``scale/GROUP``): a variant at given rates, and its best rate
# by the claims' own rule (``instability.Grid``: the mean over the seeds run at every rate).
def _scale(group: str, want: dict, *rates) -> tuple:
    return tuple((f"{SCALE}/{group}", {**want, "lr": lr}) for lr in rates)


def _grid(ref: Reference, group: str, want: dict, rates=INSTABILITY_GRID,
          seeds=INSTABILITY_SEEDS):
    return Grid(ref.below(SCALE), Finding("", "", "", ""), group, group, want, rates, seeds)


def _every_rate(ref: Reference, group: str, *wants: dict) -> tuple:
    """Each of ``wants`` at every rate it ran in ``scale/GROUP`` (a per-seed count or
    sensitivity reads them all)."""
    return tuple(v for want in wants for v in _scale(group, want, *sorted(
        {float(ref.values(r)["lr"]) for r in ref.matching(f"{SCALE}/{group}", **want)})))


def _inst(ref: Reference, other: str, part: str) -> Needs:
    """I1's and I2's parts: Pre-LN against ``other`` (QK-norm, z-loss) in ``inst_lr``."""
    pre, new = VARIANTS["Pre-LN"], VARIANTS[other]
    best = {name: _grid(ref, "inst_lr", VARIANTS[name]).best for name in ("Pre-LN", other)}
    return Needs({"top": _scale("inst_lr", pre, R_TOP) + _scale("inst_lr", new, R_TOP),
                  "own": _scale("inst_lr", pre, R_TOP, best["Pre-LN"]),
                  "best": (_scale("inst_lr", pre, best["Pre-LN"])
                           + _scale("inst_lr", new, best[other])),
                  "every": _every_rate(ref, "inst_lr", pre, new)}[part])


def _peri(ref: Reference) -> Needs:
    pre = VARIANTS["Pre-LN"]
    return Needs(_scale("inst_lr", pre, _grid(ref, "inst_lr", pre).best)
                 + ((f"{SCALE}/place_best", PERI),))


def _deep(ref: Reference, part: str) -> Needs:
    """I4's parts: Post-LN and DeepNorm in ``deep_lr`` and ``deep_depth``."""
    post, deep = dict(POST, warmup_steps=50), dict(DEEP, warmup_steps=50)
    if part == "rates":
        return Needs(_every_rate(ref, "deep_lr", post, deep))
    if part == "at":
        return Needs(_scale("deep_lr", post, R_POST) + _scale("deep_lr", deep, R_POST))
    if part == "cold":
        best = _grid(ref, "deep_lr", deep, RATE_GRID).best
        return Needs(_scale("deep_lr", dict(DEEP, warmup_steps=0), best)
                     + _scale("deep_lr", deep, best))
    return Needs(tuple(v for want in (post, deep) for v in _scale(
        "deep_depth", dict(want, num_layers=DEEP_DEPTH),
        _grid(ref, "deep_depth", dict(want, num_layers=DEEP_DEPTH), DEEP_DEPTH_RATES).best)))


def _init_ctl(ref: Reference, part: str) -> Needs:
    """I6's parts: Post-LN on Xavier init (``init_ctl``) against DeepNorm (``deep_lr``)."""
    xavier, deep = dict(POST, init="xavier", warmup_steps=50), dict(DEEP, warmup_steps=50)
    if part == "rates":
        return Needs(_every_rate(ref, INIT_CTL, xavier) + _every_rate(ref, "deep_lr", deep))
    if part == "at":
        return Needs(_scale(INIT_CTL, xavier, R_POST) + _scale("deep_lr", deep, R_POST))
    return Needs(_scale(INIT_CTL, xavier, _grid(ref, INIT_CTL, xavier, RATE_GRID).best)
                 + _scale("deep_lr", deep, _grid(ref, "deep_lr", deep, RATE_GRID).best))


def _post_warmup(ref: Reference) -> Needs:
    """F6's Post-LN part: in ``scale/deep_lr`` where the setting has it (the reference, since
    pre-registration 3), each arm at its best rate; else in ``best``."""
    if not ref.matching(f"{SCALE}/{DEEP_LR}", **DEEP_POST):
        return Needs((_best(placement="post"), _best(placement="post", warmup=0)))
    arms = [dict(DEEP_POST, warmup_steps=w) for w in (50, 0)]
    return Needs(tuple(v for want in arms for v in _scale(
        DEEP_LR, want, _grid(ref, DEEP_LR, want, RATE_GRID).best)))


# (claim id, start of the part's text) -> Needs, or a function of the Reference giving it. Every
# evidence part the statistics rule judges has one (tests/test_extra.py), so that a part that
# reads underpowered in any setting has its extra seeds defined before anyone sees it.
PLAN = {
    ("S", "below bigram"): Needs((_best(),)),
    ("F2", "batch: a gap"): Needs((_best("batch"),)),
    ("F2", "masked_batch: a gap"): Needs((_best("masked_batch"),)),
    ("F3", "masked BN ends better under pad"): Needs(_pair("pad_to_max", {"norm": "batch"},
                                                           {"norm": "masked_batch"})),
    ("F3", "masked BN ends better"): Needs((_best("batch"), _best("masked_batch"))),
    ("F4", "collapsed at init without residual"): Needs((_best(), _best(residual="false"))),
    ("F4", "trains worse without residual"): Needs((_best(), _best(residual="false"))),
    ("F5", "stream grows without a norm"): Needs((_best(), _best("none"))),
    ("F6", "Post-LN needs warm-up"): _post_warmup,
    ("F6", "Pre-LN does not"): Needs((_best(), _best(warmup=0))),
    ("F6", "Post-LN's init gradient"): Needs(analyses=(GRAD_PROFILE,)),
    ("F7", "BN worse at small batches"): Needs((_best(), _best("batch")), (BATCH_SIZE,)),
    ("F9", "pad-to-max pollutes naive BN"): Needs((_best("batch"),), (PADDING,)),
    ("F9", "masked BN ends better under pad_to_max"): Needs(_pair(
        "pad_to_max", {"norm": "batch"}, {"norm": "masked_batch"})),
    ("F9", "masked BN ends better under small_batch"): Needs(_pair(
        "small_batch", {"norm": "batch"}, {"norm": "masked_batch"})),
    ("F10", "trains worse without γ/β"): Needs((_best(), _AFFINE_OFF)),
    ("F10", "γ/β spread the output norms"): Needs((_best(),), (STREAM,)),
    ("F11", "Pre-LN + residual holds"): lambda ref: Needs(_depth(ref)),
    ("F11", "Pre-LN + residual beats"): lambda ref: Needs(_depth(ref, "no norm + residual")),
    **{("F11", f"{name} falls behind"): (lambda ref, n=name: Needs(_depth(ref, n)))
       for name in ("Post-LN + residual", "no norm + residual", "Pre-LN, no residual")},
    ("F12", "the last block keeps the token"): Needs((_best(), _best(residual="false")),
                                                     (STREAM,)),
    ("F12", "and loses it without"): Needs((_best(), _best(residual="false")), (STREAM,)),
    ("F14", "DyT trains with its authors' recipe"): lambda ref: Needs((_dyt(ref),)),
    ("F14", "DyT matches Pre-LN"): lambda ref: Needs((_dyt(ref), _best())),
    ("F14", "saturated where it stalls"): lambda ref: Needs(_dyt_alphas(ref)),
    ("F15", "the batch model"): Needs((_best(), _best("batch")), (DECODE,)),
    ("F15", "the masked_batch model"): Needs((_best(), _best("masked_batch")), (DECODE,)),
    ("F17", "the short formula matches autodiff"): Needs((_best(),), (LN_BACKWARD,)),
    # F18 computes LayerNorm on draws fixed in code: no run or analysis to add seeds to
    ("F18", "the lab's LayerNorm keeps"): Needs(),
    ("F19", "the scale reads better with γ/β"): Needs((_best(), _AFFINE_OFF), (STREAM,)),
    # pre-registration 3 (results/PREREGISTRATION-SCALE.md): its parts, by their letter
    ("I1", "(a)"): lambda ref: _inst(ref, "QK-norm", "own"),
    ("I1", "(b)"): lambda ref: _inst(ref, "QK-norm", "top"),
    ("I1", "(c)"): lambda ref: _inst(ref, "QK-norm", "top"),
    ("I1", "(d)"): lambda ref: _inst(ref, "QK-norm", "every"),
    ("I1", "(e)"): lambda ref: _inst(ref, "QK-norm", "best"),
    ("I2", "(a)"): lambda ref: _inst(ref, "z-loss", "best"),
    ("I2", "(b)"): lambda ref: _inst(ref, "z-loss", "top"),
    ("I2", "(c)"): lambda ref: _inst(ref, "z-loss", "top"),
    ("I2", "(d)"): lambda ref: _inst(ref, "z-loss", "best"),
    ("I3", "(a)"): _peri,
    ("I3", "(b)"): _peri,
    ("I4", "(a)"): lambda ref: _deep(ref, "rates"),
    ("I4", "(b)"): lambda ref: _deep(ref, "at"),
    ("I4", "(c)"): lambda ref: _deep(ref, "cold"),
    ("I4", "(d)"): lambda ref: _deep(ref, "depth"),
    # pre-registration 4 (results/PREREGISTRATION-INIT.md)
    ("I6", "(a)"): lambda ref: _init_ctl(ref, "at"),
    ("I6", "(b)"): lambda ref: _init_ctl(ref, "rates"),
    ("I6", "(c)"): lambda ref: _init_ctl(ref, "best"),
}


def needs(ref: Reference, claim: str, text: str) -> Needs | None:
    """The entry of ``PLAN`` for a part (the longest matching start of its text), or None."""
    keys = [k for k in PLAN if k[0] == claim and text.startswith(k[1])]
    if not keys:
        return None
    entry = PLAN[max(keys, key=lambda k: len(k[1]))]
    return entry(ref) if callable(entry) else entry
