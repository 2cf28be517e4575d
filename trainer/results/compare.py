"""The comparison of a run with its reproduction, metric by metric (pure: no TensorFlow, no rerun).

Compared (``compare_summaries``, ``compare_curves``):

- summary.json: every key ``trainer.rundir.SUMMARY_SCHEMA`` marks exact or value (status,
  steps, diverged step, the final eval, PreciseBN and test losses, best eval loss, loss
  spikes, max grad norm) that the original has, and every probe value (final and maximum:
  each key ``SUMMARY_SCHEMA`` marks as probes) the original has (``new_probes``);
- every curve in train/ and eval/ step by step (all tags except the wall-clock
  ``tokens_per_sec``): same tags (but a probe the original predates), same steps, same values.

The rule (``expectation``): the same code (equal git sha, neither tree dirty), the same package
versions and the same machine identity (``trainer.machine``: CPU model, instruction sets, thread
counts, oneDNN, no accelerator) must give a **bit-identical** rerun: the loop runs with op
determinism, so any difference is a MISMATCH. Anything else changes the order or the width of
float32 operations, and values must agree within a tolerance that grows with the run's length
(``tolerances``). Status, steps and diverged_step must always match exactly; ``strict``
demands identity anyway. ``compare_runs`` applies the rule, ``verdict`` states the outcome.

The rerun itself is ``trainer.reproduce`` (``python -m trainer reproduce``); ``bench sweep``
compares two sweeps' runs with the same ``Comparison``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer import rundir
from trainer.provenance import short_sha
from trainer.results.run import Run
from trainer.telemetry.instruments import is_instrument

EPS32 = 2.0 ** -23  # float32 machine epsilon
RTOL, ATOL = 1e-4, 1e-6  # floor of the tolerance on losses and summaries
DIAGNOSTIC_FACTOR = 100  # per-batch gradients, activations, probes: measured up to 1.2e-3
DIAGNOSTICS = ("grad_norm", "activation", "update_ratio", "probe")
SUMMARY_KEYS = rundir.keys(rundir.EXACT, rundir.VALUE)
EXACT_KEYS = rundir.keys(rundir.EXACT)  # exact even under tolerance
WALL_CLOCK = ("tokens_per_sec", "padded_tokens_per_sec")  # timing, never reproducible
ACCELERATORS = ("GPU", "TPU")
# Keys of trainer.machine.machine_identity() that must be equal for a rerun to be expected
# bit-identical (besides having no accelerator at all: identity is never demanded from one).
IDENTITY_KEYS = ("cpu_model", "cpu_flags", "logical_cores", "usable_cores", "intra_op_threads",
                 "inter_op_threads", "onednn_enabled")
VERDICT_FILE = rundir.REPRODUCE  # the verdict, written into the reproduction's directory


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
    values get ``max(1e-4, 4 * steps * eps)`` (1e-4 up to 200 steps, 3.8e-4 at the reference
    runs' 800) and atol 1e-6. Per-batch diagnostics (gradient norms, activation statistics,
    update ratios, probes) amplify the weights' drift through the loss curvature, and token
    means are sums that cancel to ~0: they get 100x both. Measured rerunning reference runs on another CPU:
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


def new_probes(orig, new) -> set[str]:
    """Probe and instrument tags only the reproduction has: the original was written before
    those existed (e.g. the DyT FFN and final-norm saturation, the attention and log Z
    instruments), so they are not compared, as a summary key the original lacks. Every other
    tag must be in both."""
    return {t for t in set(new) - set(orig) if t.startswith("probe/") or is_instrument(t)}


def compare_summaries(orig: dict, new: dict, cmp: Comparison) -> Comparison:
    """Compare two summary.json dicts into ``cmp`` (``EXACT_KEYS`` exactly). A key the original
    lacks is skipped: its summary was written before the key existed."""
    keys = [k for k in SUMMARY_KEYS if k in orig]
    for key in keys:
        cmp.check(f"summary {key}", None, orig.get(key), new.get(key), exact=key in EXACT_KEYS)
    for group in rundir.keys(rundir.PROBES):  # probes, probes_max: tag by tag
        if group not in orig:
            continue
        po, pn = orig.get(group) or {}, new.get(group) or {}
        for key in sorted(set(po) | (set(pn) - new_probes(po, pn))):
            cmp.check(f"summary {group}.{key}", None, po.get(key, "missing"),
                      pn.get(key, "missing"))
    return cmp


def compare_curves(orig: Run, new: Run, cmp: Comparison, groups=rundir.CURVES) -> Comparison:
    """Compare every curve of ``groups`` point by point into ``cmp``; only a curve's first
    difference beyond the tolerance is kept (the rest of a drifting curve is a consequence of
    it)."""
    for group in groups:
        a, b = getattr(orig, group), getattr(new, group)
        for tag in sorted((set(a) | set(b)) - set(WALL_CLOCK) - new_probes(a, b)):
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
        why.append(f"different code: {short_sha(orig.get('git_sha'))} vs "
                   f"{short_sha(new.get('git_sha'))}")
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


def compare_runs(original: Run, new: Run, steps: int, strict: bool = False,
                 train_only: bool = False) -> tuple[Comparison, list[str]]:
    """Compare ``new``, a rerun of ``original`` (``steps`` optimizer steps long), under the rule:
    identity when nothing differs (``expectation`` is empty) or ``strict``, else the tolerance.
    ``train_only``: the training curves alone (a rerun that evaluates at other steps).
    Returns the comparison (its differences summary first, then by step) and the reasons."""
    why = expectation(original.meta, new.meta)
    if strict:
        why = [*why, "--strict"] if why else why
    cmp = Comparison(tolerances(steps), exact=strict or not why)
    if train_only:
        compare_curves(original, new, cmp, (rundir.TRAIN,))
    else:
        compare_curves(original, new, compare_summaries(original.summary, new.summary, cmp))
    cmp.diffs.sort(key=lambda d: (not d.where.startswith("summary"), d.step or 0))
    return cmp, why
