"""F13: LN's own numbers, measured with the lab's real LayerNorm layer (no runs, no checkpoint).

The same two vectors as the doc-tested example in ``trainer/models/norms.py``: one dominant
feature, damped to a unit-variance vector; a near-constant one, re-expanded. And the texts'
"each token is normalised over its own features" as a Jacobian: d output[b, t] / d input[b', t']
over a (B, T, C) input is exactly zero for (b', t') != (b, t), on random inputs of ``SEEDS``
(BatchNorm in training mode, for contrast, is not).

``ln_numbers.csv`` holds one row per measured number (columns ``measure, norm, seed, feature,
input, value``): for ``measure`` ``dominant`` and ``near-constant`` one row per feature (its
input and LN's output, ``value``); for ``cross_token_jacobian`` one row per norm and seed (the
largest cross-token entry, ``value``). The claim (``trainer.findings.ln``) judges these rows, so
the findings page needs no TensorFlow. Figure: ``ln_numbers.png``.

    python -m trainer analyze ln-numbers --out results/reference/analysis
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from trainer.atomic import save_figure, subplots, write_csv
from trainer.results.plots import DPI
from trainer.rundir import analysis_name

DOMINANT = [10.0, 0.0, 0.0, 0.0]
NEAR_CONSTANT = [1.0, 1.01, 0.99, 1.0]
VECTORS = {"dominant": DOMINANT, "near-constant": NEAR_CONSTANT}
JACOBIAN = "cross_token_jacobian"
NORMS = ("layer", "batch")
SEEDS = (0, 1, 2)


def normalise(vectors: list[list[float]], norm: str = "layer") -> np.ndarray:
    """The lab's ``norm`` layer (fresh: γ = 1, β = 0) over ``vectors`` as one (1, T, C) batch."""
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


def measure(vectors: dict = VECTORS, jacobian=cross_token_jacobian) -> list[dict]:
    """The rows of ``ln_numbers.csv``: LN of each of ``vectors`` (name -> features), then
    ``jacobian(norm, seed)`` for each of ``NORMS`` and ``SEEDS``."""
    rows = []
    out = normalise(list(vectors.values()))
    for (name, x), y in zip(vectors.items(), out):
        rows += [{"measure": name, "norm": "layer", "seed": "", "feature": i,
                  "input": float(xi), "value": float(yi)} for i, (xi, yi) in enumerate(zip(x, y))]
    rows += [{"measure": JACOBIAN, "norm": n, "seed": s, "feature": "", "input": "",
              "value": jacobian(n, s)} for n in NORMS for s in SEEDS]
    return rows


def vectors_of(rows: list[dict]) -> dict[str, tuple[list[float], np.ndarray]]:
    """Measure -> (its input as written, LN's float32 output) from ``ln_numbers.csv``'s rows (as
    read back: strings, or as ``measure`` made them)."""
    out: dict = {}
    for r in rows:
        if r["measure"] != JACOBIAN:
            x, y = out.setdefault(r["measure"], ([], []))
            x.append(float(r["input"]))
            y.append(float(r["value"]))
    return {m: (x, np.asarray(y, np.float32)) for m, (x, y) in out.items()}


def plot(rows: list[dict], path: Path) -> None:
    """Each example vector before and after the lab's LayerNorm."""
    from trainer.results.palette import NORM_COLORS

    fig, axes = subplots(1, 2, figsize=(9, 3.4), constrained_layout=True)
    titles = {"dominant": "one dominant feature", "near-constant": "near-constant"}
    for ax, (name, (x, y)) in zip(axes, vectors_of(rows).items()):
        idx = np.arange(len(x))
        ax.bar(idx - 0.2, x, 0.4, color="#bbbbbb", label="input x")
        ax.bar(idx + 0.2, y, 0.4, color=NORM_COLORS["layer"], label="LN(x)")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(idx, [f"feature {i}" for i in idx])
        ax.set_title(f"{titles.get(name, name)}: std {np.std(x):.3g} → {np.std(y):.3g}",
                     loc="left")
        ax.legend(frameon=False)
    save_figure(fig, path, dpi=DPI)


def main(argv: list[str]) -> int:
    return table_main("ln-numbers", __doc__, measure, plot, argv)


def table_main(kind: str, doc: str, measure, plot, argv: list[str]) -> int:
    """``analyze KIND --out DIR`` for an analysis of LN's definition (no runs, no model): its
    ``measure()`` rows as DIR/NAME.csv, ``plot`` as DIR/NAME.png, the command as the stamp."""
    from trainer.provenance import write_stamp

    p = argparse.ArgumentParser(prog=f"python -m trainer analyze {kind}",
                                description=doc.splitlines()[0])
    name = analysis_name(kind)
    p.add_argument("--out", required=True, type=Path, help=f"directory for {name}.csv/.png")
    args = p.parse_args(argv)
    rows, out = measure(), args.out / name
    write_csv(out.with_suffix(".csv"), rows)
    plot(rows, out.with_suffix(".png"))
    write_stamp(out.with_suffix(".csv"), ["analyze", kind, *argv])
    return 0
