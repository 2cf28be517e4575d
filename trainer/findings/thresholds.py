"""Every threshold the claims are judged by, with the reason for its value.

Fixed before the runs that test them and never loosened after: a change is a new
pre-registration with new runs. This module imports no TensorFlow and no claim. The thresholds
the analyses also draw on their figures (INVARIANT_MAX, DEPENDENT_MIN, POLLUTION_MIN,
AFFINE_SPREAD_MIN, FLAT_SPREAD_MAX, FORMULA_TOL; F18's OFFSET, OFFSET_SPREAD, EPSILONS, SPREAD_KEPT,
SPREAD_LOST) are defined, with their reasons, in
``trainer.analysis.thresholds``, below both, and imported here under the same names: the claims
read the analyses, the analyses never read a claim module.
"""

from trainer.analysis.thresholds import (AFFINE_SPREAD_MIN, DEPENDENT_MIN, EPSILONS,  # noqa: F401
                                         FLAT_SPREAD_MAX, FORMULA_TOL, INVARIANT_MAX, OFFSET,
                                         OFFSET_SPREAD, POLLUTION_MIN, SPREAD_KEPT, SPREAD_LOST)
from trainer.results.baselines import PLATEAU_MARGIN  # "at the plateau": one definition, tables too

# ---- the design (pre-registered with the rules; results/PREREGISTRATION.md) -----------------
# Every variant a claim compares runs at least this many seeds at its own best rate ...
MIN_SEEDS = 3
# ... and the headline comparisons (S, F3, F4, F5, F6, F11) at least this many.
HEADLINE_SEEDS = 5
# The learning-rate grid every variant is trained at (1 seed): log-spaced, about sqrt(10) apart,
# two orders of magnitude (Wortsman et al. 2023 sweep a similar span at small scale).
RATE_GRID = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
# The short grid of the sub-sweeps that change the model (depth, DyT's alpha, no gamma/beta):
# the variant's best grid rate times these factors (1/sqrt(10), 1, sqrt(10)).
SHORT_GRID = (0.316, 1.0, 3.16)

# ---- S, F1-F7 ------------------------------------------------------------------------------
# INVARIANT_MAX (per-token norms: 1e-4) and DEPENDENT_MIN (batch dependence: 1e-2): above.
# LN's train/inference "gap" must be numerically zero (the same function in both modes).
GAP_ZERO = 1e-4
# A BN train/inference gap that matters: 0.05 nats is a 5 % change in perplexity.
GAP_MIN = 0.05
# Two variants' final eval losses: one is "better" by at least this (the plateau margin too).
LOSS_MARGIN = PLATEAU_MARGIN
# Rank collapse: the residual-free stack's last block keeps at least 0.1 less of its tokens'
# centred energy (||X - 1 mean^T|| / ||X||, range 0..1) than the residual stack's.
COLLAPSE_MARGIN = 0.1
# Stream growth without a norm: its last/first-block token std ratio at least twice LN's.
GROWTH_FACTOR = 2.0
# Fragility across learning rates: the no-norm stack's LR sensitivity (Wortsman et al.: mean
# over the grid of min(final, init loss) - best loss) exceeds Pre-LN's by at least 0.1 nats.
SENSITIVITY_MARGIN = 0.1
# Post-LN without warm-up must end at least 0.1 nats worse than with it (a diverged run: +inf).
WARMUP_MARGIN = 0.1
# Xiong et al.'s profile at init: Post-LN's FFN-out gradient norm, last/first block, above 1.5
# (grows toward the output); Pre-LN's below it (flat or shrinking).
PROFILE_GROWTH = 1.5
# The scale is right when healthy Pre-LN ends this far below the bigram baseline (issue #11).
HEALTHY_BELOW_BIGRAM = 0.3
# F7: "does not change with batch size": float32 reassociation across batch shapes moves a
# mean loss of ~2 nats by ~1e-6; 1e-4 leaves 100x headroom.
FLAT_MAX = 1e-4
# F7: BN in training mode at one sequence per batch must cost at least 0.1 nats more than at 64.
SMALL_BATCH_GAP = 0.1

# ---- F9 ------------------------------------------------------------------------------------
# POLLUTION_MIN (naive BN's shift of a real token's output: 0.1): above.

# ---- F10, F12, F14 -------------------------------------------------------------------------
# F10's AFFINE_SPREAD_MIN (0.05) and FLAT_SPREAD_MAX (1e-3): above.
# F12: "identity kept": a linear probe recovers the input byte at >= 90 % from the last block.
IDENTITY_HIGH = 0.9
# F12: "lost without the residual": at least 20 points lower at the last block.
IDENTITY_DROP = 0.2
# F14: a DyT layer is "saturated" when a quarter of its inputs sit in tanh's flat tails.
SATURATED_MIN = 0.25

# ---- F13 -----------------------------------------------------------------------------------
# A vector whose variance is far above epsilon leaves LN with mean 0 and std 1 to float32
# precision; 1e-3 leaves ample room.
UNIT_TOL = 1e-3
# "Re-expanded": a vector with std 0.007 (variance 5e-5, five times epsilon = 1e-5) comes out
# with at least half of unit std, i.e. scaled up ~70x or more.
REEXPANDED_MIN = 0.5

# ---- F15-F19: inference (added before the best-rate runs they read; PREREGISTRATION.md) ----
# F15/F16 read INVARIANT_MAX (a row's or a position's logits unchanged), DEPENDENT_MIN (BN in
# training mode, the contrast), LOSS_MARGIN and PLATEAU_MARGIN (serving BN at batch 1).
# F17's FORMULA_TOL (an analytic gradient matches autodiff: 1e-3 of its largest entry): above.
# F18's OFFSET, OFFSET_SPREAD, EPSILONS (the demonstration's token and ε grid, which
# ``analyze ln-epsilon`` measures), SPREAD_KEPT (1e-2) and SPREAD_LOST (0.1): above.
# F19: a held-out R^2 of a linear probe for each token's log pre-LN std, read from the last
# block's LN output: "γ/β restore the scale" when the model trained with them scores at least
# 0.1 higher than the one trained without.
SCALE_PROBE_MARGIN = 0.1
# F19 control: on one model, the probe reads the same from x̂ as from γ⊙x̂ + β (a per-feature
# affine map, invertible, shared by every token): equal R^2 to this tolerance.
PROBE_SAME_TOL = 1e-3

# ---- Pre-registration 2 (issue #34; results/PREREGISTRATION-REPLICATION.md) ----------------
# The statistics rule (trainer.results.metrics compare / threshold / not_worse) reads these.
# Every null part ("not worse", "holds", "does not need", "matches") is one-sided; its margin is
# the margin its claim already had: F6's WARMUP_MARGIN, F11's and F14's LOSS_MARGIN.
NULL_MARGIN = LOSS_MARGIN
# Extra seeds: a part that reads "underpowered" at the pre-registered seeds gets its variants run
# up to this many seeds, once, in the settings where a run costs the reference's.
MAX_SEEDS = 10
EXTRA_SEED_SETTINGS = ("reference", "python")

# DyT by its authors' recipe (Zhu et al. 2025, LLaMA code): a learnable scalar on the embeddings
# that puts the stream at std 1 at init: 1 / (0.02 * sqrt(2)) for two N(0, 0.02) tables.
EMBED_UNIT_SCALE = 35.36
# The initial alphas of the recipe sweep, the same at every DyT location (attention, FFN, final).
DYT_RECIPE_ALPHAS = (0.2, 0.5, 1.0)
# The alpha the replication settings run DyT at: the authors' default, fixed, not chosen.
DYT_RECIPE_ALPHA = 1.0

# The settings: name -> (its config, what changes against configs/reference.yaml).
SETTINGS = {
    "reference": ("configs/reference.yaml", "the reference: embedded Wikipedia, 800 steps, d = 64"),
    "python": ("configs/settings/python.yaml", "source code (docutils), 800 steps, d = 64"),
    "long": ("configs/settings/long.yaml", "Wikipedia, 3200 steps (4× the tokens), d = 64"),
    "wide": ("configs/settings/wide.yaml", "Wikipedia, 800 steps, d = 128 (~4× the parameters)"),
}
# The headline variants each replication setting runs: short name -> config values.
_PRE = dict(residual="true", placement="pre", warmup_steps=50)
HEADLINE_VARIANTS = {
    "Pre-LN": dict(norm="layer", **_PRE),
    "Post-LN": dict(norm="layer", residual="true", placement="post", warmup_steps=50),
    "RMSNorm": dict(norm="rms", **_PRE),
    "BN": dict(norm="batch", **_PRE),
    "masked BN": dict(norm="masked_batch", **_PRE),
    "no norm": dict(norm="none", **_PRE),
    "Pre-LN, no residual": dict(norm="layer", residual="false", placement="pre", warmup_steps=50),
    "DyT (recipe)": dict(norm="dyt", embed_scale=EMBED_UNIT_SCALE, dyt_alpha=DYT_RECIPE_ALPHA,
                         **_PRE),
    "Pre-LN, no warm-up": dict(norm="layer", residual="true", placement="pre", warmup_steps=0),
    "Post-LN, no warm-up": dict(norm="layer", residual="true", placement="post", warmup_steps=0),
}
# Seeds at the best rate per replication setting (python: HEADLINE_SEEDS for the variants S,
# F3, F4, F5, F6 compare, as in the reference; long and wide cost 4x a run: MIN_SEEDS for all).
REPLICATION_SEEDS = {"python": HEADLINE_SEEDS, "long": MIN_SEEDS, "wide": MIN_SEEDS}
# The claims judged in every setting (their other parts, and the other claims: reference only).
REPLICATED = ("S", "F3", "F4", "F5", "F6", "F14")

# ---- Pre-registration 3 (issues #55, #56; results/PREREGISTRATION-SCALE.md) ----------------
# One rate step (sqrt(10), as SHORT_GRID): the edge rule extends a grid by it, at most
# MAX_EXTENSIONS times per side, until the best rate is inside the grid.
RATE_STEP = 3.16
MAX_EXTENSIONS = 3
# "A trains at more rates than B": the per-seed count difference, every seed >= 1 and its
# interval above half a rate.
RATES_MARGIN = 0.5
# The instability grid: the reference grid and two steps above it, where Wortsman et al. (2024)
# find the attention-logit and output-logit instabilities of small models; every seed runs
# every rate.
INSTABILITY_GRID = RATE_GRID + (0.0948, 0.3)
INSTABILITY_SEEDS = (0, 1, 2)
# I1, I2: the high rate the claims read (one step above the reference grid).
R_TOP = 0.0948
# I1: attention logits "grow" / are "bounded": a factor of 4 (judged on logarithms), twice the
# factor the stream-growth claim uses, as logit growth in the literature spans decades.
LOGIT_FACTOR = 4.0
# I2: log Z "closer to 0" and "drifts more": half a nat (a factor e^0.5 = 1.6 on Z).
LOGZ_MARGIN = 0.5
# I3: Pre-LN's last/first-block stream std at least 1.5x Peri-LN's (Kim et al.'s "balanced
# variance growth"; below GROWTH_FACTOR, as both placements have a norm).
PERI_GROWTH_FACTOR = 1.5
# I4: the rate where Post-LN with warm-up collapsed in 4 of 10 runs (issue #55), and the depth
# and rates of the depth part (the depth sub-sweep's 12 blocks; three rates around Post-LN's best).
R_POST = 3e-3
DEEP_DEPTH = 12
DEEP_DEPTH_RATES = (1e-3, 3e-3, 1e-2)
# I5: an instrument "moves" when the max attention logit doubles from its end-of-warm-up value,
# when mean log Z moves 1 nat from it, or when the last block's token cosine passes 0.9.
LOGIT_MOVE = 2.0
LOGZ_MOVE = 1.0
COSINE_MOVE = 0.9
COLLAPSE_EVAL_EVERY = 10
# The ladder: widths at the reference's depth, corpus and 800 steps; 4 heads on every rung (so
# the reference and wide runs are rungs 64 and 128 as they stand); FFN 4d.
LADDER_WIDTHS = (32, 64, 128, 256)
LADDER_HEADS = 4
# The top rung runs only the variants its predictions name.
TOP_RUNG_VARIANTS = ("Pre-LN", "no norm", "Post-LN", "Post-LN, no warm-up", "QK-norm", "Peri-LN")
# The new variants (section 2's recipes) the ladder adds to HEADLINE_VARIANTS.
SCALE_VARIANTS = {
    "QK-norm": dict(norm="layer", qk_norm="layer", **_PRE),
    "z-loss": dict(norm="layer", z_loss=1e-4, **_PRE),
    "Peri-LN": dict(norm="layer", residual="true", placement="peri", warmup_steps=50),
    "DeepNorm": dict(norm="layer", residual="deepnorm", placement="post", init="xavier",
                     warmup_steps=50),
}
# The figures' y-axis: clipped this far beyond the compared variants' intervals.
AXIS_CLIP = 0.5
