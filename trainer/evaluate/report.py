"""``report.json`` and ``report.md`` of ``evaluate-norm``: the properties, the rate curve, the test
losses against the baselines, the paired comparison to Pre-LN, and one plain sentence.

No TensorFlow: it reads what ``properties`` measured and what ``protocol`` trained.
"""

from __future__ import annotations

import math
from pathlib import Path

from trainer import rundir
from trainer.atomic import write_json, write_text
from trainer.norm_names import row
from trainer.results.metrics import interval

PRELN = "Pre-LN"
PROPERTY_WORDS = {  # property -> (holds, fails): what the sentence says
    "causal": ("causal", "NOT causal: a later token changes earlier logits"),
    "batch_invariant.training": ("batch-invariant in training mode",
                                 "not batch-invariant in training mode"),
    "batch_invariant.inference": ("batch-invariant in inference mode",
                                  "NOT batch-invariant in inference mode"),
    "padding_invariant.training": ("padding-invariant in training mode",
                                   "not padding-invariant in training mode"),
    "padding_invariant.inference": ("padding-invariant in inference mode",
                                    "NOT padding-invariant in inference mode"),
    "train_equals_inference": ("the same function in training and inference",
                               "a different function in training and inference"),
    "decode_matches_forward": ("cached decoding matches the full forward",
                               "cached decoding does NOT match the full forward"),
}


def _interval(values: dict) -> dict | None:
    iv = interval(v for v in values.values() if v is not None)
    if iv is None:
        return None
    return {"mean": float(iv.mean), "lo": float(iv.lo), "hi": float(iv.hi),
            "half": float(iv.half), "n": iv.n,
            "per_seed": {str(s): v for s, v in sorted(values.items())}, "text": str(iv)}


def outcome_numbers(outcome) -> dict:
    """The protocol's numbers of one norm (``protocol.Outcome``) as plain JSON values."""
    v = outcome.variant
    if v is None:
        return {"trained": False}
    return {"best_lr": v.best_lr, "best_val_loss": v.best_loss, "lr_sensitivity": v.sensitivity,
            "trains": v.trains, "trains_at": v.trains_at, "rates_tried": [p.lr for p in v.points],
            "best_at_edge": v.edge,
            "val_loss": {f"{p.lr:g}": p.final_loss for p in v.points},
            "test_loss": _interval(outcome.test_loss)}


def paired(a: dict, b: dict) -> dict | None:
    """``a − b`` per seed both have (same seed: same init draw and data order), with its
    t-interval; None without a common seed."""
    seeds = sorted(s for s in set(a) & set(b) if a[s] is not None and b[s] is not None)
    if not seeds:
        return None
    return _interval({s: a[s] - b[s] for s in seeds})


def _num(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    return "∞" if math.isinf(x) else f"{x:.{digits}f}"


def sentence(report: dict) -> str:
    """What the report found, in one line: where it trains, how far from Pre-LN, properties."""
    parts = []
    numbers = report.get("numbers") or {}
    if "rates_tried" in numbers:
        n, k = len(numbers["rates_tried"]), len(numbers["trains_at"])
        parts.append(f"trains at {k} of {n} rates" if k else f"trains at none of {n} rates")
        diff = report.get("paired_vs_preln")
        if diff:
            side = "behind" if diff["mean"] > 0 else "ahead of"
            shown = diff["lo"] > 0 or diff["hi"] < 0  # the interval excludes no difference
            parts.append(f"{abs(diff['mean']):.3f} nats {side} Pre-LN in test loss"
                         f"{'' if shown else ', a difference not shown'} (paired over "
                         f"{diff['n']} seeds, 95 % interval [{diff['lo']:+.3f}, {diff['hi']:+.3f}])")
    props = (report.get("properties") or {}).get("init")
    if props:
        flat = flatten(props)
        for key, (yes, no) in PROPERTY_WORDS.items():
            if key in flat and (not flat[key] or key in ("causal", "batch_invariant.training")):
                parts.append(yes if flat[key] else no)
    return "; ".join(parts) + "." if parts else "nothing measured."


def flatten(props: dict) -> dict[str, bool]:
    """``{property[.mode]: holds}`` of a measured properties dict."""
    out = {}
    for name, entry in props.items():
        out[name] = entry["holds"]
        for mode in ("training", "inference"):
            if mode in entry:
                out[f"{name}.{mode}"] = entry[mode]["holds"]
    return out


def _property_rows(props: dict) -> list[str]:
    lines = ["| property | at init | trained |", "|---|---|---|"]
    init, trained = props.get("init") or {}, props.get("trained") or {}
    for name, entry in init.items():
        modes = [m for m in ("training", "inference") if m in entry] or [None]
        for mode in modes:
            def cell(p):
                e = (p.get(name) or {}) if p else {}
                e = e.get(mode, {}) if mode else e
                if not e:
                    return "—"
                return f"{'yes' if e['holds'] else '**no**'} ({e['max_abs_diff']:.2g})"
            label = f"{name} ({mode} mode)" if mode else name
            lines.append(f"| {label} | {cell(init)} | {cell(trained)} |")
    return lines


def _loss_rows(report: dict) -> list[str]:
    rates = sorted({float(r) for x in [report.get("numbers") or {}, *report["baselines"].values()]
                    for r in (x.get("val_loss") or {})})
    head = ["norm", "best rate", "LR sensitivity", "trains at", "test loss (mean ± 95 %, seeds)",
            *(f"val {r:g}" for r in rates)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, x in [(report["display"], report.get("numbers") or {}),
                    *report["baselines"].items()]:
        t = x.get("test_loss")
        cells = [name, f"{x['best_lr']:g}" if x.get("best_lr") else "—",
                 _num(x.get("lr_sensitivity")),
                 " ".join(f"{r:g}" for r in x.get("trains_at", [])) or "none",
                 f"{t['text']} (n = {t['n']})" if t else "—",
                 *(_num((x.get("val_loss") or {}).get(f"{r:g}")) for r in rates)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def markdown(report: dict) -> str:
    """report.md: the sentence first, then the evidence behind it."""
    out = [f"# {report['display']} under the lab's protocol ({report['budget']} budget)", "",
           f"`model.norm={report['norm']}` — {report['sentence']}", ""]
    if report.get("reproduction"):
        r = report["reproduction"]
        out += [f"This machine against the committed reference: `{r['run']}` reproduced: "
                f"{r.get('text', r.get('verdict'))}.", ""]
    out += ["## Properties", "", "max |Δ logits| in parentheses; a property holds at ≤ "
            f"{report['invariant_max']:g} (float32 noise ~1e-6).", "",
            *_property_rows(report["properties"]), ""]
    if report.get("numbers"):
        out += ["## Learning rate and test loss", "",
                "Each norm at its own best rate (lowest final validation loss of the grid, 1 "
                "seed); test loss at that rate over the seeds (seed 0 is the grid's run). "
                "Baselines: Pre + residual, at the same budget. *Trains*: validation loss below "
                "the bigram baseline.", "", *_loss_rows(report), ""]
        b = report.get("token_baselines") or {}
        if b:
            out += [f"Validation tokens: unigram {b['unigram']:.4f}, bigram {b['bigram']:.4f} "
                    "nats.", ""]
        diff = report.get("paired_vs_preln")
        if diff:
            out += ["Paired with Pre-LN (same seed: same initialisation draw and data order), "
                    f"test loss difference: {diff['text']} (per seed: "
                    + ", ".join(f"{s}: {v:+.4f}" for s, v in diff["per_seed"].items()) + ").", ""]
        if report.get("figure"):
            out += [f"![learning rates]({report['figure']})", ""]
    out += [f"Runs: {', '.join(report.get('runs', [])) or 'none'} (TensorBoard: "
            "`python -m trainer tensorboard` on this directory)."]
    return "\n".join(out) + "\n"


def write(report: dict, out: Path) -> None:
    """report.json and report.md into ``out``."""
    write_json(out / rundir.REPORT_JSON, report)
    write_text(out / rundir.REPORT_MD, markdown(report))


def display(norm: str) -> str:
    return row(norm).name
