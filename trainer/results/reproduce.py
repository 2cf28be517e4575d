"""Rerun a finished run from its saved config.yaml and compare the two, metric by metric.

``python -m trainer reproduce RUN_DIR [--out DIR] [--reuse] [--strict]`` trains
``RUN_DIR/config.yaml`` again into ``DIR`` (default ``runs/reproduce/<run name>``, outside
``results/``) and compares

- summary.json: status, steps, final_eval_loss, final_eval_loss_train_mode (when the original
  has it), best_eval_loss, diverged_step, max_grad_norm and every probe value;
- every curve in train/ and eval/ step by step (all tags except the wall-clock
  ``tokens_per_sec``): same tags, same steps, same values.

The rule (``expectation``): the same code (equal git sha, neither tree dirty), the same package
versions and the same machine identity (``trainer.machine``: CPU model, instruction sets, thread
counts, oneDNN, no accelerator) must give a **bit-identical** rerun: the loop runs with op
determinism, so any difference is a MISMATCH. Anything else changes the order or the width of
float32 operations, and values must agree within a tolerance that grows with the run's length
(``tolerances``). Status, steps and diverged_step must always match exactly; ``--strict``
demands identity anyway.

A ``DIR`` that already exists is refused unless ``--reuse`` is given: then a finished
reproduction there is compared again (an unfinished one resumed), after checking that it was
made by this checkout's code version. Results directories: ``trainer.results.reproduce_all``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from trainer.atomic import write_json
from trainer.config import ConfigError, load_config
from trainer.machine import IDENTITY_KEYS
from trainer.provenance import git_dirty, git_sha
from trainer.results.run import Run

EPS32 = 2.0 ** -23  # float32 machine epsilon
RTOL, ATOL = 1e-4, 1e-6  # floor of the tolerance on losses and summaries
DIAGNOSTIC_FACTOR = 100  # per-batch gradients, activations, probes: measured up to 1.2e-3
DIAGNOSTICS = ("grad_norm", "activation", "update_ratio", "probe")
SUMMARY_KEYS = ("status", "steps", "final_eval_loss", "final_eval_loss_train_mode",
                "best_eval_loss", "diverged_step", "max_grad_norm")
EXACT_KEYS = ("status", "steps", "diverged_step")  # exact even under tolerance
WALL_CLOCK = ("tokens_per_sec", "padded_tokens_per_sec")  # timing, never reproducible
ACCELERATORS = ("GPU", "TPU")
VERDICT_FILE = "reproduce.json"  # the verdict, written into the reproduction's directory


@dataclass(frozen=True)
class Tolerance:
    """``|reproduction - original| <= atol + rtol * |original|``."""
    rtol: float
    atol: float

    def holds(self, a: float, b: float) -> bool:
        return abs(b - a) <= self.atol + self.rtol * abs(a)


def tolerances(steps: int) -> dict[str, Tolerance]:
    """Tolerances for a rerun not expected bit-identical, for a run of ``steps`` optimizer steps.

    Every weight is a float32 sum of ``steps`` updates; other kernels or another split of the
    reductions round each update differently, and the worst-case relative error of such a sum
    grows like ``steps * eps`` (Higham's bound for recursive summation). Losses and summary
    values get ``max(1e-4, 4 * steps * eps)`` (3.8e-4 at 800 steps, 1.9e-4 at lr_slice's 400) and
    atol 1e-6. Per-batch diagnostics (gradient norms, activation statistics, update ratios,
    probes) amplify the weights' drift through the loss curvature, and token means are sums
    that cancel to ~0: they get 100x both. Measured rerunning reference runs on another CPU:
    losses drift up to 4e-6 relative, diagnostics up to 1.2e-3 (token means 5e-5 absolute).
    """
    loss = Tolerance(max(RTOL, 4 * max(steps, 1) * EPS32), ATOL)
    return {"loss": loss, "diagnostic": Tolerance(loss.rtol * DIAGNOSTIC_FACTOR,
                                                  loss.atol * DIAGNOSTIC_FACTOR)}


def kind_of(where: str) -> str:
    """``"diagnostic"`` for per-batch gradient/activation/probe values, else ``"loss"``.

    Unknown tags fall in the stricter class, so a new curve fails loudly rather than passing.
    """
    return "diagnostic" if any(d in where for d in DIAGNOSTICS) else "loss"


@dataclass
class Diff:
    where: str  # "summary final_eval_loss" or "eval/loss"
    step: int | None
    original: object
    reproduction: object

    def __str__(self) -> str:
        at = f" at step {self.step}" if self.step is not None else ""
        return f"{self.where}{at}: original {self.original!r} vs reproduction {self.reproduction!r}"


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):  # True == 1 in Python, not here
        return type(a) is type(b) and a == b
    if _number(a) and _number(b) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


class Comparison:
    """Accumulates value-by-value comparisons: differences beyond the tolerance, the number of
    values that are not bit-equal, and the largest relative difference per kind."""

    def __init__(self, tols: dict[str, Tolerance], exact: bool):
        self.tols, self.exact = tols, exact
        self.diffs: list[Diff] = []
        self.values = self.curves = self.unequal = 0
        self.largest = {kind: None for kind in tols}  # kind -> (relative diff, where, step)

    def check(self, where: str, step: int | None, a, b, exact: bool = False) -> bool:
        """Compare one original value ``a`` with its reproduction ``b``; record and return
        whether they agree under this comparison's rule."""
        self.values += 1
        if _equal(a, b):
            return True
        self.unequal += 1
        kind = kind_of(where)
        tol = self.tols[kind]
        finite = _number(a) and _number(b) and math.isfinite(a) and math.isfinite(b)
        if finite:
            scale = max(abs(a), abs(b))
            # Relative differences of values below atol/rtol mean nothing (sums that cancel).
            if scale >= tol.atol / tol.rtol:
                rel = abs(a - b) / scale
                if self.largest[kind] is None or rel > self.largest[kind][0]:
                    self.largest[kind] = (rel, where, step)
        if finite and not (exact or self.exact) and tol.holds(a, b):
            return True
        self.diffs.append(Diff(where, step, a, b))
        return False


def compare_summaries(orig: dict, new: dict, cmp: Comparison) -> Comparison:
    """Compare two summary.json dicts into ``cmp`` (status, steps, diverged step exactly)."""
    keys = [k for k in SUMMARY_KEYS if k != "final_eval_loss_train_mode" or k in orig]
    for key in keys:
        cmp.check(f"summary {key}", None, orig.get(key), new.get(key), exact=key in EXACT_KEYS)
    po, pn = orig.get("probes") or {}, new.get("probes") or {}
    for key in sorted(set(po) | set(pn)):
        cmp.check(f"summary probes.{key}", None, po.get(key, "missing"), pn.get(key, "missing"))
    return cmp


def compare_curves(orig: Run, new: Run, cmp: Comparison) -> Comparison:
    """Compare every curve point by point into ``cmp``; only a curve's first difference beyond
    the tolerance is kept (the rest of a drifting curve is a consequence of it)."""
    for group in ("train", "eval"):
        a, b = getattr(orig, group), getattr(new, group)
        for tag in sorted((set(a) | set(b)) - set(WALL_CLOCK)):
            name = f"{group}/{tag}"
            if tag not in a or tag not in b:
                cmp.check(name, None, "present" if tag in a else "missing",
                          "present" if tag in b else "missing")
                continue
            cmp.curves += 1
            ca, cb = dict(a[tag]), dict(b[tag])
            first = len(cmp.diffs)
            for step in sorted(set(ca) | set(cb)):
                cmp.check(name, step, ca.get(step, "missing"), cb.get(step, "missing"))
            del cmp.diffs[first + 1:]
    return cmp


def _short(sha) -> str:
    return str(sha)[:7] if sha else "unknown"


def _accelerators(meta: dict) -> list[str]:
    found = list((meta.get("machine") or {}).get("accelerators") or [])
    # Runs made before the machine record: their TF device names still say GPU/TPU.
    found += [d for d in meta.get("devices") or [] if any(k in d.upper() for k in ACCELERATORS)]
    return found


def expectation(orig: dict, new: dict) -> list[str]:
    """Why the reproduction (meta.json ``new``) may differ from the original (``orig``): code,
    packages, machine. An empty list means bit-identity is demanded."""
    why = []
    if not orig.get("git_sha") or orig.get("git_sha") != new.get("git_sha"):
        why.append(f"different code: {_short(orig.get('git_sha'))} vs {_short(new.get('git_sha'))}")
    elif orig.get("git_dirty") or new.get("git_dirty"):
        which = [n for n, m in (("original", orig), ("reproduction", new)) if m.get("git_dirty")]
        why.append(f"uncommitted changes in the {' and the '.join(which)}")
    pa = {**(orig.get("packages") or {}), "python": orig.get("python")}
    pb = {**(new.get("packages") or {}), "python": new.get("python")}
    changed = [f"{k} {pa.get(k)} vs {pb.get(k)}" for k in sorted(set(pa) | set(pb))
               if pa.get(k) != pb.get(k)]
    if changed:
        why.append("different packages: " + ", ".join(changed))
    ma, mb = orig.get("machine"), new.get("machine")
    if not ma or not mb:
        why.append(f"the {'original' if not ma else 'reproduction'} recorded no machine identity")
    else:
        for key in IDENTITY_KEYS:
            a, b = ma.get(key), mb.get(key)
            if a == b:
                continue
            if key == "cpu_flags":
                a, b = set(a or []), set(b or [])
                why.append(f"different instruction sets: original only {sorted(a - b)}, "
                           f"reproduction only {sorted(b - a)}")
            else:
                why.append(f"different {'CPU' if key == 'cpu_model' else key}: {a} vs {b}")
    accel = sorted(set(_accelerators(orig) + _accelerators(new)))
    if accel:
        why.append(f"accelerator ({', '.join(accel)}): kernels differ from CPU and between chips")
    return why


def _check(run_dir: Path) -> Run:
    if not run_dir.is_dir():
        raise ConfigError(f"run directory not found: {run_dir}")
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"not a run directory (no config.yaml): {run_dir}")
    run = Run(run_dir)
    if not run.finished:
        raise ConfigError(f"{run_dir} holds no finished run (status: {run.status}); finish it "
                          f"before reproducing")
    return run


def check_out_dir(out_dir: Path, reuse: bool) -> None:
    """Refuse an existing ``out_dir`` unless ``reuse``; when reusing, refuse a reproduction made
    by another code version than this checkout's (it would not test this code)."""
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir} exists and is not a directory")
    if not reuse:
        if any(out_dir.iterdir()):
            raise ConfigError(f"{out_dir} already exists; pass --reuse to compare against what it "
                              f"holds (its code version is checked), or choose another --out")
        return
    meta = Run(out_dir).meta
    if not meta:
        return  # nothing trained there yet: the reproduction starts from scratch
    here = git_sha()
    if meta.get("git_sha") != here:
        raise ConfigError(f"{out_dir} holds a reproduction made by code "
                          f"{_short(meta.get('git_sha'))}, this checkout is {_short(here)}; "
                          f"delete it or choose another --out")
    if meta.get("git_dirty") or git_dirty():
        print(f"note: uncommitted changes (then or now): {out_dir} may have been made by other "
              f"code than this checkout's {_short(here)}", flush=True)


def default_out(run_dir: Path) -> Path:
    """Where a reproduction goes unless told: under the git-ignored ``runs/``, never in results/."""
    return Path("runs") / "reproduce" / run_dir.resolve().name


def _largest_text(cmp: Comparison) -> str:
    parts = []
    for kind, found in cmp.largest.items():
        if found:
            rel, where, step = found
            label = "max relative difference" if kind == "loss" else "diagnostics"
            parts.append(f"{label} {rel:.1e} at {where}" + (f" step {step}" if step is not None
                                                               else ""))
    return ", ".join(parts) or "differences only in values below atol"


def verdict(cmp: Comparison, why: list[str]) -> dict:
    """The verdict of a comparison: name, one-line text and the numbers behind it."""
    reason = "; ".join(why) if why else "same code, packages and machine"
    if cmp.diffs:
        name = "MISMATCH"
        rule = ("identity demanded: " + reason if cmp.exact else
                "beyond " + ", ".join(f"{k} rtol={t.rtol:.1e} atol={t.atol:.0e}"
                                      for k, t in cmp.tols.items()) + "; " + reason)
        text = f"MISMATCH: {cmp.diffs[0]} ({rule})"
    elif cmp.unequal == 0:
        name, text = "IDENTICAL", f"IDENTICAL: every compared value is exactly equal ({reason})"
    else:
        name = "WITHIN TOLERANCE"
        text = f"WITHIN TOLERANCE ({reason}; {_largest_text(cmp)})"
    largest = {k: None if v is None else {"relative": v[0], "where": v[1], "step": v[2]}
               for k, v in cmp.largest.items()}
    return {"verdict": name, "text": text, "identity_demanded": cmp.exact, "reasons": why,
            "tolerances": {k: vars(t) for k, t in cmp.tols.items()}, "largest": largest,
            "mismatches": [str(d) for d in cmp.diffs], "values": cmp.values,
            "curves": cmp.curves, "unequal": cmp.unequal}


def reproduce(run_dir: str | Path, out: str | Path | None = None, progress: bool = True,
              reuse: bool = False, strict: bool = False) -> int:
    """Rerun ``run_dir`` into ``out`` (default ``default_out``) and compare; 0 = match, 1 = not.

    The verdict is printed and written to ``out/reproduce.json``.
    """
    from trainer.train.loop import run_training

    run_dir = Path(run_dir)
    original = _check(run_dir)
    cfg = load_config(run_dir / "config.yaml")
    out_dir = Path(out) if out else default_out(run_dir)
    if out_dir.resolve() == run_dir.resolve():
        raise ConfigError("--out must differ from the run directory being reproduced")
    check_out_dir(out_dir, reuse)
    print(f"reusing the finished reproduction of {run_dir} in {out_dir}"
          if Run(out_dir).finished else f"reproducing {run_dir} -> {out_dir}", flush=True)
    argv = ["python", "-m", "trainer", "reproduce", str(run_dir), "--out", str(out_dir)]
    summary = run_training(cfg, out_dir, argv=argv, progress=progress)
    new = Run(out_dir, summary=summary)  # read after training: its files are final now

    why = expectation(original.meta, new.meta)
    if strict:
        why = [*why, "--strict"] if why else why
    cmp = Comparison(tolerances(int(original.summary.get("steps") or cfg.train.steps)),
                     exact=strict or not why)
    compare_curves(original, new, compare_summaries(original.summary, new.summary, cmp))
    cmp.diffs.sort(key=lambda d: (not d.where.startswith("summary"), d.step or 0))
    result = verdict(cmp, why)
    write_json(out_dir / VERDICT_FILE, result)
    print(f"compared {cmp.values} values, {cmp.curves} curves of them "
          f"({', '.join(WALL_CLOCK)} skipped); {cmp.unequal} not bit-equal")
    print(result["text"])
    for diff in cmp.diffs[1:5]:
        print(f"  also {diff}")
    if len(cmp.diffs) > 5:
        print(f"  ... {len(cmp.diffs) - 5} more curves or values beyond the tolerance")
    return 1 if cmp.diffs else 0
