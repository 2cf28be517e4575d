"""F15 and F16: a trained model served as the texts describe it, one token at a time.

For each run directory the model is restored from its last checkpoint
(``trainer.train.checkpoint.restore_trained``) and measured on full-length test windows
(``full_windows``):

- F15, streaming: ``len(PROMPT_SHARES)`` requests (prompts of different lengths cut from
  different test windows, each continued greedily by its own number of tokens) decoded with the
  KV cache alone (batch 1) and together in a continuous batch of ``STREAM_ROWS`` rows (rows
  finish and are refilled while others run): max |Δ logits| over every position both decodes
  read with the same tokens (``Decoder(record_logits=True)``; plain ``tf.function``, no XLA:
  compiling every prefill shape would cost more than the decoding; the per-token loop, which
  measured the committed numbers). Inference mode.
- F15, serving at B = 1: the next-token loss of ``--windows`` test windows fed token by token at
  batch 1 with the cache (teacher forcing: each true token is fed, the next one scored), in
  inference mode (running statistics) and, for batch norms only, with batch statistics: every
  norm in training mode over the one token it sees (``CausalLM.decode_step``).
- F16, a growing sequence: the logits at positions 0…t−1 of the same windows computed from their
  first t tokens and from t + k (t = k = max_len / 2), full forward: max |Δ| in inference mode,
  and for batch norms in training mode (batch statistics over the batch's tokens).

Training-mode passes run inside ``frozen_state`` (running statistics restored), and every
variable of the model is checked unchanged at the end: the analysis measures, never trains.

    python -m trainer analyze decode RUN_DIR... --out results/reference/analysis
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.analysis import analyse_runs, analysis_main, at_least_one, option
from trainer.analysis.batch_size import full_windows
from trainer.atomic import save_figure, subplots
from trainer.config import ConfigError
from trainer.analysis.thresholds import DEPENDENT_MIN, INVARIANT_MAX

# The streaming requests: prompt length and new tokens as shares of max_len, one window each.
PROMPT_SHARES = ((1 / 2, 1 / 8), (1 / 8, 1 / 4), (1 / 4, 1 / 8), (1 / 16, 1 / 4))
STREAM_ROWS = 2  # fewer rows than requests: requests wait, join, finish and are refilled
WINDOWS = 4  # test windows served token by token (x max_len tokens; the default of --windows)


def stream_delta(model, batch: dict) -> float:
    """F15: max |Δ logits| of each request decoded alone vs in the continuous batch, over the
    positions at which both decodes had read the same tokens (a greedy tie broken differently
    would otherwise compare two different texts)."""
    from trainer.models.decode import Decoder, Request

    length = model.max_len
    requests = [Request(list(batch["inputs"][i, :max(2, int(length * p))]),
                        max(1, int(length * n))) for i, (p, n) in enumerate(PROMPT_SHARES)]
    decoder = Decoder(model, xla=False, record_logits=True, compiled=False)
    together = decoder.generate(requests, STREAM_ROWS)
    worst = 0.0
    for request, crowd in zip(requests, together):
        alone = decoder.generate([request], 1)[0]
        a, b = alone.sequence, crowd.sequence
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        n = min(same, len(alone.logits), len(crowd.logits))
        worst = max(worst, float(np.abs(np.stack(alone.logits[:n]) -
                                        np.stack(crowd.logits[:n])).max()))
    return worst


def served_loss(model, batch: dict, training: bool) -> float:
    """F15: mean next-token loss of the windows fed one token at a time at batch 1 with the KV
    cache (teacher forcing); ``training``: every norm uses the statistics of that one token."""
    import tensorflow as tf

    from trainer.telemetry.probes import frozen_state

    step = tf.function(lambda token, position, cache: model.decode_step(
        token, cache, position, training=training))
    total, count = 0.0, 0
    with frozen_state(model):
        for inputs, targets, mask in zip(batch["inputs"], batch["targets"], batch["mask"]):
            cache = model.new_cache(1)
            for t in np.flatnonzero(mask > 0):
                logits, cache = step(tf.constant([[inputs[t]]], tf.int32),
                                     tf.constant([[t]], tf.int32), cache)
                total += float(tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=[int(targets[t])], logits=logits[:, 0])[0])
                count += 1
    return total / count


def growing_delta(model, batch: dict, training: bool) -> float:
    """F16: max |Δ| of the logits at positions 0…t−1 from the first t tokens vs from t + k."""
    from trainer.telemetry.probes import frozen_state

    t = model.max_len // 2
    with frozen_state(model):
        short = model(batch["inputs"][:, :t], padding_mask=batch["mask"][:, :t],
                      training=training)
        long = model(batch["inputs"], padding_mask=batch["mask"], training=training)
    return float(np.abs(np.asarray(short) - np.asarray(long)[:, :t]).max())


def analyse(run_dir: Path, windows: int) -> list[dict]:
    from trainer.models.norms import BATCH_NORMS
    from trainer.train.checkpoint import restore_trained

    cfg, corpus, model = restore_trained(run_dir)
    bn = cfg.model.norm in BATCH_NORMS
    if bn and cfg.model.dropout > 0:
        raise ConfigError(f"{run_dir}: the batch-statistics measures need model.dropout=0 "
                          f"(training mode would also drop), got {cfg.model.dropout}")
    batch = full_windows(corpus, max(windows, len(PROMPT_SHARES)))
    served = {k: v[:windows] for k, v in batch.items()}
    before = [v.numpy().copy() for v in model.variables]
    row = {"run": run_dir.name, "norm": str(cfg.model.norm), "residual": str(cfg.model.residual),
           "seed": int(cfg.train.seed), "tokens": int(served["mask"].sum()),
           "stream_max_delta": stream_delta(model, batch),
           "served_loss": served_loss(model, served, False),
           "served_loss_batch_stats": served_loss(model, served, True) if bn else "",
           "grow_max_delta": growing_delta(model, served, False),
           "grow_max_delta_train": growing_delta(model, served, True) if bn else ""}
    if any(not np.array_equal(b, v.numpy()) for b, v in zip(before, model.variables)):
        raise RuntimeError(f"{run_dir}: analyze decode changed a model variable")
    return [row]


def _points(ax, rows: list[dict], norms: list[str], key: str, filled: bool, label: str) -> None:
    """One point per seed of ``key`` at each norm's x (0 drawn at LOG_AXIS_FLOOR on a log axis)."""
    from trainer.results.palette import LOG_AXIS_FLOOR, NORM_COLORS

    ax.scatter([], [], s=28, edgecolors="0.4", facecolors="0.4" if filled else "none",
               label=label)  # the legend's marker: grey, the norms' colours are on the axis
    for x, norm in enumerate(norms):
        ys = [max(float(r[key]), LOG_AXIS_FLOOR) if ax.get_yscale() == "log" else float(r[key])
              for r in rows if r["norm"] == norm and r[key] != ""]
        color = NORM_COLORS.get(norm, "k")
        ax.scatter([x + (0 if filled else 0.15)] * len(ys), ys, s=28, edgecolors=color,
                   facecolors=color if filled else "none")


def plot(rows: list[dict], path: Path) -> None:
    """Per norm, seeds as points: F15 streaming |Δ logits| (alone vs continuous batch), F15
    served loss at B = 1 (running statistics filled, batch statistics hollow), F16 |Δ logits|
    as the sequence grows (inference filled, training mode hollow)."""
    from trainer.results.palette import LOG_AXIS_FLOOR

    norms = list(dict.fromkeys(r["norm"] for r in rows))
    fig, axes = subplots(1, 3, figsize=(14, 4.2), constrained_layout=True)
    for ax in (axes[0], axes[2]):
        ax.set_yscale("log")
    _points(axes[0], rows, norms, "stream_max_delta", True, "inference mode")
    _points(axes[1], rows, norms, "served_loss", True, "running statistics")
    _points(axes[1], rows, norms, "served_loss_batch_stats", False, "batch statistics")
    _points(axes[2], rows, norms, "grow_max_delta", True, "inference mode")
    _points(axes[2], rows, norms, "grow_max_delta_train", False, "training mode")
    for ax in (axes[0], axes[2]):
        ax.axhline(INVARIANT_MAX, color="grey", ls=":", lw=1, label=f"{INVARIANT_MAX:g}")
    axes[2].axhline(DEPENDENT_MIN, color="grey", ls="--", lw=1, label=f"{DEPENDENT_MIN:g}")
    titles = ("F15: a request alone vs in a continuous batch", "F15: served at batch 1",
              "F16: positions 0…t−1 from t vs 2t tokens")
    zero = f"max |Δ logits| (log; 0 drawn at {LOG_AXIS_FLOOR:g})"
    ylabels = (zero, "next-token test loss (nats)", zero)
    for ax, title, ylabel in zip(axes, titles, ylabels):
        ax.set_xticks(range(len(norms)), norms, rotation=30)
        ax.set_title(title, loc="left", fontsize=10)
        ax.set_ylabel(ylabel)
        ax.legend(frameon=False, fontsize=8)
    save_figure(fig, path)


def run(run_dirs: list[Path], out: Path, windows: int = WINDOWS) -> list[dict]:
    def describe(r: dict) -> str:
        bs = r["served_loss_batch_stats"]
        return (f"{r['run']:45s} stream |Δ| {r['stream_max_delta']:.2g} served loss "
                f"{r['served_loss']:.4f}{'' if bs == '' else f' (batch stats {bs:.4f})'} "
                f"growing |Δ| {r['grow_max_delta']:.2g}")

    return analyse_runs(run_dirs, out, "decode", lambda d: analyse(d, windows), plot, describe)


main = analysis_main(
    "decode", __doc__, run, at_least_one("windows"),
    windows=option("--windows", type=int, default=WINDOWS,
                   help="test windows served token by token and grown (F15, F16)"))
