"""Rerun a finished run from its saved config.yaml and compare the two, metric by metric.

``python -m trainer reproduce RUN_DIR [--out DIR]`` trains ``RUN_DIR/config.yaml`` again into
``DIR`` (default ``RUN_DIR.reproduce``; a finished run already there is reused, an unfinished one
resumed) and compares

- summary.json: status, steps, final_eval_loss, final_eval_loss_train_mode (when the original
  has it), best_eval_loss, diverged_step, max_grad_norm and every probe value;
- every curve in train/ and eval/ step by step (all tags except the wall-clock
  ``tokens_per_sec``): same tags, same steps, same values.

Expectation: on CPU (this machine has no GPU/TPU and the original's meta.json/config record none)
the loop runs with op determinism, so the rerun must be **identical** (exact equality). Elsewhere
accelerator kernels may reorder reductions, so values must agree within **rtol=1e-3, atol=1e-5**
(``|a - b| <= atol + rtol * |b|``); status, steps and diverged_step must still match exactly.

Prints a verdict (IDENTICAL / WITHIN TOLERANCE / MISMATCH naming the first difference: summary
key, or curve tag and step, with both values) and returns 0 on a match, 1 on a mismatch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from trainer.config import ConfigError, load_config
from trainer.results.events import read_scalars
from trainer.train.rundir import read_json

RTOL, ATOL = 1e-3, 1e-5
SUMMARY_KEYS = ("status", "steps", "final_eval_loss", "final_eval_loss_train_mode",
                "best_eval_loss", "diverged_step", "max_grad_norm")
EXACT_KEYS = ("status", "steps", "diverged_step")  # exact even under tolerance
WALL_CLOCK = ("tokens_per_sec", "padded_tokens_per_sec")  # timing, never reproducible
ACCELERATORS = ("GPU", "TPU")


@dataclass
class Diff:
    where: str  # "summary final_eval_loss" or "eval/loss"
    step: int | None
    original: object
    reproduction: object

    def __str__(self) -> str:
        at = f" at step {self.step}" if self.step is not None else ""
        return f"{self.where}{at}: original {self.original!r} vs reproduction {self.reproduction!r}"


def _same(a, b, exact: bool) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not (
            isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if exact or math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= ATOL + RTOL * abs(b)


def compare_summaries(orig: dict, new: dict, exact: bool) -> tuple[list[Diff], int]:
    """Differences between two summary.json dicts; also the number of values compared."""
    keys = [k for k in SUMMARY_KEYS if k != "final_eval_loss_train_mode" or k in orig]
    diffs, n = [], 0
    for key in keys:
        n += 1
        if not _same(orig.get(key), new.get(key), exact or key in EXACT_KEYS):
            diffs.append(Diff(f"summary {key}", None, orig.get(key), new.get(key)))
    po, pn = orig.get("probes") or {}, new.get("probes") or {}
    for key in sorted(set(po) | set(pn)):
        n += 1
        if not _same(po.get(key), pn.get(key), exact):
            diffs.append(Diff(f"summary probes.{key}", None, po.get(key, "missing"),
                              pn.get(key, "missing")))
    return diffs, n


def compare_curves(orig_dir: Path, new_dir: Path, exact: bool) -> tuple[list[Diff], int, int]:
    """First difference of every differing curve; also counts of curves and points compared."""
    diffs, curves, points = [], 0, 0
    for group in ("train", "eval"):
        a, b = read_scalars(orig_dir / group), read_scalars(new_dir / group)
        for tag in sorted((set(a) | set(b)) - set(WALL_CLOCK)):
            name = f"{group}/{tag}"
            if tag not in a or tag not in b:
                diffs.append(Diff(name, None, "present" if tag in a else "missing",
                                  "present" if tag in b else "missing"))
                continue
            curves += 1
            ca, cb = dict(a[tag]), dict(b[tag])
            for step in sorted(set(ca) | set(cb)):
                points += 1
                va, vb = ca.get(step, "missing"), cb.get(step, "missing")
                if not _same(va, vb, exact):
                    diffs.append(Diff(name, step, va, vb))
                    break
    return diffs, curves, points


def accelerated(run_dir: Path, cfg) -> list[str]:
    """Why exact equality cannot be expected: accelerators here or recorded for the original."""
    import tensorflow as tf

    why = sorted({d.device_type for d in tf.config.list_physical_devices()} & set(ACCELERATORS))
    why = [f"this machine has a {kind}" for kind in why]
    meta = read_json(run_dir / "meta.json")
    recorded = json.dumps({k: v for k, v in meta.items() if "device" in k or "accel" in k})
    why += [f"the original recorded a {kind}" for kind in ACCELERATORS if kind in recorded.upper()]
    if cfg.runtime.strategy == "tpu":
        why.append("the config asks for a TPU")
    return why


def _check(run_dir: Path) -> dict:
    if not run_dir.is_dir():
        raise ConfigError(f"run directory not found: {run_dir}")
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"not a run directory (no config.yaml): {run_dir}")
    summary = read_json(run_dir / "summary.json")
    if summary.get("status") not in ("completed", "diverged"):
        raise ConfigError(f"{run_dir} holds no finished run (status: "
                          f"{summary.get('status', 'unfinished')}); finish it before reproducing")
    return summary


def reproduce(run_dir: str | Path, out: str | Path | None = None, progress: bool = True) -> int:
    """Rerun ``run_dir`` into ``out`` (default ``<run_dir>.reproduce``) and compare; 0 = match."""
    from trainer.train.loop import run_training

    run_dir = Path(run_dir)
    original = _check(run_dir)
    cfg = load_config(run_dir / "config.yaml")
    out_dir = Path(out) if out else run_dir.with_name(run_dir.name + ".reproduce")
    if out_dir.resolve() == run_dir.resolve():
        raise ConfigError("--out must differ from the run directory being reproduced")
    why = accelerated(run_dir, cfg)
    exact = not why
    expectation = ("exact equality (CPU only, op determinism)" if exact else
                   f"agreement within rtol={RTOL:g}, atol={ATOL:g} ({'; '.join(why)})")
    reused = read_json(out_dir / "summary.json").get("status") in ("completed", "diverged")
    print(f"reusing the finished reproduction of {run_dir} in {out_dir}" if reused else
          f"reproducing {run_dir} -> {out_dir}", flush=True)
    argv = ["python", "-m", "trainer", "reproduce", str(run_dir), "--out", str(out_dir)]
    new = run_training(cfg, out_dir, argv=argv, progress=progress)

    sdiffs, n_summary = compare_summaries(original, new, exact)
    cdiffs, n_curves, n_points = compare_curves(run_dir, out_dir, exact)
    print(f"compared {n_summary} summary values and {n_curves} curves ({n_points} points; "
          f"{', '.join(WALL_CLOCK)} skipped); expected {expectation}")
    diffs = sdiffs + sorted(cdiffs, key=lambda d: -1 if d.step is None else d.step)
    if diffs:
        print(f"MISMATCH: {diffs[0]}")
        for diff in diffs[1:5]:
            print(f"  also {diff}")
        if len(diffs) > 5:
            print(f"  ... {len(diffs) - 5} more differing values or curves")
        return 1
    if exact or not (compare_summaries(original, new, True)[0]
                     or compare_curves(run_dir, out_dir, True)[0]):
        print("IDENTICAL: every compared value is exactly equal")
    else:
        print(f"WITHIN TOLERANCE (rtol={RTOL:g}, atol={ATOL:g}): not bit-identical")
    return 0
