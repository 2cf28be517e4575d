"""Sweep tables and plots from a results directory.

``summarize(root)`` finds every run directory under ``root`` (a directory holding config.yaml),
reads its config.yaml, summary.json and TensorBoard curves, and writes (atomically):

- ``runs.csv``     one row per run (full precision);
- ``summary.csv``  one row per *variant*: runs that differ only in ``train.seed`` (run names
  ``...,seed=N``) are grouped; the final eval loss as mean, sample std, 95 % t-interval
  half-width, min and max over the seeds that completed, the best eval loss as mean and std;
- ``summary.md``   the variant table with compact numbers: final eval loss
  ``mean ± 95 % half-width [min, max]``, best eval loss ``mean ± std``;
- ``plots/*.png``  see :mod:`trainer.results.plots`;
- only when some variant ran at more than one ``train.lr`` (:func:`varies_lr`):
  ``lr_sweep.csv``, ``lr_sweep.md`` and
  ``plots/lr_sensitivity.png`` (each variant's best rate and LR sensitivity,
  :mod:`trainer.results.lr_sweep`).

Run directories named ``*.reproduce`` (made by ``python -m trainer reproduce``) are skipped.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from trainer import rundir
from trainer.atomic import write_text
from trainer.results.baselines import (PLATEAU_MARGIN, at_plateau, ensure_baselines,
                                      read_run_baselines)
from trainer.results.lr_sweep import varies_lr, write_lr_sweep
from trainer.results.metrics import final_probe, finite, gap, interval, mean, mean_std, mode_losses
from trainer.results.run import Run, group_status, load_runs

CONFIG_COLUMNS = ("norm", "placement", "residual", "num_layers", "lr", "warmup_steps")
# runs.csv: the config keys, the summary.json keys the schema marks as columns, derived numbers.
RUN_COLUMNS = ("run", "variant", *CONFIG_COLUMNS, "seed", *rundir.columns(),
               "train_inference_gap", "at_plateau", "batch_invariance",
               "batch_invariance_inference", "token_cosine_last", "wall_s", "train_share")
COLUMNS = ("variant", *CONFIG_COLUMNS,
           "n_seeds", "status", "plateau", "final_eval_loss_mean", "final_eval_loss_ci95",
           "final_eval_loss_min", "final_eval_loss_max", "final_eval_loss_std",
           "final_test_loss_mean", "final_test_loss_std", "best_eval_loss_mean",
           "best_eval_loss_std", "eval_loss_train_mode",
           "train_inference_gap", "diverged_steps", "loss_spikes", "max_grad_norm",
           "batch_invariance", "token_cosine_last", "tokens_per_sec", "train_share")
# Markdown: (header, cell builder) — numbers compact; grouped seeds as _ci / _pm write them.
MD_COLUMNS = (
    ("variant", lambda v: v["variant"]), ("norm", lambda v: v["norm"]),
    ("placement", lambda v: v["placement"]), ("residual", lambda v: v["residual"]),
    ("layers", lambda v: v["num_layers"]), ("lr", lambda v: _num(v["lr"])),
    ("warmup", lambda v: v["warmup_steps"]), ("seeds", lambda v: v["n_seeds"]),
    ("status", lambda v: v["status"] + (f", {v['plateau']}" if v["plateau"] else "")
     + (f", norm contract fails: {v['contract_fails']}" if v.get("contract_fails") else "")),
    ("final eval loss", lambda v: _ci(v)),
    ("final test loss", lambda v: _pm(v["final_test_loss_mean"], v["final_test_loss_std"])),
    ("best eval loss", lambda v: _pm(v["best_eval_loss_mean"], v["best_eval_loss_std"])),
    ("eval loss (train-mode BN)", lambda v: _num(v["eval_loss_train_mode"])),
    ("train/inference gap", lambda v: _num(v["train_inference_gap"])),
    ("diverged at", lambda v: v["diverged_steps"]),
    ("loss spikes", lambda v: "" if v["loss_spikes"] is None else v["loss_spikes"]),
    ("max grad norm", lambda v: _num(v["max_grad_norm"])),
    ("batch invariance", lambda v: _num(v["batch_invariance"])),
    ("token cosine (last block)", lambda v: _fixed(v["token_cosine_last"])),
    ("tokens/s", lambda v: _num(v["tokens_per_sec"], 0)),
    ("train share", lambda v: "" if v["train_share"] is None else f"{v['train_share']:.0%}"),
)


def run_row(run: Run, baselines: dict | None = None) -> dict:
    """One runs.csv row: the run's config keys, summary values and derived metrics."""
    s, cfg = run.summary, run.cfg
    last = int(cfg.model.num_layers) - 1
    # Floats only when finite (a NaN or inf cell would read as a number); counts stay ints.
    values = {k: finite(s.get(k)) if isinstance(s.get(k), float) else s.get(k)
              for k in rundir.columns()}
    return {
        "run": run.name, "variant": run.variant, "norm": cfg.model.norm,
        "placement": cfg.model.placement, "residual": cfg.model.residual,
        "num_layers": cfg.model.num_layers, "lr": cfg.train.lr,
        "warmup_steps": cfg.train.warmup_steps, "seed": run.seed, **values,
        "status": run.status, "final_eval_loss_train_mode": mode_losses(run)[1],
        "train_inference_gap": gap(run), "at_plateau": at_plateau(values["final_eval_loss"],
                                                                  baselines),
        "batch_invariance": final_probe(run, "probe/batch_invariance"),
        "batch_invariance_inference": final_probe(run, "probe/batch_invariance_inference"),
        "token_cosine_last": final_probe(run, f"probe/token_cosine/block_{last}"),
        "wall_s": finite((s.get("time") or {}).get("wall_s")),
        "train_share": finite((s.get("time") or {}).get("train_share")),
        "contract_fails": contract_fails(run),
    }


def contract_fails(run: Run) -> str:
    """The norm-contract checks a run with a norm from outside the lab failed at init
    (meta.json's ``norm_checks``, written by the training loop), space-separated; "" when
    none failed or the run has no checks (a lab norm, or a run made before the checks)."""
    path = run.path / rundir.META
    checks = (run.meta.get("norm_checks") if path.is_file() else None) or {}
    return " ".join(name for name, check in checks.items() if not check.get("holds", True))


def group_variants(rows: list[dict]) -> list[dict]:
    """One row per variant: means over its seeds (final eval loss also std, interval, min, max)."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["variant"], []).append(row)
    out = []
    for name, members in groups.items():
        first = members[0]
        col = lambda key: [m.get(key) for m in members]  # noqa: E731
        loss_mean, loss_std = mean_std(col("final_eval_loss"))
        loss_iv = interval(col("final_eval_loss"))
        plateau = sum(bool(p) for p in col("at_plateau"))
        spikes = [x for x in col("loss_spikes") if x is not None]
        best_mean, best_std = mean_std(col("best_eval_loss"))
        test_mean, test_std = mean_std(col("final_test_loss"))
        grads = [g for g in col("max_grad_norm") if g is not None]
        out.append({
            "variant": name, **{k: first[k] for k in CONFIG_COLUMNS},
            "n_seeds": len(members), "status": group_status(col("status")),
            "plateau": (f"at unigram plateau {plateau}/{len(members)}" if len(members) > 1
                        else "at unigram plateau") if plateau else "",
            "final_eval_loss_mean": loss_mean, "final_eval_loss_std": loss_std,
            "final_eval_loss_ci95": loss_iv.half if loss_iv and loss_iv.n > 1 else None,
            "final_eval_loss_min": loss_iv.min if loss_iv else None,
            "final_eval_loss_max": loss_iv.max if loss_iv else None,
            "loss_spikes": " ".join(str(x) for x in spikes) if len(set(spikes)) > 1 else
                           (spikes[0] if spikes else None),
            "final_test_loss_mean": test_mean, "final_test_loss_std": test_std,
            "best_eval_loss_mean": best_mean, "best_eval_loss_std": best_std,
            "eval_loss_train_mode": mean(col("final_eval_loss_train_mode")),
            "train_inference_gap": mean(col("train_inference_gap")),
            "diverged_steps": " ".join(str(d) for d in col("diverged_step") if d is not None),
            "max_grad_norm": max(grads) if grads else None,
            "batch_invariance": mean(col("batch_invariance")),
            "token_cosine_last": mean(col("token_cosine_last")),
            "tokens_per_sec": mean(col("tokens_per_sec")),
            "train_share": mean(col("train_share")),
            "contract_fails": " ".join(sorted({f for x in col("contract_fails") if x
                                               for f in x.split()})),
        })
    return out


def _num(x, digits: int = 4) -> str:
    """Compact number for humans: 4 significant digits, tokens/s as an integer."""
    if x is None:
        return ""
    if isinstance(x, str):
        return x
    if digits == 0:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def _fixed(x) -> str:
    return "" if x is None else f"{x:.4f}"


def _ci(v: dict) -> str:
    """``mean ± 95 % half-width [min, max]`` over seeds; the plain value for one seed."""
    if v["final_eval_loss_mean"] is None:
        return ""
    if v["final_eval_loss_ci95"] is None:
        return _num(v["final_eval_loss_mean"])
    return (f"{v['final_eval_loss_mean']:.4g} ± {v['final_eval_loss_ci95']:.2g} "
            f"[{v['final_eval_loss_min']:.4g}, {v['final_eval_loss_max']:.4g}]")


def _pm(mean, std) -> str:
    if mean is None:
        return ""
    return _num(mean) if std is None else f"{mean:.4g} ± {std:.2g}"


def _csv(rows: list[dict], columns) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    writer.writerows({k: "" if r.get(k) is None else r[k] for k in columns} for r in rows)
    return buf.getvalue()


def markdown(variants: list[dict], baselines: dict | None = None) -> str:
    head = [h for h, _ in MD_COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(cell(v)) for _, cell in MD_COLUMNS) + " |" for v in variants]
    note = ("\nFinal eval loss: mean ± 95 % t-interval [min, max] over the seeds that completed "
            "(final test loss, on the test split once after training, and best eval loss: "
            "mean ± sample std). Gap: eval loss in inference mode minus eval loss "
            "with batch statistics (train-mode BN). Train share: time in train steps / the run's "
            "wall time (summary.json `time`). Plots: plots/*.png.\n")
    if baselines:
        note += (f"\nBaselines on the same eval tokens: unigram {baselines['unigram']:.4f}, "
                 f"add-k bigram {baselines['bigram']:.4f} nats (k = {baselines['bigram_k']:g}, "
                 f"chosen on held-out train windows). \"at unigram plateau\": final eval loss "
                 f"within {PLATEAU_MARGIN} nats of the unigram value.\n")
    return "\n".join(lines) + "\n" + note


def summarize(root: str | Path, plots: bool = True) -> list[dict]:
    """Write runs.csv, summary.csv, summary.md (and plots/) under ``root``; returns variant rows."""
    root = Path(root)
    runs = load_runs(root)
    base = ensure_baselines(root, runs) if runs else None
    rows = [run_row(r, base or read_run_baselines(r.path)) for r in runs]
    variants = group_variants(rows)
    write_text(root / rundir.RUNS_CSV, _csv(rows, RUN_COLUMNS))
    write_text(root / rundir.SUMMARY_CSV, _csv(variants, COLUMNS))
    write_text(root / rundir.SUMMARY_MD, markdown(variants, base))
    if plots and runs:
        from trainer.results.plots import write_plots

        lines = {k: base[k] for k in ("unigram", "bigram")} if base else None
        write_plots(runs, root / rundir.PLOTS, lines)
    if varies_lr(runs):  # a learning-rate sweep: each variant's best rate and sensitivity
        write_lr_sweep(root, runs, base, plots)
    return variants
