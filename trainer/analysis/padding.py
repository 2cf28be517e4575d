"""F9: how far do pads pull naive BN's batch statistics away from the real tokens'?

For each BN run directory the model is restored from its last checkpoint
(``trainer.train.checkpoint.restore_trained``)
and fed the first K batches of its own training stream (``Corpus.train_batch(step, seed)``, what
the training loop iterates) batched three ways (``CONDITIONS``): ``bucketed`` (the
run's data config), ``pad_to_max`` (``data.buckets=[max_len]``) and ``small_batch``
(``data.tokens_per_batch=256``). In inference mode, at every block's BN input, per feature:

    |mean over all positions (pads included) − mean over real tokens| / sqrt(var_real + ε)

(ε the norm's epsilon, as BN divides by it), averaged over features, then over blocks and
batches. That is how far naive BN's training-mode mean shifts every real token, in units of its
normaliser; masked BN's statistics see real tokens only. Also recorded: the batches' pad fraction.

    python -m trainer analyze padding RUN_DIR... --out results/reference/analysis
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.analysis import analyse_runs, analysis_main, option
from trainer.atomic import save_figure, subplots
from trainer.config import ConfigError, load_config
from trainer.analysis.thresholds import POLLUTION_MIN
from trainer.rundir import CONFIG

# The three ways of batching the same training stream (which sub-sweep trained with each is the
# findings' business: trainer.findings.batch.TRAINED_IN).
CONDITIONS = ("bucketed", "pad_to_max", "small_batch")
SMALL_BUDGET = 256  # tokens per batch of the small_batch condition (its sub-sweep's value)


def overrides(condition: str, max_len: int) -> list[str]:
    return {"bucketed": [], "pad_to_max": [f"data.buckets=[{max_len}]"],
            "small_batch": [f"data.tokens_per_batch={SMALL_BUDGET}"]}[condition]


def shift(x: np.ndarray, mask: np.ndarray, eps: float) -> float:
    """Mean over features of |mean(all positions) − mean(real)| / sqrt(var(real) + eps)."""
    x = np.asarray(x, np.float64).reshape(-1, x.shape[-1])
    real = x[np.asarray(mask).reshape(-1) > 0]
    return float(np.mean(np.abs(x.mean(0) - real.mean(0)) / np.sqrt(real.var(0) + eps)))


def block_shifts(model, batches: list[dict], eps: float) -> np.ndarray:
    """(batches, blocks) shifts at each block's norm input, inference mode."""
    out = []
    for b in batches:
        _, hidden = model(b["inputs"], padding_mask=b["mask"], training=False, return_hidden=True)
        out.append([shift(np.asarray(h["norm_input"]), b["mask"], eps) for h in hidden])
    return np.asarray(out)


def analyse(run_dir: Path, k: int, corpora: dict) -> list[dict]:
    from trainer.data import prepare
    from trainer.models.norms import BATCH_NORMS
    from trainer.train.checkpoint import restore_trained

    cfg = load_config(run_dir / CONFIG)
    if cfg.model.norm not in BATCH_NORMS:
        raise ConfigError(f"{run_dir} has norm={cfg.model.norm}; the padding analysis measures "
                          f"batch norms ({', '.join(BATCH_NORMS)})")
    cfg, own, model = restore_trained(run_dir)
    rows = []
    for condition in CONDITIONS:
        over = overrides(condition, int(cfg.data.max_len))
        data = load_config(run_dir / CONFIG, over).data
        key = (str(data), own.tokenizer_hash)
        if key not in corpora:  # prepare once per data config (the sweep's runs share it)
            corpora[key] = prepare(data, tok=own.tokenizer)  # the run's tokenizer, as trained
        corpus = corpora[key]
        batches = [corpus.train_batch(i, int(cfg.train.seed)) for i in range(k)]
        per_block = block_shifts(model, batches, float(cfg.model.norm_epsilon)).mean(0)
        masks = np.concatenate([b["mask"].reshape(-1) for b in batches])
        rows.append({"run": run_dir.name, "norm": cfg.model.norm, "seed": int(cfg.train.seed),
                     "condition": condition, "pad_fraction": float(1.0 - masks.mean()),
                     "shift": float(per_block.mean()),
                     **{f"shift_block_{i}": float(s) for i, s in enumerate(per_block)}})
    return rows


def plot(rows: list[dict], path: Path) -> None:
    """``figure(rows)`` saved to ``path``."""
    save_figure(figure(rows), path)


def figure(rows: list[dict]):
    """Shift per condition, one colour per norm, seeds as points, the threshold dotted, the
    shift axis from 0."""
    from trainer.results.palette import NORM_COLORS

    norms = list(dict.fromkeys(r["norm"] for r in rows))
    fig, ax = subplots(figsize=(9, 4.2), constrained_layout=True)
    labels = []
    for i, condition in enumerate(CONDITIONS):
        mine = [r for r in rows if r["condition"] == condition]
        pads = np.mean([r["pad_fraction"] for r in mine]) if mine else float("nan")
        labels.append(f"{condition}\n({pads:.1%} pads)")
        for j, norm in enumerate(norms):
            ys = [r["shift"] for r in mine if r["norm"] == norm]
            x = i + (j - (len(norms) - 1) / 2) * 0.25
            ax.scatter([x] * len(ys), ys, color=NORM_COLORS.get(norm, "k"), alpha=0.8,
                       label=norm if i == 0 else None, clip_on=False)  # masked BN sits at 0
            if ys:
                ax.hlines(np.mean(ys), x - 0.1, x + 0.1, color=NORM_COLORS.get(norm, "k"), lw=2)
    ax.axhline(POLLUTION_MIN, color="0.4", ls=":", lw=1,
               label=f"POLLUTION_MIN = {POLLUTION_MIN:g}: F9's\nthreshold (batch, pad_to_max)")
    ax.set_ylim(bottom=0)  # from 0: the shift's size is what F9 judges
    ax.set_xticks(range(len(CONDITIONS)), labels)
    ax.set_ylabel("|mean(all) − mean(real)| / std(real) at BN inputs")
    ax.set_title("F9: pads' pull on naive BN statistics, the training stream batched 3 ways",
                 loc="left")
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    return fig


def run(run_dirs: list[Path], out: Path, k: int) -> list[dict]:
    corpora = {}  # shared by the runs: each corpus prepared once
    return analyse_runs(run_dirs, out, "padding", lambda d: analyse(d, k, corpora), plot,
                        lambda r: f"{r['run']:45s} {r['condition']:11s} pads "
                                  f"{r['pad_fraction']:.3f} shift {r['shift']:.4g}")


main = analysis_main("padding", __doc__, run, k=option(
    "--batches", type=int, default=20, help="training batches per condition"))
