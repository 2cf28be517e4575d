"""The pre-registered thresholds the analyses draw on their figures, with the reason for each
(and F18's token and ε grid, which ``analyze ln-epsilon`` measures).

They are claims' thresholds (``trainer.findings.thresholds`` imports them under the same names,
with every other threshold): they live here, below both, so that the analyses read them without
importing a claim module, and the claims read analyses, never the reverse. Fixed before the runs
that test them and never loosened after (results/PREREGISTRATION.md). No TensorFlow here.
"""

# ---- S, F1-F7, F15, F16 --------------------------------------------------------------------
# Per-token norms: float32 reassociation noise on logits of size ~10 is ~1e-6; 1e-4 leaves 100x
# (defined beside the norm contract that measures it, trainer/telemetry/definitions.py).
from trainer.telemetry.definitions import INVARIANT_MAX  # noqa: E402,F401
# Batch dependence a reader would notice: a hundredth of a logit.
DEPENDENT_MIN = 1e-2

# ---- F9 ------------------------------------------------------------------------------------
# F9: a shift of a tenth of a feature's standard deviation, subtracted from every real token by
# naive BN, moves its normalised output by 0.1: a thousand times LN's invariance bound.
POLLUTION_MIN = 0.1

# ---- F10 -----------------------------------------------------------------------------------
# F10: the spread γ gives per-token norms after LN must be visible: 5 % of the mean norm.
AFFINE_SPREAD_MIN = 0.05
# F10: without γ/β every token leaves LN with norm sqrt(C) (up to epsilon): a CV of 1e-3 allows
# epsilon's effect on near-constant tokens and nothing more.
FLAT_SPREAD_MAX = 1e-3

# ---- F17 -----------------------------------------------------------------------------------
# F17: an analytic gradient "matches" autodiff when its max error is below a thousandth of the
# gradient's largest entry (float32 autodiff and the exact formula agree to ~1e-6 of it).
FORMULA_TOL = 1e-3

# ---- F18 -----------------------------------------------------------------------------------
# F18 (a mechanism demonstration, no runs): the token with a large common offset, in float32.
OFFSET = 1e4
OFFSET_SPREAD = 1.0  # std of the token's features around the offset (float32 keeps ~1e-3 of it)
EPSILONS = (0.0, 1e-12, 1e-5)
# An LN output "keeps the spread" when its max error against the float64 two-pass LN of the same
# float32 input is below 1e-2 (a hundredth of a unit-variance feature) ...
SPREAD_KEPT = 1e-2
# ... and "loses" it when the error exceeds 0.1 (or the output is NaN/Inf).
SPREAD_LOST = 0.1
