"""F17: the texts' LayerNorm backward formula against autodiff, on a trained model's own numbers.

For each run directory (``model.norm=layer``) the model is restored from its last checkpoint
(``trainer.train.checkpoint.restore_trained``) and run in inference mode on ``--windows``
full-length test windows (``full_windows``). For every block's attention LayerNorm, over the
real tokens: x, what the norm saw (``return_hidden``'s ``norm_input``), and dL/dy, the gradient
of the mean next-token test loss with respect to the norm's output y = γ⊙x̂ + β (``normed``).
Then, per token, with σ = sqrt(var(x) + ε) (the layer's ε), x̂ = (x − mean(x)) / σ and
g = dL/dx̂ = γ⊙dL/dy:

- autodiff: dL/dx through the lab's LayerNorm layer (``GradientTape``, upstream dL/dy);
- the short formula (1/σ)(g − mean(g)), as one of the texts gives it;
- the full formula (1/σ)(g − mean(g) − x̂·mean(g⊙x̂)).

Each formula's error is max |formula − autodiff| / max |autodiff| over the block's tokens
(formulas in float64 from the float32 numbers); ``missing_share`` is ‖x̂·mean(g⊙x̂)‖ /
‖g − mean(g)‖ over all of them (Frobenius norms): the size of what the short formula drops.

    python -m trainer analyze ln-backward RUN_DIR... --out results/reference/analysis
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.analysis import analyse_runs, analysis_main, at_least_one, option
from trainer.analysis.batch_size import full_windows
from trainer.atomic import save_figure, subplots
from trainer.config import ConfigError
from trainer.analysis.thresholds import FORMULA_TOL

WINDOWS = 8


def formulas(x: np.ndarray, dy: np.ndarray, gamma: np.ndarray, epsilon: float) -> dict:
    """The short and full LN backward formulas for tokens ``x`` (N, C) with upstream gradient
    ``dy`` (N, C) = dL/d(γ⊙x̂ + β), in float64; also the term the short one drops."""
    x, g = np.asarray(x, np.float64), np.asarray(dy, np.float64) * np.asarray(gamma, np.float64)
    sigma = np.sqrt(x.var(-1, keepdims=True) + epsilon)
    xhat = (x - x.mean(-1, keepdims=True)) / sigma
    centred = g - g.mean(-1, keepdims=True)
    missing = xhat * (g * xhat).mean(-1, keepdims=True)
    return {"short": centred / sigma, "full": (centred - missing) / sigma,
            "missing_share": float(np.linalg.norm(missing) / np.linalg.norm(centred))}


def autodiff(norm, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dL/dx through the ``norm`` layer itself, for upstream gradient ``dy`` (N, C)."""
    import tensorflow as tf

    x = tf.constant(x[None], tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = norm(x, training=False)
    return tape.gradient(y, x, output_gradients=tf.constant(dy[None], tf.float32)).numpy()[0]


def norm_io(model, batch: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per block, over the batch's real tokens: (the attention norm's input, dL/d its output),
    L the mean next-token loss of the batch (inference mode)."""
    import tensorflow as tf

    real = batch["mask"] > 0
    with tf.GradientTape() as tape:
        logits, hidden = model(batch["inputs"], padding_mask=batch["mask"], training=False,
                               return_hidden=True)
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["targets"],
                                                            logits=logits)
        loss = tf.reduce_sum(ce * batch["mask"]) / batch["mask"].sum()
    grads = tape.gradient(loss, [h["normed"] for h in hidden])
    return [(np.asarray(h["norm_input"], np.float32)[real], np.asarray(g, np.float32)[real])
            for h, g in zip(hidden, grads)]


def analyse(run_dir: Path, windows: int) -> list[dict]:
    from trainer.train.checkpoint import restore_trained

    cfg, corpus, model = restore_trained(run_dir)
    if str(cfg.model.norm) != "layer":
        raise ConfigError(f"{run_dir}: ln-backward needs model.norm=layer, got {cfg.model.norm}")
    rows = []
    for i, (block, (x, dy)) in enumerate(zip(model.blocks, norm_io(model, full_windows(
            corpus, windows)))):
        norm = block.attention_norm
        gamma = norm.inner.gamma.numpy() if norm.affine else np.ones(x.shape[-1], np.float32)
        auto = autodiff(norm, x, dy).astype(np.float64)
        got = formulas(x, dy, gamma, float(norm.epsilon))
        scale = np.abs(auto).max()
        rows.append({"run": run_dir.name, "norm": "layer", "residual": str(cfg.model.residual),
                     "placement": str(cfg.model.placement), "seed": int(cfg.train.seed),
                     "block": i, "tokens": len(x), "max_abs_grad": float(scale),
                     "short_error": float(np.abs(got["short"] - auto).max() / scale),
                     "full_error": float(np.abs(got["full"] - auto).max() / scale),
                     "missing_share": got["missing_share"]})
    return rows


def plot(rows: list[dict], path: Path) -> None:
    """Per block, each formula's max error / max |autodiff| (seeds as faint lines, log scale),
    with ``FORMULA_TOL``; and the share of the term the short formula drops."""
    from trainer.results.palette import LOG_AXIS_FLOOR

    fig, axes = subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    looks = (("short_error", "short: (1/σ)(g − mean g)", "#d62728"),
             ("full_error", "full: … − x̂·mean(g⊙x̂)", "#1f77b4"),
             ("missing_share", "‖x̂·mean(g⊙x̂)‖ / ‖g − mean g‖", "#7f7f7f"))
    for ax, (key, label, color) in zip((axes[0], axes[0], axes[1]), looks):
        by_run: dict = {}
        for r in rows:
            by_run.setdefault(r["run"], {})[int(r["block"])] = max(float(r[key]), LOG_AXIS_FLOOR)
        for k, curve in enumerate(by_run.values()):
            blocks = sorted(curve)
            ax.plot(blocks, [curve[b] for b in blocks], "-o", color=color, alpha=0.5, lw=1,
                    label=label if k == 0 else None)
    axes[0].set_yscale("log")
    axes[0].axhline(FORMULA_TOL, color="k", ls=":", lw=1, label=f"matches: < {FORMULA_TOL:g}")
    axes[0].set_ylabel("max |formula − autodiff| / max |autodiff|")
    axes[0].set_title("F17: LN backward formulas vs autodiff (one line per run)", loc="left")
    axes[1].set_ylabel("share")
    axes[1].set_title("what the short formula drops", loc="left")
    for ax in axes:
        ax.set_xlabel("block (attention LayerNorm)")
        ax.legend(frameon=False, fontsize=8)
    save_figure(fig, path)


def run(run_dirs: list[Path], out: Path, windows: int = WINDOWS) -> list[dict]:
    def describe(r: dict) -> str:
        return (f"{r['run']:45s} block {r['block']} short {r['short_error']:.3g} full "
                f"{r['full_error']:.3g} missing share {r['missing_share']:.3g}")

    return analyse_runs(run_dirs, out, "ln_backward", lambda d: analyse(d, windows), plot,
                        describe)


main = analysis_main(
    "ln-backward", __doc__, run, at_least_one("windows"),
    windows=option("--windows", type=int, default=WINDOWS, help="test windows read"))
