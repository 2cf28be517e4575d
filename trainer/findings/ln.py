"""Claim F13: LN's own numbers, measured with the lab's real LayerNorm layer by ``analyze
ln-numbers`` (``trainer.analysis.ln_numbers``; no runs needed) and judged here from its CSV.

The same two vectors as the doc-tested example in ``trainer/models/norms.py``: one dominant
feature, damped to a unit-variance vector; a near-constant one, re-expanded. And the texts'
"each token is normalised over its own features" as a Jacobian: d output[b, t] / d input[b', t']
over a (B, T, C) input is exactly zero for (b', t') != (b, t), on random inputs of 3 seeds
(BatchNorm in training mode, for contrast, is not). Figure: ``analysis/ln_numbers.png`` (drawn
by the analysis).

Every part evaluates LN's definition, so every part is a *control* (a check that the lab's layer
is what the equations say) and the verdict is "checks only": nothing here could have come out
the other way. The measurements about LN live in F1, F2, F7, F8 and F10.

``definition_rows`` reads the CSVs of the two analyses that measure LN's definition rather than
runs (F13's ``ln_numbers.csv``, F18's ``ln_epsilon.csv``, claim in ``inference``).
"""

from __future__ import annotations

import csv

import numpy as np

from trainer.analysis.ln_numbers import JACOBIAN, vectors_of
from trainer.findings.claim import Finding, line
from trainer.rundir import analysis_output
from trainer.findings.thresholds import DEPENDENT_MIN, INVARIANT_MAX, REEXPANDED_MIN, UNIT_TOL

LN_NUMBERS_CSV = analysis_output("ln-numbers")


def definition_rows(f: Finding, ref, relpath: str) -> list[dict]:
    """The rows of an analysis CSV under ``ref``'s root that measures LN's definition, not runs;
    a missing file is recorded on ``f``. Unlike ``Reference.analysis`` the file is not added to
    ``f.files``: the page showed these claims as "no runs" before their numbers moved into CSVs
    (issue #57), and its setting line and Provenance table stay as they were; the file's
    commit is in its own ``NAME.meta.json``."""
    path = ref.root / relpath
    if not path.is_file():
        f.missing.append(relpath)
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


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
                plot=analysis_output("ln-numbers", ".png"))
    rows = definition_rows(f, ref, LN_NUMBERS_CSV)
    if f.missing:
        return f
    vectors = vectors_of(rows)
    jac: dict = {}
    for r in rows:
        if r["measure"] == JACOBIAN:
            jac.setdefault(r["norm"], {})[int(r["seed"])] = float(r["value"])
    if set(vectors) != {"dominant", "near-constant"} or set(jac) != {"layer", "batch"}:
        f.missing.append(f"{LN_NUMBERS_CSV}: the two vectors and both norms' Jacobians")
        return f
    (_, dominant), (_, near) = vectors["dominant"], vectors["near-constant"]
    for name, (x, y) in vectors.items():
        # rounded so float32 noise (~1e-7, its sign machine-dependent) never reaches the page
        shown = ", ".join(f"{round(float(v), 3) + 0.0:.3f}" for v in y)
        f.lines.append(f"{name}: LN({x}) = [{shown}] (input std "
                       f"{np.std(x):.4g} → output std {np.std(y):.3f}, mean "
                       f"{round(float(np.mean(y)), 3) + 0.0:.3f})")
    f.lines += [line(f"{n}, max cross-token Jacobian entry", v) for n, v in jac.items()]
    f.control("the dominant vector becomes mean 0, std 1",
              abs(float(np.mean(dominant))) <= UNIT_TOL
              and abs(float(np.std(dominant)) - 1.0) <= UNIT_TOL)
    f.control("the near-constant vector is re-expanded", float(np.std(near)) >= REEXPANDED_MIN)
    f.control("LN's tokens do not see each other (BN's in training mode do)",
              all(v < INVARIANT_MAX for v in jac["layer"].values())
              and all(v > DEPENDENT_MIN for v in jac["batch"].values()))
    return f


CLAIMS = (f13,)
