"""F10 and F12: what the residual stream still carries, block by block, in trained models.

For each run directory the model is restored from its last checkpoint
(``trainer.train.checkpoint.restore_trained``)
and run in inference mode on full-length test windows (``full_windows``), keeping every
block's hidden state (``return_hidden``):

- F12, token identity: a linear softmax probe (W, b), fitted on frozen features with full-batch
  Adam from zero (no randomness: deterministic), decodes the *input* token id at position t from
  block i's output at t (and from the embedding output, block -1). It is fitted on the first
  ``--train-windows`` windows and scored on the next ``--test-windows`` (disjoint text): a
  stream that keeps each token's identity scores near 1, one that has mixed it away does not.
- F10, γ/β: the coefficient of variation (std / mean over real tokens) of the per-token L2 norm
  of each block's attention-norm output (the norm applied to what it saw). LN without γ/β gives
  every token the norm sqrt(C): CV ~ 0; γ (and β) are what let the norm's output spread again.
  The same CV of the stream itself (block output) is given for context.
- F19, γ/β and scale: a ridge probe (closed form, float64, features standardised on the fitting
  windows: deterministic) for each real token's log std of the attention norm's *input*, read
  from the norm's output (``scale_probe_r2``) and from x̂, the input normalised without γ/β
  (``scale_probe_r2_xhat``; LN and RMSNorm, computed from the input with the layer's ε; empty for
  other norms): held-out R², fitted and scored on the same windows as the identity probe. A
  per-feature affine map (γ without a zero) cannot change what a standardised linear probe reads,
  so the two columns agree: the check that the probe sees what it says.

    python -m trainer analyze stream RUN_DIR... --out results/reference/analysis
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.analysis import analyse_runs, analysis_main, at_least_one, option
from trainer.analysis.batch_size import full_windows
from trainer.atomic import save_figure, subplots
from trainer.analysis.thresholds import AFFINE_SPREAD_MIN, FLAT_SPREAD_MAX

PROBE_STEPS = 300  # full-batch Adam steps of each probe (a convex problem: enough to settle)
PROBE_LR = 0.05  # Adam step on standardised features
EMBED = -1  # the "block" index of the embedding output
# F19's ridge penalty on standardised features: the probes fit ~6,000 tokens on 64 features, so
# it only keeps the solve well conditioned (LN's outputs are collinear: they sum to zero).
RIDGE = 1.0


def cv(values: np.ndarray) -> float:
    """std / mean (population std) of positive values, e.g. per-token L2 norms."""
    return float(values.std() / values.mean())


def probe_accuracy(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                   test_y: np.ndarray, steps: int = PROBE_STEPS, lr: float = PROBE_LR) -> float:
    """Held-out accuracy of a linear softmax probe x -> y fitted on (train_x, train_y).

    Features are standardised with the training set's per-feature mean and std; the classes are
    the labels seen in training (a held-out token never seen in training counts as an error).
    Full-batch Adam from W = 0, b = 0: the same inputs always give the same probe.
    """
    import tensorflow as tf

    classes, y = np.unique(train_y, return_inverse=True)
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    x = tf.constant((train_x - mean) / std, tf.float32)
    w = tf.Variable(tf.zeros((x.shape[1], len(classes))))
    b = tf.Variable(tf.zeros((len(classes),)))
    opt = tf.keras.optimizers.Adam(lr)
    labels = tf.constant(y, tf.int32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=x @ w + b))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))

    for _ in range(steps):
        step()
    pred = classes[np.argmax(((test_x - mean) / std) @ w.numpy() + b.numpy(), axis=1)]
    return float((pred == test_y).mean())


def ridge_r2(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
             test_y: np.ndarray, lam: float = RIDGE) -> float:
    """Held-out R² of a ridge regression x -> y (closed form, float64): features standardised
    with the fitting set's mean and std, intercept unpenalised (y centred on its fitting mean)."""
    mean, std = train_x.mean(0), train_x.std(0) + 1e-12
    a, b = ((np.asarray(x, np.float64) - mean) / std for x in (train_x, test_x))
    y0 = train_y.mean()
    w = np.linalg.solve(a.T @ a + lam * np.eye(a.shape[1]), a.T @ (train_y - y0))
    residual = test_y - (b @ w + y0)
    return float(1.0 - (residual ** 2).sum() / ((test_y - test_y.mean()) ** 2).sum())


def normalised(norm, x: np.ndarray) -> np.ndarray | None:
    """x̂: the tokens ``x`` (N, C) normalised by ``norm``'s definition without γ/β (LN, RMSNorm;
    float64, the layer's ε); None for a norm without one (DyT, BN, none)."""
    x = np.asarray(x, np.float64)
    kind = getattr(norm, "inner_name", None)
    if kind == "ln":
        x = x - x.mean(-1, keepdims=True)
    elif kind != "rms":
        return None
    return x / np.sqrt((x ** 2).mean(-1, keepdims=True) + norm.epsilon)


def features(model, batch: dict, size: int = 16) -> list[dict]:
    """Per layer (embedding output first, then each block), over the batch's real tokens:
    ``x`` (N, C) the layer's output, ``normed`` (N, C) the block's attention norm applied to what
    it saw and ``input`` (N, C) what it saw (both None for the embedding). Inference mode."""
    from keras import ops

    layers: list[dict] = []
    for i in range(0, len(batch["inputs"]), size):
        tokens, mask = batch["inputs"][i:i + size], batch["mask"][i:i + size]
        real = mask > 0
        length = tokens.shape[1]
        embed = model.token_embedding(tokens) + model.position_embedding(ops.arange(length))[None]
        _, hidden = model(tokens, padding_mask=mask, training=False, return_hidden=True)
        parts = [{"x": embed}]
        for block, h in zip(model.blocks, hidden):
            normed = block.attention_norm(h["norm_input"], padding_mask=mask, training=False)
            parts.append({"x": h["stream"], "normed": normed, "input": h["norm_input"]})
        for k, part in enumerate(parts):
            if len(layers) <= k:
                layers.append({"x": [], "normed": [], "input": []})
            for name, value in part.items():
                layers[k][name].append(np.asarray(value, np.float32)[real])
    return [{name: np.concatenate(v) if v else None for name, v in p.items()} for p in layers]


def scale_probes(norm, train: dict, test: dict) -> dict:
    """F19's two held-out R² of one block (``norm`` its attention norm; None and "" for the
    embedding output): the log std of the norm's input per token, read from its output and
    from x̂."""
    if norm is None:
        return {"scale_probe_r2": "", "scale_probe_r2_xhat": ""}
    y = [np.log(d["input"].astype(np.float64).std(1)) for d in (train, test)]
    xhat = [normalised(norm, d["input"]) for d in (train, test)]
    return {"scale_probe_r2": ridge_r2(train["normed"], y[0], test["normed"], y[1]),
            "scale_probe_r2_xhat": "" if xhat[0] is None else ridge_r2(xhat[0], y[0], xhat[1],
                                                                        y[1])}


def analyse(run_dir: Path, train_windows: int, test_windows: int, steps: int) -> list[dict]:
    from trainer.train.checkpoint import restore_trained

    cfg, corpus, model = restore_trained(run_dir)
    batch = full_windows(corpus, train_windows + test_windows)
    split = {"train": slice(0, train_windows), "test": slice(train_windows, None)}
    feats = {k: features(model, {n: v[s] for n, v in batch.items()}) for k, s in split.items()}
    labels = {k: batch["inputs"][s][batch["mask"][s] > 0] for k, s in split.items()}
    m = cfg.model
    rows = []
    for k, (train, test) in enumerate(zip(feats["train"], feats["test"])):
        stream = np.concatenate([train["x"], test["x"]])  # the CVs use every window
        normed = None if train["normed"] is None else np.concatenate([train["normed"],
                                                                       test["normed"]])
        rows.append({
            "run": run_dir.name, "norm": str(m.norm), "residual": str(m.residual),
            "norm_affine": str(bool(m.norm_affine)).lower(), "seed": int(cfg.train.seed),
            "block": EMBED + k,
            "probe_accuracy": probe_accuracy(train["x"], labels["train"], test["x"],
                                             labels["test"], steps),
            "norm_output_cv": "" if normed is None else cv(np.linalg.norm(normed, axis=1)),
            "stream_norm_cv": cv(np.linalg.norm(stream, axis=1)),
            **scale_probes(model.blocks[k - 1].attention_norm if k else None, train, test)})
    return rows


def _label(r: dict) -> str:
    from trainer.results.palette import NORM_SHORT

    return (f"{NORM_SHORT.get(r['norm'], r['norm'])} · "
            f"{'res' if r['residual'] == 'true' else 'res=' + r['residual']} · "
            f"{'γβ' if r['norm_affine'] == 'true' else 'no γβ'}")


def _curves(ax, rows: list[dict], key: str, color, label: str | None, style: str = "-o") -> None:
    """Mean of ``key`` vs block over the rows' seeds (seeds faint); nothing when it is empty."""
    by_seed: dict = {}
    for r in rows:
        if r[key] != "":
            by_seed.setdefault(r["seed"], {})[int(r["block"])] = max(float(r[key]), 1e-9)
    if not by_seed:
        return
    blocks = sorted(set.intersection(*(set(c) for c in by_seed.values())))
    for curve in by_seed.values():
        ax.plot(blocks, [curve[b] for b in blocks], color=color, alpha=0.25, lw=1)
    ax.plot(blocks, [np.mean([c[b] for c in by_seed.values()]) for b in blocks], style, lw=2,
            color=color, label=label, mfc="white" if style != "-o" else color)


def plot(rows: list[dict], path: Path) -> None:
    """Probe accuracy vs block (F12); CV of the attention norm's output per-token norm vs block
    (F10); held-out R² of the scale probe from the norm's output (solid) and from x̂ (dashed,
    hollow) vs block (F19). One line per norm · residual · γβ setting (mean), seeds faint."""
    import matplotlib

    fig, axes = subplots(1, 3, figsize=(15, 4.2), constrained_layout=True)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, label in enumerate(dict.fromkeys(_label(r) for r in rows)):
        mine, color = [r for r in rows if _label(r) == label], colors[i % len(colors)]
        _curves(axes[0], mine, "probe_accuracy", color, label)
        _curves(axes[1], mine, "norm_output_cv", color, label)
        _curves(axes[2], mine, "scale_probe_r2", color, label)
        _curves(axes[2], mine, "scale_probe_r2_xhat", color, None, "--o")
    axes[0].set_xlabel("block (-1 = embedding output)")
    axes[0].set_ylabel("held-out accuracy of the input token")
    axes[0].set_title("F12: a linear probe for the token at each position", loc="left")
    axes[1].set_xlabel("block")
    axes[1].set_ylabel("CV of per-token L2 norm")
    axes[0].set_ylim(0, 1.02)
    axes[1].set_yscale("log")  # LN without γ/β sits near 1e-7, with them near 1e-2
    for y, what in ((AFFINE_SPREAD_MIN, "F10: with γ/β above"), (FLAT_SPREAD_MAX,
                                                                 "F10: without below")):
        axes[1].axhline(y, color="grey", ls=":", lw=1)
        axes[1].annotate(what, (0.01, y), xycoords=("axes fraction", "data"), fontsize=8,
                         color="grey", va="bottom")
    axes[1].set_title("F10: spread of the attention norm's output", loc="left")
    axes[2].set_xlabel("block")
    axes[2].set_ylabel("held-out R² of log std(norm input)")
    axes[2].set_title("F19: the token's scale read from the norm's output", loc="left",
                      fontsize=10)
    axes[2].plot([], [], "--o", color="grey", mfc="white", label="(dashed: read from x̂)")
    axes[2].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    save_figure(fig, path)


def run(run_dirs: list[Path], out: Path, train_windows: int = 48, test_windows: int = 16,
        steps: int = PROBE_STEPS) -> list[dict]:
    def describe(r: dict) -> str:
        cv_out = "-" if r["norm_output_cv"] == "" else f"{r['norm_output_cv']:.3g}"
        return (f"{r['run']:45s} block {r['block']:2d} probe {r['probe_accuracy']:.3f} "
                f"norm-output CV {cv_out} stream CV {r['stream_norm_cv']:.3g}")

    return analyse_runs(run_dirs, out, "stream",
                        lambda d: analyse(d, train_windows, test_windows, steps), plot, describe)


main = analysis_main(
    "stream", __doc__, run, at_least_one("train_windows", "test_windows", "steps"),
    train_windows=option("--train-windows", type=int, default=48,
                         help="test windows the probes are fitted on"),
    test_windows=option("--test-windows", type=int, default=16, help="the next windows, scored"),
    steps=option("--steps", type=int, default=PROBE_STEPS, help="Adam steps per probe"))
