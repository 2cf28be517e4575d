"""A synthetic reference for the findings tests: every sub-sweep of the pre-registered design
(results/PREREGISTRATION.md) as real run directories (config.yaml from the reference config,
summary.json, TensorBoard event files written by the lab's own writers) and the analysis CSVs;
only the numbers are made up. With the healthy numbers every claim with evidence reads "yes".

``build(root, change)``: ``change(kind, key, values)`` may return other numbers for one run or
row; ``kind`` names the sub-sweep or CSV, ``key`` the run (see each writer). With ``base`` (a
healthy reference built earlier with the same seeds) the tree is copied and only the runs whose
numbers ``change`` alters are written again: a flip test costs a copy, not ~200 event files.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
from pathlib import Path

from trainer.analysis.padding import CONDITIONS
from trainer.config import load_config, to_yaml
from trainer.findings.claim import BN_NORMS
from trainer.findings.reference import Reference
from trainer.findings.thresholds import (DYT_RECIPE_ALPHAS, EMBED_UNIT_SCALE, HEADLINE_SEEDS,
                                         MIN_SEEDS, RATE_GRID, SHORT_GRID)
from trainer.telemetry.tensorboard import RunWriters

REFERENCE = load_config("configs/reference.yaml")
COMMITTED_ANALYSIS = Path(__file__).resolve().parents[1] / "results" / "reference" / "analysis"
LAYERS = int(REFERENCE.model.num_layers)
STEPS = int(REFERENCE.train.steps)
BASELINES = {"unigram": 3.1, "bigram": 2.5, "unigram_k": 0.001, "bigram_k": 0.03,
             "test": {"unigram": 3.1, "bigram": 2.5}}
INIT_LOSS = 5.5  # ~ln 259: the loss at step 0 of every run
INF = math.inf

# The 15 variants of the learning-rate table: (norm, residual, placement, warmup) -> validation
# loss at each rate of RATE_GRID (inf: diverged). Post-LN trains at fewer rates without warm-up;
# no norm diverges at the high rates (LR-sensitive); no norm without residual never trains.
LR_TABLE = {
    ("layer", "true", "pre", 50): (2.6, 2.3, 2.1, 2.2, 2.6),
    ("layer", "true", "pre", 0): (2.6, 2.3, 2.1, 2.2, 2.7),
    ("layer", "true", "post", 50): (2.45, 2.35, 3.1, 3.1, INF),
    ("layer", "true", "post", 0): (2.45, 3.1, 3.1, INF, INF),
    ("layer", "false", "pre", 50): (3.0, 2.6, 2.45, 2.6, 3.1),
    ("batch", "true", "pre", 50): (2.7, 2.4, 2.3, 2.4, 2.8),
    ("batch", "true", "post", 50): (2.7, 2.45, 2.35, 2.5, 2.9),
    ("masked_batch", "true", "pre", 50): (2.7, 2.4, 2.3, 2.4, 2.8),
    ("masked_batch", "true", "post", 50): (2.7, 2.45, 2.35, 2.5, 2.9),
    ("rms", "true", "pre", 50): (2.6, 2.3, 2.15, 2.25, 2.6),
    ("rms", "true", "post", 50): (2.5, 2.35, 2.4, 3.1, INF),
    ("dyt", "true", "pre", 50): (3.1, 2.45, 2.4, 3.1, 3.1),
    ("dyt", "true", "post", 50): (3.1, 2.5, 2.45, 3.1, INF),
    ("none", "true", "pre", 50): (2.7, 2.4, 2.3, INF, INF),
    ("none", "false", "pre", 50): (3.1, 3.1, 3.1, 3.1, 3.1),
}
HEADLINE = {("layer", "true", "pre", 50), ("layer", "true", "pre", 0), ("layer", "true", "post", 50),
            ("layer", "true", "post", 0), ("layer", "false", "pre", 50), ("batch", "true", "pre", 50),
            ("masked_batch", "true", "pre", 50), ("none", "true", "pre", 50)}


def healthy_best(variant: tuple) -> dict:
    """The best-rate seeds' numbers of a variant (seed jitter added by the writer)."""
    norm, residual, placement, warmup = variant
    loss = {("layer", "true", "pre", 50): 2.1, ("layer", "true", "pre", 0): 2.12,
            ("layer", "true", "post", 50): 2.3, ("layer", "true", "post", 0): 2.6,
            ("layer", "false", "pre", 50): 2.6, ("none", "false", "pre", 50): 3.1}.get(variant, 2.3)
    bn = norm in BN_NORMS
    return {"loss": loss, "train_mode": loss - 0.2 if bn else None,
            "precise": {"batch": 2.5, "masked_batch": 2.3}.get(norm),
            "invariance": 0.5 if bn else 0.0,
            "rank1": (0.9, 0.8) if residual == "true" else (0.05, 0.02),
            "growth": 5.0 if norm == "none" else 1.0}


# F11: variant -> test loss at 2 and 12 blocks (6 blocks: ``best``)
DEPTH = {("layer", "true", "pre"): {2: 2.3, 12: 2.0}, ("layer", "true", "post"): {2: 2.35, 12: 3.1},
         ("none", "true", "pre"): {2: 2.35, 12: 2.5}, ("layer", "false", "pre"): {2: 2.5, 12: 3.1}}
# F14: α -> (test loss, final saturation of the last block); 1.0 sits at the unigram plateau
DYT = {0.05: (2.4, 0.0), 0.2: (2.2, 0.02), 0.5: (2.3, 0.1), 1.0: (3.1, 0.6)}
# F14 by DyT's recipe: α₀ -> (validation loss at its best rate, test loss, the largest
# saturation over the run); α₀ 0.5 is best on validation and matches Pre-LN (2.1) within the
# margin, 1.0 sits at the plateau, saturated
DYT_RECIPE = {0.2: (2.2, 2.12, 0.05), 0.5: (2.1, 2.11, 0.1), 1.0: (3.1, 3.1, 0.9)}
DYT_RECIPE_RATES = tuple(float(f"{0.01 * f:.12g}") for f in SHORT_GRID)
# F10/F12: (norm_affine, residual) -> last-block CV of the LN output norms, probe accuracy
STREAM = {("true", "true"): {"cv": 0.1, "acc": 0.98}, ("true", "false"): {"cv": 0.1, "acc": 0.5},
          ("false", "true"): {"cv": 1e-7, "acc": 0.97}}
AFFINE_LOSS = 2.3
STREAM_CSV = "analysis/stream.csv"
# F19: (norm_affine, residual) -> the scale probe's R² at every block (from x̂: the same)
SCALE_R2 = {("true", "true"): 0.6, ("true", "false"): 0.5, ("false", "true"): 0.3}
# F15/F16 (analyze decode): norm -> numbers; BN is served worse at batch 1 than LN, and with
# batch statistics far above the unigram plateau (3.1)
DECODE_NORMS = ("layer", "rms", "dyt", "none", "batch", "masked_batch")
SERVED = {"layer": 2.1, "rms": 2.15, "dyt": 2.4, "none": 2.3, "batch": 2.5, "masked_batch": 2.4}
# F17 (analyze ln-backward): each formula's error / max |grad| (the healthy set: both match)
LN_BACKWARD = {"short": 1e-6, "full": 1e-7, "share": 0.2}


def write_run(path: Path, overrides: list[str], summary: dict, train: dict | None = None,
              evals: dict | None = None) -> None:
    if path.exists():  # a copied healthy run whose numbers changed
        shutil.rmtree(path)
    path.mkdir(parents=True)
    cfg = load_config("configs/reference.yaml", overrides)
    (path / "config.yaml").write_text(to_yaml(cfg))
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "meta.json").write_text(json.dumps({"git_sha": "0" * 40, "git_dirty": False}))
    writers = RunWriters(path)
    for group, curves in (("train", train or {}), ("eval", evals or {})):
        for step, scalars in curves.items():
            writers.write(group, scalars, step)
    writers.close()


def _numbers(change, kind: str, key, values: dict) -> dict | None:
    """``change``'s numbers for one run; None when a copied run already holds them."""
    try:
        return change(kind, key, values)
    except Skip:
        return None


def _summary(loss: float, test: float | None = None, **extra) -> dict:
    if math.isinf(loss) or (test is not None and math.isinf(test)):
        return {"status": "diverged", "diverged_step": 7, "loss_spikes": 0, **extra}
    return {"status": "completed", "final_eval_loss": loss,
            "final_test_loss": loss if test is None else test, "loss_spikes": 0, **extra}


def _name(parts: dict, seed: int) -> str:
    return ",".join(f"{k}={v}" for k, v in parts.items()) + (f",seed={seed}" if seed else "")


def _variant_overrides(variant: tuple) -> tuple[dict, list[str]]:
    norm, residual, placement, warmup = variant
    parts = dict(norm=norm, residual=residual, placement=placement, warmup_steps=warmup)
    return parts, [f"model.norm={norm}", f"model.residual={residual}",
                   f"model.placement={placement}", f"train.warmup_steps={warmup}"]


def write_lr(root: Path, change) -> dict:
    """Sub-sweep ``lr`` (key: (variant, rate)); returns each variant's best rate."""
    best = {}
    for variant, losses in LR_TABLE.items():
        parts, overrides = _variant_overrides(variant)
        finite = [(v, lr) for v, lr in zip(losses, RATE_GRID) if not math.isinf(v)]
        best[variant] = min(finite)[1] if finite else RATE_GRID[0]
        for lr, healthy in zip(RATE_GRID, losses):
            v = _numbers(change, "lr", (variant, lr), {"loss": healthy})
            if v is None:
                continue
            write_run(root / "lr" / _name({**parts, "lr": lr}, 0), [*overrides, f"train.lr={lr}"],
                      _summary(v["loss"]), {}, {0: {"loss": INIT_LOSS},
                                                STEPS: {} if math.isinf(v["loss"]) else {"loss": v["loss"]}})
    return best


def write_best(root: Path, change, best: dict, seeds) -> None:
    """Sub-sweep ``best`` (key: (variant, seed)): every variant at its best rate."""
    for variant in LR_TABLE:
        parts, overrides = _variant_overrides(variant)
        n = HEADLINE_SEEDS if variant in HEADLINE else MIN_SEEDS
        for seed in [s for s in seeds if s < n]:
            v = _numbers(change, "best", (variant, seed), healthy_best(variant))
            if v is None:
                continue
            j = 0.001 * seed
            summary = _summary(v["loss"] + j, v["loss"] + j, pad_fraction=0.06, probes={
                "probe/batch_invariance": v["invariance"] * (1 + 0.1 * seed)})
            if v["train_mode"] is not None:
                summary["final_test_loss_train_mode"] = v["train_mode"] + j
            if v["precise"] is not None:
                summary["final_test_loss_precise_bn"] = v["precise"] + j
            tag = f"probe/rank1_residual/block_{LAYERS - 1}"
            # every block's std, growing geometrically to ``growth`` (seeds offset, same ratio)
            train = {STEPS - 1: {f"activation/block_{i}/token_std":
                                 (1 + 0.02 * seed) * v["growth"] ** (i / (LAYERS - 1))
                                 for i in range(LAYERS)}}
            write_run(root / "best" / _name(parts, seed),
                      [*overrides, f"train.lr={best[variant]}", f"train.seed={seed}"], summary,
                      train, {0: {tag: v["rank1"][0]}, STEPS: {tag: v["rank1"][1]}})


def write_depth(root: Path, change, seeds) -> None:
    """Sub-sweep ``depth`` (key: ((norm, residual, placement), depth, seed))."""
    for (norm, residual, placement), at in DEPTH.items():
        for depth, loss in at.items():
            for seed in [s for s in seeds if s < HEADLINE_SEEDS]:
                v = _numbers(change, "depth", ((norm, residual, placement), depth, seed), {"loss": loss})
                if v is None:
                    continue
                parts = dict(num_layers=depth, norm=norm, residual=residual, placement=placement)
                write_run(root / "depth" / _name(parts, seed),
                          [f"model.num_layers={depth}", f"model.norm={norm}",
                           f"model.residual={residual}", f"model.placement={placement}",
                           f"train.seed={seed}"], _summary(v["loss"] + 0.001 * seed))


def write_dyt(root: Path, change, seeds) -> None:
    """Sub-sweep ``dyt`` (key: (alpha, seed)); saturation None: the run has no probe."""
    tags = [f"probe/dyt_saturation/block_{i}" for i in range(LAYERS)]
    for alpha, (loss, sat) in DYT.items():
        for seed in [s for s in seeds if s < MIN_SEEDS]:
            v = _numbers(change, "dyt", (alpha, seed), {"loss": loss, "saturation": sat})
            if v is None:
                continue
            # step 0 never saturates; at the end only the last block does
            evals = {0: dict.fromkeys(tags, 0.0),
                     STEPS: {**dict.fromkeys(tags[:-1], 0.0), tags[-1]: v["saturation"]}}
            write_run(root / "dyt" / _name({"dyt_alpha": alpha}, seed),
                      ["model.norm=dyt", f"model.dyt_alpha={alpha}", f"train.seed={seed}"],
                      _summary(v["loss"] + 0.001 * seed), {},
                      evals if v["saturation"] is not None else {})


def write_dyt_recipe(root: Path, change, seeds) -> None:
    """Sub-sweeps ``dyt_recipe_lr`` (key: (alpha, rate)) and ``dyt_recipe`` (key: (alpha, seed)):
    the best rate is the middle one; saturation peaks mid-run (the figure and F14 read the
    maximum over the run, not the final value) at every DyT (attention, FFN, final)."""
    recipe = ["model.norm=dyt", f"model.embed_scale={EMBED_UNIT_SCALE}"]
    for alpha, (val, _, _) in DYT_RECIPE.items():
        for i, lr in enumerate(DYT_RECIPE_RATES):
            v = _numbers(change, "dyt_recipe_lr", (alpha, lr), {"loss": val + abs(i - 1) * 0.2})
            if v is None:
                continue
            write_run(root / "dyt_recipe_lr" / _name({"dyt_alpha": alpha, "lr": lr}, 0),
                      [*recipe, f"model.dyt_alpha={alpha}", f"train.lr={lr}"],
                      _summary(v["loss"]), {}, {0: {"loss": INIT_LOSS}, STEPS: {"loss": v["loss"]}})
    tags = ([f"probe/dyt_saturation/block_{i}" for i in range(LAYERS)]
            + [f"probe/dyt_saturation/block_{i}/ffn" for i in range(LAYERS)]
            + ["probe/dyt_saturation/final"])
    for alpha, (_, test, sat) in DYT_RECIPE.items():
        for seed in [s for s in seeds if s < MIN_SEEDS]:
            v = _numbers(change, "dyt_recipe", (alpha, seed), {"loss": test, "saturation": sat})
            if v is None:
                continue
            peak = {**dict.fromkeys(tags[:-1], 0.0), tags[-1]: v["saturation"]}
            evals = {0: dict.fromkeys(tags, 0.0), STEPS // 2: peak,
                     STEPS: {t: x / 2 for t, x in peak.items()}}
            write_run(root / "dyt_recipe" / _name({"dyt_alpha": alpha}, seed),
                      [*recipe, f"model.dyt_alpha={alpha}", f"train.lr={DYT_RECIPE_RATES[1]}",
                       f"train.seed={seed}"],
                      _summary(v["loss"] + 0.001 * seed, probes_max=peak), {}, evals)


def write_small_groups(root: Path, change, seeds) -> None:
    """``affine`` (key: seed) and ``pad_to_max``/``small_batch`` (key: (norm, seed))."""
    for seed in [s for s in seeds if s < MIN_SEEDS]:
        v = _numbers(change, "affine", seed, {"loss": AFFINE_LOSS})
        if v is None:
            continue
        write_run(root / "affine" / _name({"norm_affine": "false"}, seed),
                  ["model.norm=layer", "model.norm_affine=false", f"train.seed={seed}"],
                  _summary(v["loss"] + 0.001 * seed))
    for group, override, pads in (("pad_to_max", "data.buckets=[128]", 0.12),
                                  ("small_batch", "data.tokens_per_batch=256", 0.08)):
        for norm in BN_NORMS:
            for seed in [s for s in seeds if s < MIN_SEEDS]:
                v = _numbers(change, group, (norm, seed), {"precise": {"batch": 2.6}.get(norm, 2.3)})
                if v is None:
                    continue
                write_run(root / group / _name({"norm": norm}, seed),
                          [override, f"model.norm={norm}", f"train.seed={seed}"],
                          _summary(2.3, 2.3, pad_fraction=pads,
                                   final_test_loss_precise_bn=v["precise"] + 0.001 * seed))


def _csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # maybe a hard link into the healthy base
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def write_analyses(root: Path, change, seeds) -> None:
    """init/grad_profile.csv (key: (placement, seed)); analysis/batch_size.csv (key: (norm,
    seed)), composition.csv (key: (norm, seed)), padding.csv (key: (norm, condition, seed)),
    stream.csv (key: (norm_affine, residual, seed)); decode.csv, ln_backward.csv, ln_numbers.csv,
    ln_epsilon.csv (``write_inference``)."""
    seeds = [s for s in seeds if s < MIN_SEEDS]
    _csv(root / "init" / "grad_profile.csv", [
        {"init": "xavier", "placement": p, "seed": s, "last_over_first": change(
            "init", (p, s), {"ratio": 2.0 if p == "post" else 0.8})["ratio"] * (1 + 0.01 * s)}
        for p in ("pre", "post") for s in seeds])
    rows = []
    for norm in ("layer", "batch", "masked_batch"):
        for seed in seeds:
            bn = norm != "layer"
            v = change("bs", (norm, seed), {
                "train": {b: 2.3 + (0.3 / b if bn else 0.0) for b in (1, 2, 4, 8, 16, 64)},
                "inference": {b: 2.3 for b in (1, 2, 4, 8, 16, 64)}})
            rows += [{"run": f"{norm},{seed}", "norm": norm, "seed": seed, "mode": mode,
                      "batch_size": b, "loss": loss, "loss_std": 0.1}
                     for mode in ("train", "inference") for b, loss in [*v[mode].items(), ("1x1", 3.0)]]
    _csv(root / "analysis" / "batch_size.csv", rows)
    rows = []
    for norm in ("layer", "rms", "batch", "masked_batch"):
        for seed in seeds:
            token = norm in ("layer", "rms")
            v = change("composition", (norm, seed), {"train": 0.0 if token else 5.0, "inference": 0.0})
            rows += [{"run": f"{norm},{seed}", "norm": norm, "seed": seed, "mode": m,
                      "max_abs_delta": v[m] * (1 + 0.1 * seed)} for m in ("train", "inference")]
    _csv(root / "analysis" / "composition.csv", rows)
    rows = []
    for norm in BN_NORMS:
        for seed in seeds:
            for condition in CONDITIONS:
                healthy = {"bucketed": 0.05, "pad_to_max": 0.3, "small_batch": 0.2}[condition]
                v = change("padding", (norm, condition, seed),
                           {"shift": healthy if norm == "batch" else 0.0})
                rows.append({"run": f"{norm},{seed}", "norm": norm, "seed": seed,
                             "condition": condition, "pad_fraction": 0.1,
                             "shift": v["shift"] + 0.001 * seed})
    _csv(root / "analysis" / "padding.csv", rows)
    rows = []
    for (affine, residual), healthy in STREAM.items():
        for seed in seeds:
            v = change("stream", (affine, residual, seed), {
                "cv": {b: healthy["cv"] for b in range(LAYERS)},
                "acc": {b: healthy["acc"] for b in range(-1, LAYERS)},
                "r2": SCALE_R2[(affine, residual)], "r2_xhat": SCALE_R2[(affine, residual)]})
            rows += [{"run": f"{affine},{residual},{seed}", "norm": "layer", "residual": residual,
                      "norm_affine": affine, "seed": seed, "block": block,
                      "probe_accuracy": acc + 0.001 * seed,
                      "norm_output_cv": "" if block < 0 else v["cv"][block] * (1 + 0.01 * seed),
                      "stream_norm_cv": 0.3,
                      "scale_probe_r2": "" if block < 0 else v["r2"] + 0.001 * seed,
                      "scale_probe_r2_xhat": "" if block < 0 else v["r2_xhat"] + 0.001 * seed}
                     for block, acc in v["acc"].items()]
    _csv(root / STREAM_CSV, rows)
    write_inference(root, change, seeds)


def write_inference(root: Path, change, seeds) -> None:
    """analysis/decode.csv (key: (norm, seed)) and ln_backward.csv (key: seed); F13's and F18's
    ln_numbers.csv and ln_epsilon.csv, LN's definition rather than runs, are the committed ones
    (tests/test_findings_ln.py changes their numbers)."""
    for name in ("ln_numbers.csv", "ln_epsilon.csv"):
        (root / "analysis").mkdir(parents=True, exist_ok=True)
        if not (root / "analysis" / name).exists():  # a copied base links it already
            shutil.copyfile(COMMITTED_ANALYSIS / name, root / "analysis" / name)
    rows = []
    for norm in DECODE_NORMS:
        for seed in seeds:
            bn = norm in BN_NORMS
            v = change("decode", (norm, seed), {
                "stream": 1e-6, "served": SERVED[norm], "batch_stats": 4.6 if bn else "",
                "grow": 1e-6, "grow_train": 0.5 if bn else ""})
            rows.append({"run": f"{norm},{seed}", "norm": norm, "residual": "true", "seed": seed,
                         "tokens": 512, "stream_max_delta": v["stream"] * (1 + 0.1 * seed),
                         "served_loss": v["served"] + 0.001 * seed,
                         "served_loss_batch_stats": v["batch_stats"],
                         "grow_max_delta": v["grow"] * (1 + 0.1 * seed),
                         "grow_max_delta_train": v["grow_train"]})
    _csv(root / "analysis" / "decode.csv", rows)
    rows = []
    for seed in seeds:
        v = change("ln_backward", seed, dict(LN_BACKWARD))
        rows += [{"run": f"layer,{seed}", "norm": "layer", "residual": "true", "placement": "pre",
                  "seed": seed, "block": block, "tokens": 1024, "max_abs_grad": 0.01,
                  "short_error": v["short"] * (1 + 0.1 * seed), "full_error": v["full"],
                  "missing_share": v["share"]} for block in range(LAYERS)]
    _csv(root / "analysis" / "ln_backward.csv", rows)


class Skip(Exception):
    """Raised by ``only_changes``' change for a run whose copied numbers are still right."""


def only_changes(change):
    """``change`` for a copied tree: a run whose numbers it leaves alone is not written again."""
    def wrapped(kind, key, values):
        new = change(kind, key, values)
        if new == values and kind in RUN_KINDS:
            raise Skip
        return new
    return wrapped


RUN_KINDS = ("lr", "best", "depth", "dyt", "dyt_recipe_lr", "dyt_recipe", "affine", "pad_to_max",
             "small_batch")


def build(root: Path, change=lambda kind, key, values: values, seeds=range(HEADLINE_SEEDS),
          skip: tuple = (), base: Path | None = None) -> Reference:
    """The whole synthetic reference under ``root`` (sub-sweeps in ``skip`` left out)."""
    if base is not None:  # hard links: a file written again is unlinked first, never rewritten
        shutil.copytree(base, root, copy_function=os.link)
        change = only_changes(change)
    best = write_lr(root, change)
    writers = {"best": lambda: write_best(root, change, best, seeds),
               "depth": lambda: write_depth(root, change, seeds),
               "dyt": lambda: write_dyt(root, change, seeds),
               "dyt_recipe": lambda: write_dyt_recipe(root, change, seeds),
               "small": lambda: write_small_groups(root, change, seeds),
               "analyses": lambda: write_analyses(root, change, seeds)}
    for name, write in writers.items():
        if name not in skip:
            write()
    for group in [p for p in root.iterdir() if p.is_dir() and p.name not in ("analysis", "init")]:
        (group / "baselines.json").unlink(missing_ok=True)
        (group / "baselines.json").write_text(json.dumps(BASELINES))
    return Reference(root)


def changing(kind_, match, **new):
    """A ``change`` that sets ``new`` on the runs/rows of ``kind_`` whose key ``match``es."""
    def change(kind, key, values):
        return {**values, **new} if kind == kind_ and match(key) else values
    return change


def combine(*changes):
    """Several ``change`` functions applied in turn."""
    def change(kind, key, values):
        for c in changes:
            values = c(kind, key, values)
        return values
    return change
