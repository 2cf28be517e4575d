"""Claims F10 (γ/β), F12 (token identity through depth) and F14 (DyT saturation); the rules are
``findings``'.

F10 — γ and β restore what normalisation removes. Sub-sweep ``affine``
(``configs/sweeps/reference_affine.yaml``: Pre-LN + residual with ``model.norm_affine=false``)
next to the grid's Pre-LN + residual. ``analyze stream`` (``analysis/stream.csv``) measures the
coefficient of variation (std/mean over real tokens) of the per-token L2 norm of the last
block's LN output. Parts: without γ/β the final eval loss is worse by ``findings.LOSS_MARGIN``
(separate intervals); with γ/β the CV is >= ``AFFINE_SPREAD_MIN`` on every seed and without it
<= ``FLAT_SPREAD_MAX`` on every seed.

F12 — the residual keeps each token's identity. ``analyze stream`` fits a linear softmax probe
(frozen features, Adam) that decodes the input token id at position t from block i's output at
t, on held-out positions; final checkpoints of the grid's Pre-LN runs with and without residual.
Parts: with the residual the last block's accuracy is >= ``IDENTITY_HIGH`` on every seed;
without it the last block's accuracy is lower by ``IDENTITY_DROP`` (separate intervals).

F14 — DyT (γ·tanh(α·x) + β) trains where α keeps tanh out of saturation. Sub-sweep ``dyt``
(``configs/sweeps/reference_dyt.yaml``: ``model.dyt_alpha`` ∈ {0.05, 0.2, 0.5, 1.0}, Pre +
residual) logging ``probe/dyt_saturation/block_i`` (share of real tokens' features with
|α·x| > ``SATURATION_X``). Parts: at some α DyT ends below bigram on every seed; every α whose
mean final loss is at the unigram plateau has final saturation (max over blocks) >=
``SATURATED_MIN`` on every seed, and every α that ends below bigram has it below.
"""

# ---- thresholds (fixed before the runs that test them; never loosened after) ---------------
# F10: the spread γ gives per-token norms after LN must be visible: 5 % of the mean norm.
AFFINE_SPREAD_MIN = 0.05
# F10: without γ/β every token leaves LN with norm sqrt(C) (up to epsilon): a CV of 1e-3 allows
# epsilon's effect on near-constant tokens and nothing more.
FLAT_SPREAD_MAX = 1e-3
# F12: "identity kept": a linear probe recovers the input byte at >= 90 % from the last block.
IDENTITY_HIGH = 0.9
# F12: "lost without the residual": at least 20 points lower at the last block.
IDENTITY_DROP = 0.2
# F14: tanh'(3) < 0.01: past |α·x| = 3 the nonlinearity passes under 1 % of a change.
SATURATION_X = 3.0
# F14: a DyT layer is "saturated" when a quarter of its inputs sit in tanh's flat tails.
SATURATED_MIN = 0.25

CLAIMS: tuple = ()
