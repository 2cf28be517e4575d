"""Sweep plots (matplotlib, Agg backend): one PNG per question, one colour per variant.

- ``loss.png``                train loss and eval loss over steps per variant
- ``grad_norm_by_block.png``  per-block gradient norm over steps, one panel per variant
- ``token_std_by_depth.png``  final residual-stream token std vs block index (log y)
- ``invariance_and_gap.png``  final batch-invariance probe (log y, floored) and the
                              train/inference eval-loss gap per variant
- ``token_cosine_by_depth.png`` final mean pairwise token cosine vs block index

Curves: the variant's lowest seed is drawn solid, other seeds faint in the same colour. Depth
profiles and bars: mean over seeds. Missing tags (diverged or unfinished runs) are skipped; a
figure with nothing to show says so instead of failing.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from trainer.atomic import atomic_write  # noqa: E402

FLOOR = 1e-9  # batch invariance is 0 (or float noise) for per-token norms: plotted at this floor
BLOCK = re.compile(r"block_(\d+)")


def _variants(runs) -> dict[str, list]:
    out: dict[str, list] = {}
    for run in sorted(runs, key=lambda r: (r.variant, r.seed)):
        out.setdefault(run.variant, []).append(run)
    return out


def _colors(names) -> dict[str, tuple]:
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


def _finite(points):
    return [(s, v) for s, v in points if math.isfinite(v)]


def _save(fig, path: Path) -> None:
    """Write via a temp file + rename: a reader never sees half a PNG."""
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png"))
    finally:
        plt.close(fig)


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what} recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _by_block(curves: dict, prefix: str, suffix: str = "") -> dict[int, list]:
    """``{block index: curve}`` for tags ``prefix + block_i + suffix``."""
    out = {}
    for tag, curve in curves.items():
        if tag.startswith(prefix) and tag.endswith(suffix):
            m = BLOCK.fullmatch(tag[len(prefix):len(tag) - len(suffix)])
            if m:
                out[int(m.group(1))] = curve
    return dict(sorted(out.items()))


def _dot(xs):
    """A marker for curves too short to show as lines (a run that diverged at once)."""
    return "o" if len(xs) < 3 else None


def _before_divergence(run, curve):
    """Finite points, without the diverged step itself (its loss is inf, NaN or huge)."""
    stop = run.summary.get("diverged_step") if run.status == "diverged" else None
    return [(s, v) for s, v in _finite(curve) if stop is None or s < stop]


def plot_loss(groups, colors, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    firsts, values, labelled = [], [], set()
    titles = ("train loss", "eval loss (inference mode)")
    for ax, group, title in zip(axes, ("train", "eval"), titles):
        drawn = False
        for name, runs in groups.items():
            for k, run in enumerate(runs):
                curve = _before_divergence(run, getattr(run, group).get("loss", []))
                if not curve:
                    continue
                xs, ys = zip(*curve)
                label = name if name not in labelled else None
                labelled.add(name)
                ax.plot(xs, ys, color=colors[name], lw=1.6 if k == 0 else 0.8,
                        alpha=1.0 if k == 0 else 0.35, label=label, marker=_dot(xs))
                if run.status == "diverged":  # × at the diverged step, last finite loss
                    ax.plot([run.summary.get("diverged_step", xs[-1])], [ys[-1]], marker="x",
                            color=colors[name], markersize=9, mew=2)
                firsts.append(ys[0])
                values += ys
                drawn = True
        ax.set(title=title, xlabel="step", ylabel="loss")
        ax.grid(alpha=0.3)
        if not drawn:
            _empty(ax, f"{group} loss")
    if values and max(firsts) > min(values):  # a blow-up must not squash the other curves
        pad = 0.03 * (max(firsts) - min(values))
        for ax in axes:
            ax.set_ylim(min(values) - pad, max(firsts) + pad)
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if handles:
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 4), fontsize=8,
                   bbox_to_anchor=(0.5, 1.08))
    fig.suptitle("lowest seed solid, other seeds faint; × marks the step a run diverged",
                 y=-0.02, fontsize=8)
    _save(fig, path)


def plot_grad_norm(groups, colors, path: Path) -> None:
    n = len(groups)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, runs) in zip(axes.flat, groups.items()):
        run = runs[0]
        blocks = _by_block(run.train, "grad_norm/")
        blocks = {i: c for i, c in blocks.items() if _positive(c)}
        if not blocks:
            _empty(ax, "grad_norm/block_i")
        cmap = plt.get_cmap("viridis")
        for i, curve in blocks.items():
            xs, ys = zip(*_positive(curve))
            ax.plot(xs, ys, color=cmap(i / max(len(blocks) - 1, 1)), lw=1.2, label=f"block {i}",
                    marker=_dot(xs))
        glob = _positive(run.train.get("grad_norm/global", []))
        if glob:
            xs, ys = zip(*glob)
            ax.plot(xs, ys, color="black", ls="--", lw=1, label="global", marker=_dot(xs))
        if blocks or glob:
            ax.set_yscale("log")
            ax.legend(fontsize=7, ncol=2)
        ax.set_title(f"{name} (seed {run.seed})", fontsize=9, color=colors[name])
        ax.set(xlabel="step", ylabel="grad norm")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    _save(fig, path)


def _positive(curve):
    return [(s, v) for s, v in curve if math.isfinite(v) and v > 0]


def _depth_profile(runs, group: str, prefix: str, suffix: str) -> dict[int, float]:
    """Final value per block, mean over the variant's seeds (non-finite values dropped)."""
    acc: dict[int, list[float]] = {}
    for run in runs:
        for i, curve in _by_block(getattr(run, group), prefix, suffix).items():
            finite = _finite(curve)
            if finite:
                acc.setdefault(i, []).append(finite[-1][1])
    return {i: sum(v) / len(v) for i, v in sorted(acc.items())}


def plot_depth(groups, colors, path: Path, group, prefix, suffix, ylabel, title, log) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for name, runs in groups.items():
        prof = _depth_profile(runs, group, prefix, suffix)
        if log:
            prof = {i: v for i, v in prof.items() if v > 0}
        if prof:
            ax.plot(list(prof), list(prof.values()), marker="o", color=colors[name], label=name)
            drawn = True
    if drawn:
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))  # outside: many variants
        ax.xaxis.get_major_locator().set_params(integer=True)
    else:
        _empty(ax, ylabel)
    ax.set(xlabel="block index", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    _save(fig, path)


def _mean(values):
    xs = [v for v in values if v is not None and math.isfinite(v)]
    return sum(xs) / len(xs) if xs else None


def plot_invariance_and_gap(groups, colors, path: Path) -> None:
    names = list(groups)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(10, 1.3 * len(names) + 4), 4.8))
    x = range(len(names))
    width = 0.4
    any_value = False
    bars = ((-width / 2, "probe/batch_invariance", "train-mode forward", ""),
            (width / 2, "probe/batch_invariance_inference", "inference forward", "//"))
    for offset, tag, label, hatch in bars:
        vals = [_mean([_final_probe(r, tag) for r in groups[n]]) for n in names]
        any_value = any_value or any(v is not None for v in vals)
        ax1.bar([i + offset for i in x], [max(v, FLOOR) if v is not None else 0 for v in vals],
                width, color=[colors[n] for n in names], hatch=hatch, edgecolor="black",
                label=label)
    if any_value:
        ax1.set_yscale("log")
        ax1.set_ylim(bottom=FLOOR / 2)
        ax1.axhline(FLOOR, color="grey", lw=0.8, ls=":")
        ax1.legend(fontsize=8)
    else:
        _empty(ax1, "probe/batch_invariance")
    ax1.set(title=f"batch invariance: max |Δ logits| (floor {FLOOR:g})", ylabel="max |Δ logits|")
    gaps = [_mean([_gap(r) for r in groups[n]]) for n in names]
    if all(g is None for g in gaps):
        _empty(ax2, "train/inference gap")
    ax2.bar(list(x), [g if g is not None else 0 for g in gaps], color=[colors[n] for n in names],
            edgecolor="black")
    ax2.axhline(0, color="black", lw=0.8)
    ax2.set(title="eval loss: inference mode − train-mode BN", ylabel="loss gap")
    for ax in (ax1, ax2):
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    _save(fig, path)


def _final_probe(run, tag):
    value = (run.summary.get("probes") or {}).get(tag)
    return value if value is not None else run.final("eval", tag)


def _gap(run):
    loss = run.summary.get("final_eval_loss")
    train_mode = run.summary.get("final_eval_loss_train_mode")
    if loss is None:
        return None
    if train_mode is None:
        train_mode = run.final("eval", "loss_train_mode")
    return None if train_mode is None else loss - train_mode


def write_plots(runs, out_dir: str | Path) -> list[Path]:
    """Write the five PNGs for ``runs`` (``trainer.results.summarize.Run``) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    groups = _variants(runs)
    colors = _colors(list(groups))
    paths = {name: out / f"{name}.png" for name in
             ("loss", "grad_norm_by_block", "token_std_by_depth", "invariance_and_gap",
              "token_cosine_by_depth")}
    plot_loss(groups, colors, paths["loss"])
    plot_grad_norm(groups, colors, paths["grad_norm_by_block"])
    plot_depth(groups, colors, paths["token_std_by_depth"], "train", "activation/", "/token_std",
               "token std (residual stream)", "final residual-stream token std by depth", log=True)
    plot_invariance_and_gap(groups, colors, paths["invariance_and_gap"])
    plot_depth(groups, colors, paths["token_cosine_by_depth"], "eval", "probe/token_cosine/", "",
               "mean pairwise token cosine", "final token cosine by depth (1 = rank collapse)",
               log=False)
    return list(paths.values())
