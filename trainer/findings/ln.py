"""Claim F13: LN's own numbers, computed with the lab's real LayerNorm layer (no runs needed).

The same two vectors as the doc-tested example in ``trainer/models/norms.py``: one dominant
feature, damped to a unit-variance vector; a near-constant one, re-expanded. And the texts'
"each token is normalised over its own features" as a Jacobian: d output[b, t] / d input[b', t']
over a (B, T, C) input is exactly zero for (b', t') != (b, t), on random inputs of 3 seeds
(BatchNorm in training mode, for contrast, is not). Figure: ``analysis/ln_numbers.png``.

Every part evaluates LN's definition, so every part is a *control* (a check that the lab's layer
is what the equations say) and the verdict is "checks only": nothing here could have come out
the other way. The measurements about LN live in F1, F2, F7, F8 and F10.

F18's numbers live here too (the claim is in ``inference``): LN of one float32 token, in numpy
with a one-pass or a two-pass variance at each ε of ``EPSILONS`` and with the lab's layer, on a
token with a large common offset and on a constant one (``epsilon_table``).
"""

from __future__ import annotations

import numpy as np

from trainer.findings.claim import Finding, line
from trainer.findings.thresholds import (DEPENDENT_MIN, EPSILONS, INVARIANT_MAX, OFFSET,
                                         OFFSET_SPREAD, REEXPANDED_MIN, UNIT_TOL)

DOMINANT = [10.0, 0.0, 0.0, 0.0]
NEAR_CONSTANT = [1.0, 1.01, 0.99, 1.0]
SEEDS = (0, 1, 2)


def normalise(vectors: list[list[float]], norm: str = "layer") -> np.ndarray:
    from trainer.models.norms import make_norm

    return np.asarray(make_norm(norm)(np.asarray([vectors], "float32")))[0]


def cross_token_jacobian(norm: str, seed: int) -> float:
    """max |d y[b, t] / d x[b', t']| over (b', t') != (b, t), a random (2, 3, 5) input."""
    import tensorflow as tf

    from trainer.models.norms import make_norm

    layer = make_norm(norm)
    x = tf.constant(np.random.default_rng(seed).normal(size=(2, 3, 5)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, padding_mask=tf.ones((2, 3)), training=True)
    jac = tape.jacobian(y, x).numpy()
    for b in range(2):
        for t in range(3):
            jac[b, t, :, b, t, :] = 0.0
    return float(np.abs(jac).max())


def f13(ref) -> Finding:
    f = Finding("F13", """LN normalises each token over its own features: a dominant feature is
                    damped, a near-constant vector re-expanded, and no token's output depends on
                    another token's input""",
                """LN (the lab's layer, ε = 1e-5) of two example vectors; max cross-token entry of
                    the Jacobian d y[b, t] / d x[b', t'] on random (2, 3, 5) inputs, 3 seeds""",
                f"""nothing (a definition): a failed check would be a bug — the dominant
                    vector's output mean or std off 0 / 1 by > {UNIT_TOL:g}, the near-constant
                    one's output std below {REEXPANDED_MIN}, an LN cross-token Jacobian entry >
                    {INVARIANT_MAX:g}, or BN's (training mode) ≤ {DEPENDENT_MIN:g}""",
                plot="analysis/ln_numbers.png")
    out = normalise([DOMINANT, NEAR_CONSTANT])
    jac = {n: {s: cross_token_jacobian(n, s) for s in SEEDS} for n in ("layer", "batch")}
    for name, x, y in (("dominant", DOMINANT, out[0]), ("near-constant", NEAR_CONSTANT, out[1])):
        # rounded so float32 noise (~1e-7, its sign machine-dependent) never reaches the page
        shown = ", ".join(f"{round(float(v), 3) + 0.0:.3f}" for v in y)
        f.lines.append(f"{name}: LN({x}) = [{shown}] (input std "
                       f"{np.std(x):.4g} → output std {np.std(y):.3f}, mean "
                       f"{round(float(np.mean(y)), 3) + 0.0:.3f})")
    f.lines += [line(f"{n}, max cross-token Jacobian entry", v) for n, v in jac.items()]
    f.control("the dominant vector becomes mean 0, std 1",
              abs(float(np.mean(out[0]))) <= UNIT_TOL and abs(float(np.std(out[0])) - 1.0) <= UNIT_TOL)
    f.control("the near-constant vector is re-expanded", float(np.std(out[1])) >= REEXPANDED_MIN)
    f.control("LN's tokens do not see each other (BN's in training mode do)",
              all(v < INVARIANT_MAX for v in jac["layer"].values())
              and all(v > DEPENDENT_MIN for v in jac["batch"].values()))
    return f


CLAIMS = (f13,)


# ---- F18: ε and the two-pass variance (a mechanism demonstration, in float32 numpy) ----------
FEATURES = 64
METHODS = ("one-pass", "two-pass")


def offset_token(seed: int) -> np.ndarray:
    """A float32 token with a large common offset: OFFSET + OFFSET_SPREAD·N(0, 1) per feature."""
    rng = np.random.default_rng(seed)
    return (OFFSET + OFFSET_SPREAD * rng.standard_normal(FEATURES)).astype(np.float32)


def constant_token() -> np.ndarray:
    """Every feature OFFSET (exact in float32, and so are its sums: its variance is exactly 0)."""
    return np.full(FEATURES, OFFSET, np.float32)


def numpy_ln(x: np.ndarray, epsilon: float, method: str, dtype=np.float32) -> np.ndarray:
    """LN of one token without γ/β, all arithmetic in ``dtype``: the variance one-pass
    (E[x²] − E[x]²) or two-pass (the mean of squared deviations from the mean)."""
    x = np.asarray(x, dtype)
    mean = x.mean(dtype=dtype)
    if method == "two-pass":
        var = np.square(x - mean).mean(dtype=dtype)
    else:
        var = np.square(x).mean(dtype=dtype) - mean * mean
    with np.errstate(all="ignore"):  # a negative variance or 0/0 is part of what is shown
        return (x - mean) / np.sqrt(var + dtype(epsilon))


def spread_error(y: np.ndarray, x: np.ndarray, epsilon: float) -> float:
    """max |y − LN(x)| against the float64 two-pass LN of the same float32 input ``x``; inf when
    ``y`` holds a NaN or Inf."""
    y = np.asarray(y, np.float64)
    if not np.isfinite(y).all():
        return float("inf")
    return float(np.abs(y - numpy_ln(x, epsilon, "two-pass", np.float64)).max())


def lab_layer_norm(x: np.ndarray) -> tuple[np.ndarray, float]:
    """The lab's LayerNorm layer (``make_norm("layer")``, fresh: γ = 1, β = 0) on one token, and
    its own ε."""
    from trainer.models.norms import make_norm

    layer = make_norm("layer")
    return np.asarray(layer(np.asarray(x, np.float32)[None, None]))[0, 0], float(layer.epsilon)


def epsilon_table() -> dict:
    """F18's numbers: ``offset`` (method, ε) -> seed -> ``spread_error``, "lab" included at its
    own ε; ``constant`` (method, ε) -> the LN of the constant token (float32)."""
    offset, constant = {}, {}
    for method in METHODS:
        for eps in EPSILONS:
            offset[(method, eps)] = {s: spread_error(numpy_ln(offset_token(s), eps, method),
                                                     offset_token(s), eps) for s in SEEDS}
            constant[(method, eps)] = numpy_ln(constant_token(), eps, method)
    _, eps = lab_layer_norm(constant_token())
    offset[("lab", eps)] = {s: spread_error(lab_layer_norm(offset_token(s))[0], offset_token(s),
                                            eps) for s in SEEDS}
    constant[("lab", eps)] = lab_layer_norm(constant_token())[0]
    return {"offset": offset, "constant": constant}


def describe_output(y: np.ndarray) -> str:
    """A constant token's LN output in a word: NaN, Inf, 0, or its largest entry."""
    if np.isnan(y).any():
        return "NaN"
    if np.isinf(y).any():
        return "Inf"
    return "0" if not np.abs(y).max() else f"max |y| {np.abs(y).max():.3g}"
