"""Per-block gradient norms at initialisation, Pre-LN vs Post-LN, under each ``model.init``.

Xiong et al. (2020) show that at init Post-LN's gradient of the FFN output weights grows toward
the output blocks while Pre-LN's does not, which is why Post-LN needs warm-up. This measures that
profile on the lab's own model and data: for every init scheme, placement and seed, the model is
built (no training) and the gradient of the mean token loss is averaged over a few training
batches; the result is the FFN-out gradient norm per block and its last/first ratio.

    python -m trainer analyze grad-profile --config configs/reference.yaml --out results/reference/init
"""

from __future__ import annotations

import argparse
from pathlib import Path

from trainer.atomic import save_figure, subplots, write_csv, write_text
from trainer.config import Init, Placement, load_config
from trainer.provenance import write_stamp

# Xiong et al.'s comparison; ``--placements`` adds Peri-LN or the output norm.
COMPARED = ["pre", "post"]


def profile(cfg, corpus, batches: int) -> list[float]:
    """Mean FFN-out gradient norm per block of a freshly built model over ``batches`` batches."""
    import keras
    import numpy as np
    import tensorflow as tf

    from trainer.models import build_model
    from trainer.train.step import masked_loss

    keras.utils.set_random_seed(int(cfg.train.seed))
    model = build_model(cfg.model, corpus.vocab_size, corpus.max_len)
    kernels = [block.ffn.out.kernel for block in model.blocks]
    total = np.zeros(len(kernels))
    for step in range(batches):
        batch = corpus.train_batch(step, int(cfg.train.seed))
        with tf.GradientTape() as tape:
            logits = model(batch["inputs"], padding_mask=batch["mask"], training=True)
            loss_sum, count = masked_loss(logits, batch["targets"], batch["mask"])
            loss = loss_sum / tf.maximum(count, 1.0)
        total += [float(tf.norm(g)) for g in tape.gradient(loss, kernels)]
    return list(total / batches)


def run(config: str, overrides: list[str], out: Path, seeds: list[int], inits: list[str],
        batches: int, placements: list[str] = COMPARED) -> list[dict]:
    from trainer.data import prepare

    rows = []
    corpus = None
    for init in inits:
        for placement in placements:
            for seed in seeds:
                cfg = load_config(config, [*overrides, f"model.init={init}",
                                           f"model.placement={placement}", f"train.seed={seed}"])
                corpus = corpus or prepare(cfg.data)
                norms = profile(cfg, corpus, batches)
                rows.append({"init": init, "placement": placement, "seed": seed,
                             **{f"block_{i}": v for i, v in enumerate(norms)},
                             "last_over_first": norms[-1] / norms[0]})
                print(f"{init:7s} {placement:6s} seed {seed}: "
                      + " ".join(f"{v:.3g}" for v in norms)
                      + f"   last/first {rows[-1]['last_over_first']:.3f}", flush=True)
    write_csv(out / "grad_profile.csv", rows)
    write_text(out / "grad_profile.yaml", f"config: {config}\noverrides: {list(overrides)}\n"
                 f"seeds: {seeds}\nbatches: {batches}\n")
    plot(rows, out / "grad_profile.png")
    return rows


def plot(rows: list[dict], path: Path) -> None:
    """One panel per init: FFN-out gradient norm vs block, Pre-LN and Post-LN, seeds faint."""
    inits = list(dict.fromkeys(r["init"] for r in rows))
    fig, axes = subplots(1, len(inits), figsize=(4.2 * len(inits), 3.4), squeeze=False,
                             constrained_layout=True)
    colors = dict(zip(map(str, Placement), ("tab:blue", "tab:red", "tab:green", "tab:purple")))
    for ax, init in zip(axes[0], inits):
        for placement in dict.fromkeys(r["placement"] for r in rows):
            mine = [r for r in rows if r["init"] == init and r["placement"] == placement]
            if not mine:
                continue
            blocks = [k for k in mine[0] if k.startswith("block_")]
            xs = list(range(len(blocks)))
            for r in mine:
                ax.plot(xs, [r[b] for b in blocks], color=colors[placement], alpha=0.25, lw=1)
            mean = [sum(r[b] for r in mine) / len(mine) for b in blocks]
            ax.plot(xs, mean, color=colors[placement], lw=2, marker="o", label=f"{placement}-LN")
        ax.set_yscale("log")
        ax.set_title(f"init: {init}")
        ax.set_xlabel("block")
    axes[0][0].set_ylabel("FFN-out gradient norm at init")
    axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    save_figure(fig, path)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m trainer analyze grad-profile",
                                description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/reference.yaml")
    p.add_argument("--out", required=True, help="directory for grad_profile.csv/.png")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    inits = [str(i) for i in Init]
    p.add_argument("--inits", nargs="+", default=inits, choices=inits)
    p.add_argument("--batches", type=int, default=4, help="training batches averaged per model")
    p.add_argument("--placements", nargs="+", default=COMPARED, choices=[str(x) for x in Placement],
                   help="placements profiled (default: Pre-LN and Post-LN, as Xiong et al.)")
    p.add_argument("overrides", nargs="*", help="dotted config overrides")
    args = p.parse_args(argv)
    run(args.config, args.overrides, Path(args.out), args.seeds, args.inits, args.batches,
        args.placements)
    write_stamp(Path(args.out) / "grad_profile.csv", ["analyze", "grad-profile", *argv])
    return 0
