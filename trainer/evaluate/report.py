"""``report.json`` and ``report.md`` of ``evaluate-norm``: the properties, the rate curve, the test
losses against the baselines, the paired comparison to Pre-LN, and one plain sentence.

No TensorFlow: it reads what ``properties`` measured and what ``protocol`` trained.

One notation throughout: losses and their differences in nats to ``DIGITS`` decimals; an
interval is ``95 % CI lo … hi`` (the t-interval of the mean over seeds), a range is
``seeds min … max`` (the lowest and highest seed's value).
"""

from __future__ import annotations

import math
from pathlib import Path

from trainer import rundir
from trainer.atomic import write_json, write_text
from trainer.norm_names import row
from trainer.results.metrics import interval

PRELN = "Pre-LN"
DIGITS = 3  # decimals of every loss and loss difference in the report
PROPERTY_WORDS = {  # verdict (``flatten``'s keys) -> (holds, fails): what the sentence says
    "causal": ("causal in inference mode",
               "NOT causal in inference mode: a later token changes earlier logits"),
    "causal.training_mode": ("causal in training mode",
                             "not causal in training mode: a later token changes earlier logits"),
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


def interval_numbers(values: dict, signed: bool = False) -> dict | None:
    iv = interval(v for v in values.values() if v is not None)
    if iv is None:
        return None
    out = {"mean": float(iv.mean), "lo": float(iv.lo), "hi": float(iv.hi),
           "half": float(iv.half), "n": iv.n,
           "per_seed": {str(s): v for s, v in sorted(values.items())}}
    return {**out, "text": interval_text(out, signed)}


def interval_text(iv: dict, signed: bool = False) -> str:
    """``mean (95 % CI lo … hi; seeds min … max)`` of an interval dict (``_interval``), to
    ``DIGITS`` decimals (``signed``: with + on positive values, for differences); one seed's
    value alone is ``value (1 seed)``."""
    def f(x):
        return _num(x, signed=signed)
    seeds = [v for v in iv["per_seed"].values() if v is not None]
    if iv["n"] == 1:
        return f"{f(iv['mean'])} (1 seed)"
    return (f"{f(iv['mean'])} (95 % CI {f(iv['lo'])} … {f(iv['hi'])}; "
            f"seeds {f(min(seeds))} … {f(max(seeds))})")


def outcome_numbers(outcome) -> dict:
    """The protocol's numbers of one norm (``protocol.Outcome``) as plain JSON values."""
    v = outcome.variant
    if v is None:
        return {"trained": False}
    return {"best_lr": v.best_lr, "best_val_loss": v.best_loss, "lr_sensitivity": v.sensitivity,
            "trains": v.trains, "trains_at": v.trains_at, "rates_tried": [p.lr for p in v.points],
            "best_at_edge": v.edge,
            "val_loss": {f"{p.lr:g}": p.final_loss for p in v.points},
            "test_loss": interval_numbers(outcome.test_loss)}


def paired(a: dict, b: dict) -> dict | None:
    """``a − b`` per seed both have (same seed: same init draw and data order), with its
    t-interval; None without a common seed."""
    seeds = sorted(s for s in set(a) & set(b) if a[s] is not None and b[s] is not None)
    if not seeds:
        return None
    return interval_numbers({s: a[s] - b[s] for s in seeds}, signed=True)


def _num(x, digits: int = DIGITS, signed: bool = False) -> str:
    if x is None:
        return "n/a"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def sentence(report: dict) -> str:
    """What the report found, in one line: where it trains, how far from Pre-LN, properties."""
    parts = [report["ladder"]["where"]] if report.get("ladder") else []
    numbers = report.get("numbers") or {}
    if "rates_tried" in numbers:
        n, k = len(numbers["rates_tried"]), len(numbers["trains_at"])
        parts.append(f"trains at {k} of {n} rates" if k else f"trains at none of {n} rates")
        diff = report.get("paired_vs_preln")
        if diff:
            side = "behind" if diff["mean"] > 0 else "ahead of"
            shown = diff["lo"] > 0 or diff["hi"] < 0  # the interval excludes no difference
            parts.append(f"{_num(abs(diff['mean']))} nats {side} Pre-LN in test loss"
                         f"{'' if shown else ', a difference not shown'} (paired over "
                         f"{diff['n']} seeds, 95 % CI {_num(diff['lo'], signed=True)} … "
                         f"{_num(diff['hi'], signed=True)})")
    props = (report.get("properties") or {}).get("init")
    if props:
        parts.append(_property_words(flatten(props)))
    return "; ".join(parts) + "." if parts else "nothing measured."


def _property_words(flat: dict[str, bool]) -> str:
    """How many of the verdicts hold, then each: ``all 8 properties hold: …`` or
    ``6 of 8 properties hold (…); NOT …; not …``."""
    keys = _ordered(flat)
    held = [PROPERTY_WORDS.get(k, (k,))[0] for k in keys if flat[k]]
    failed = [PROPERTY_WORDS.get(k, (None, f"{k} fails"))[1] for k in keys if not flat[k]]
    if not failed:
        return f"all {len(keys)} properties hold: " + ", ".join(held)
    return "; ".join([f"{len(held)} of {len(keys)} properties hold ({', '.join(held) or 'none'})",
                      *failed])


def _ordered(found: dict) -> list[str]:
    """The keys of ``found`` in ``PROPERTY_WORDS``' order (report.json's keys are sorted)."""
    return [k for k in PROPERTY_WORDS if k in found] + sorted(set(found) - set(PROPERTY_WORDS))


def verdicts(props: dict) -> dict[str, dict]:
    """Each verdict of a measured properties dict (``properties.measure``) as
    ``{key: {holds, max_abs_diff}}``: a property measured in both modes gives
    ``name.training`` and ``name.inference`` (its own ``holds`` joins them, no verdict of its
    own); ``causal`` is the inference-mode verdict, ``causal.training_mode`` the one beside it."""
    out = {}
    for name, entry in props.items():
        if "max_abs_diff" in entry:
            out[name] = entry
        for mode in ("training", "inference", "training_mode"):
            if mode in entry:
                out[f"{name}.{mode}"] = entry[mode]
    return out


def flatten(props: dict) -> dict[str, bool]:
    """``{verdict: holds}`` of a measured properties dict (the keys of ``verdicts``)."""
    return {key: e["holds"] for key, e in verdicts(props).items()}


def _label(key: str) -> str:
    name, _, mode = key.partition(".")
    if name == "causal":  # measured in inference mode, training mode beside it
        mode = mode or "inference"
    mode = mode.replace("_mode", "")
    return f"{name} ({mode} mode)" if mode else name


def _property_rows(props: dict) -> list[str]:
    lines = ["| property | at init | trained |", "|---|---|---|"]
    init, trained = verdicts(props.get("init") or {}), verdicts(props.get("trained") or {})

    def cell(found: dict, key: str) -> str:
        e = found.get(key)
        if not e:
            return "—"
        return f"{'yes' if e['holds'] else '**no**'} ({e['max_abs_diff']:.2g})"

    for key in _ordered(init):
        lines.append(f"| {_label(key)} | {cell(init, key)} | {cell(trained, key)} |")
    return lines


def _loss_rows(report: dict) -> list[str]:
    rates = sorted({float(r) for x in [report.get("numbers") or {}, *report["baselines"].values()]
                    for r in (x.get("val_loss") or {})})
    head = ["norm", "best rate", "LR sensitivity", "trains at", "test loss",
            *(f"val {r:g}" for r in rates)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, x in [(report["display"], report.get("numbers") or {}),
                    *report["baselines"].items()]:
        t = x.get("test_loss")
        cells = [name, f"{x['best_lr']:g}" if x.get("best_lr") else "—",
                 _num(x.get("lr_sensitivity")),
                 " ".join(f"{r:g}" for r in x.get("trains_at", [])) or "none",
                 interval_text(t) if t else "—",
                 *(_num((x.get("val_loss") or {}).get(f"{r:g}")) for r in rates)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _edge_line(report: dict) -> list[str]:
    """A warning naming every norm whose best rate is an end of the grid (``best_at_edge``)."""
    at_edge = [f"{name} ({x['best_lr']:g}, the {x['best_at_edge']} rate tried)"
               for name, x in [(report["display"], report.get("numbers") or {}),
                               *report["baselines"].items()] if x.get("best_at_edge")]
    if not at_edge:
        return []
    return ["**Best rate at the grid's edge**: " + ", ".join(at_edge) + ". The best rate may "
            "lie beyond the rates tried, so its loss and the comparisons above may understate "
            "it.", ""]


def markdown(report: dict) -> str:
    """report.md: the sentence first, then the evidence behind it."""
    placement = report.get("placement", "pre")  # reports before --placement: Pre
    out = [f"# {report['display']} under the lab's protocol ({report['budget']} budget)", "",
           f"`model.norm={report['norm']}` — {report['sentence']}", "",
           f"Placement tested: `model.placement={placement}`"
           + ("" if placement == "pre" else " (the baselines are the lab's norms in Pre)") + ".",
           ""]
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
                f"the bigram baseline. Losses in nats to {DIGITS} decimals; test loss: mean over "
                "the seeds (95 % CI: the t-interval of that mean; seeds: the lowest and highest "
                "seed).", "", *_loss_rows(report), "", *_edge_line(report)]
        b = report.get("token_baselines") or {}
        if b:
            out += [f"Validation tokens: unigram {_num(b['unigram'])}, bigram "
                    f"{_num(b['bigram'])} nats.", ""]
        diff = report.get("paired_vs_preln")
        if diff:
            out += ["Paired with Pre-LN (same seed: same initialisation draw and data order), "
                    f"test loss difference: {interval_text(diff, signed=True)}; per seed: "
                    + ", ".join(f"{s}: {_num(v, signed=True)}"
                                for s, v in diff["per_seed"].items()) + ".", ""]
        if report.get("figure"):
            out += [f"![learning rates]({report['figure']})", ""]
    if report.get("ladder"):
        out += _ladder_section(report)
    out += [f"Runs: {', '.join(report.get('runs', [])) or 'none'} (TensorBoard: "
            "`python -m trainer tensorboard` on this directory)."]
    return "\n".join(out) + "\n"


def _ladder_section(report: dict) -> list[str]:
    """``--budget ladder``: per rung the norm beside Pre-LN (the committed ladder), the paired
    gap, then the trends across rungs and the figure."""
    lad, name = report["ladder"], report["display"]

    def rate(x):
        if not x.get("best_lr"):
            return x.get("why") or "—"
        return f"{x['best_lr']:g}" + (f" ({x['why']})" if x.get("why") else "")

    def test(x):
        return interval_text(x["test_loss"]) if x.get("test_loss") else "—"

    out = ["## Across the ladder", "",
           f"Each rung: {name} under the protocol (the rate grid at seed 0, extended by the edge "
           "rule until its best rate is inside it, then the seeds at that best), beside the lab's "
           "Pre-LN on the same rung (the committed ladder, read by its rules: its best rate on "
           "the mean validation loss of the seeds run at every rate). Gap: the norm − Pre-LN, "
           "test loss, paired by seed.", "",
           f"| width | {name}: best rate | Pre-LN: best rate | {name}: LR sensitivity | "
           f"Pre-LN: LR sensitivity | {name}: test loss | Pre-LN: test loss | gap |",
           "|---|---|---|---|---|---|---|---|"]
    for width, r in lad["rungs"].items():
        mine, pre = r["norm"], r["Pre-LN"]
        out.append(f"| d = {width} | {rate(mine)} | {rate(pre)} | "
                   f"{_num(mine.get('lr_sensitivity'))} | {_num(pre.get('lr_sensitivity'))} | "
                   f"{test(mine)} | {test(pre)} | "
                   f"{interval_text(r['gap'], signed=True) if r.get('gap') else '—'} |")
    t = lad["trends"]
    out += ["", f"**Where it points**: {lad['where']}.", ""]
    for side, label in (("norm", name), ("Pre-LN", "Pre-LN")):
        fits = t.get(side) or {}
        power, slope = fits.get("best_rate_power"), fits.get("sensitivity_slope")
        out.append(f"- {label}: best rate ∝ width^k, k = {power['text'] if power else 'n/a'}; "
                   f"LR sensitivity per doubling of width {slope['text'] if slope else 'n/a'}")
    return out + [""]


def write(report: dict, out: Path) -> None:
    """report.json and report.md into ``out``."""
    write_json(out / rundir.REPORT_JSON, report)
    write_text(out / rundir.REPORT_MD, markdown(report))


def display(norm: str) -> str:
    return row(norm).name
