"""F7: does a trained model's output for a sequence depend on the batch it is evaluated in?

For each run directory, the model is rebuilt from its config.yaml and restored from its last
checkpoint; N test windows of full length (no padding anywhere, so batch size is the only
thing that changes) are evaluated in consecutive batches of B sequences for every B, in training
mode (batch statistics; running statistics untouched) and inference mode (running statistics),
plus one batch per token of the first position alone (B = 1, T = 1: BN's output is then β).
The per-sequence mean token loss is averaged over the N sequences.

    python -m trainer analyze batch-size RUN_DIR... --out results/reference/analysis
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.analysis import analyse_runs, analysis_main, option
from trainer.atomic import save_figure, subplots
from trainer.config import ConfigError

BATCH_SIZES = (1, 2, 4, 8, 16, 64)
MODES = ("train", "inference")


# The analyses feed verdicts, so they read the test split, which no choice of scale or rate saw.
SPLIT = "test"


def full_windows(corpus, n: int) -> dict:
    """The first ``n`` windows of ``SPLIT`` of full length (``max_len`` positions), one batch."""
    from trainer.data import batching

    flat = corpus._ids[SPLIT][0]
    starts, lengths, _ = corpus._windows[SPLIT]
    rows = np.flatnonzero(lengths == corpus.max_len)[:n]
    if len(rows) < n:
        raise ConfigError(f"only {len(rows)} full-length {SPLIT} windows, {n} asked")
    return batching.build_batch(flat, starts, lengths, rows, corpus.max_len)


def sequence_losses(model, batch: dict, size: int, training: bool) -> np.ndarray:
    """Mean token loss of each sequence, evaluated ``size`` sequences at a time."""
    import tensorflow as tf

    from trainer.telemetry.probes import frozen_state

    out = []
    with frozen_state(model):
        for i in range(0, len(batch["inputs"]), size):
            part = {k: v[i:i + size] for k, v in batch.items()}
            logits = model(part["inputs"], padding_mask=part["mask"], training=training)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=part["targets"],
                                                                logits=logits).numpy()
            out.append((ce * part["mask"]).sum(1) / part["mask"].sum(1))
    return np.concatenate(out)


def analyse(run_dir: Path, n: int, sizes) -> list[dict]:
    from trainer.train.checkpoint import restore_trained

    cfg, corpus, model = restore_trained(run_dir)
    batch = full_windows(corpus, n)
    first = {k: v[:, :1] for k, v in batch.items()}  # position 0 alone: T = 1
    rows = []
    for mode in MODES:
        training = mode == "train"
        for size in [*(s for s in sizes if n % s == 0), "1x1"]:
            losses = (sequence_losses(model, first, 1, training) if size == "1x1"
                      else sequence_losses(model, batch, int(size), training))
            rows.append({"run": run_dir.name, "norm": cfg.model.norm, "seed": int(cfg.train.seed),
                         "mode": mode, "batch_size": size, "loss": float(losses.mean()),
                         "loss_std": float(losses.std())})
    return rows


def plot(rows: list[dict], path: Path) -> None:
    """Loss vs batch size, one line per norm x mode (mean over seeds, seeds faint)."""
    from trainer.results.palette import NORM_COLORS

    fig, ax = subplots(figsize=(7.5, 4.2), constrained_layout=True)
    for norm in dict.fromkeys(r["norm"] for r in rows):
        for mode, style in (("train", "-"), ("inference", "--")):
            mine = [r for r in rows if r["norm"] == norm and r["mode"] == mode
                    and r["batch_size"] != "1x1"]
            sizes = sorted({int(r["batch_size"]) for r in mine})
            by_seed = {}
            for r in mine:
                by_seed.setdefault(r["seed"], {})[int(r["batch_size"])] = r["loss"]
            for curve in by_seed.values():
                ax.plot(sizes, [curve[s] for s in sizes], style, color=NORM_COLORS.get(norm, "k"),
                        alpha=0.25, lw=1)
            mean = [np.mean([c[s] for c in by_seed.values()]) for s in sizes]
            ax.plot(sizes, mean, style, marker="o", lw=2, color=NORM_COLORS.get(norm, "k"),
                    label=f"{norm}, {mode} mode")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequences per batch (B)")
    ax.set_ylabel("eval loss of the same sequences (nats)")
    ax.set_title("F7: the same sequences evaluated at every batch size", loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    save_figure(fig, path)


def run(run_dirs: list[Path], out: Path, n: int, sizes) -> list[dict]:
    return analyse_runs(run_dirs, out, "batch_size", lambda d: analyse(d, n, sizes), plot,
                        lambda r: f"{r['run']:45s} {r['mode']:9s} B={r['batch_size']!s:4s} "
                                  f"loss {r['loss']:.5f}")


main = analysis_main(
    "batch-size", __doc__, run,
    n=option("--sequences", type=int, default=64, help="test windows evaluated"),
    sizes=option("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES)))
