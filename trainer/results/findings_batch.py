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

# ---- thresholds (fixed before the runs that test them; never loosened after) ---------------
# F9: a shift of a tenth of a feature's standard deviation, subtracted from every real token by
# naive BN, moves its normalised output by 0.1: a thousand times LN's invariance bound.
POLLUTION_MIN = 0.1
# F9: the three ways of batching the same training stream (analysis conditions, and the
# sub-sweep each condition's losses come from).
CONDITIONS = {"bucketed": "grid", "pad_to_max": "pad_to_max", "small_batch": "small_batch"}

CLAIMS: tuple = ()
