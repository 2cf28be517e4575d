"""The bench report: targets (measured, target, pass), the text summary, and the docs table.

The performance table of ``PAGE`` is ``markdown(report)`` of a committed
``results/bench/<name>.json``, pasted between ``<!-- bench:<name> -->`` and ``<!-- /bench -->``
by ``python -m trainer bench report results/bench/<name>.json --readme docs/performance.md``
(a test checks the two agree).
"""

from __future__ import annotations

import re

GIB = 1024 ** 3
END_MARK = "<!-- /bench -->"
PAGE = "docs/performance.md"  # the page holding the table, relative to the repository root

# name -> (target, "min" or "max"): the performance goals of docs/performance.md.
GOALS = {"throughput_vs_pad_to_max": (2.0, "min"), "pad_fraction": (0.10, "max"),
         "telemetry_overhead": (0.05, "max"), "mfu": (0.45, "min"), "peak_rss": (3.0, "max")}


def target(measured, goal, passed, unit: str = "", note: str = "") -> dict:
    """One row of the ``targets`` table."""
    d = {"measured": measured, "target": goal, "pass": bool(passed)}
    if unit:
        d["unit"] = unit
    if note:
        d["note"] = note
    return d


def _goal(name: str, measured: float, unit: str, note: str) -> dict:
    goal, kind = GOALS[name]
    return target(measured, goal, measured >= goal if kind == "min" else measured <= goal,
                  unit, note)


def targets(r: dict) -> dict:
    """The ``targets`` table of an assembled report ``r``."""
    t, cc, tel = r["throughput"], r["compile_count"], r["telemetry_overhead"]
    skipped = "" if r["bench_options"]["pad_to_max"] else " (SKIPPED: --no-pad-to-max)"
    return {
        "throughput_vs_pad_to_max": _goal(
            "throughput_vs_pad_to_max", t["bucketed_over_pad_to_max"], "x",
            "bucketed real tokens/s / pad-to-max real tokens/s" + skipped),
        "compilations": target(cc["total"], cc["bound"], cc["total"] <= cc["bound"], "count",
                               "train + eval tracing counts <= len(buckets) + eval shapes"
                               + (" + 1 shared update program" if cc["shared_update"] else "")),
        "pad_fraction": _goal("pad_fraction", r["pad_fraction"], "fraction",
                              "train epoch pad fraction, " + str(r["config"]["data"]["source"])),
        "telemetry_overhead": _goal(
            "telemetry_overhead", tel["overhead_every_step"], "fraction",
            f"median of {len(tel['pairs'])} interleaved on/off pairs; log-steps-only design "
            f"projects {tel['overhead_log_steps_only_projected']:.4f}"),
        "mfu": _goal("mfu", r["mfu"], "fraction",
                     "model FLOPs/s / measured XLA matmul peak (best size, best rep)"),
        "peak_rss": _goal("peak_rss", r["peak_rss_gib"], "GiB",
                          f"ru_maxrss of `trainer train` with this config for "
                          f"{r['train_run']['steps']} steps: every train and eval shape compiled"),
    }


def summary_text(r: dict, out) -> str:
    """The few lines ``bench`` prints."""
    t, tel, st = r["throughput"], r["telemetry_overhead"], r["step_time_s"]
    lines = [f"bench {r['command']['line']}",
             f"  buckets {r['buckets']}  pad fraction {r['pad_fraction']:.3f}  xla={r['xla']}",
             f"  real tokens/s {t['real_tokens_per_sec']:,.0f}  padded tokens/s "
             f"{t['padded_tokens_per_sec']:,.0f}  (telemetry={t['telemetry']})",
             f"  pad-to-max real tokens/s {t['pad_to_max_real_tokens_per_sec']:,.0f}  "
             f"ratio {t['bucketed_over_pad_to_max']:.2f}x",
             f"  step time median {st['median'] * 1e3:.1f} ms  p10 {st['p10'] * 1e3:.1f}  "
             f"p90 {st['p90'] * 1e3:.1f}",
             f"  compilations {r['compile_count']['total']} (bound {r['compile_count']['bound']})",
             f"  telemetry overhead {tel['overhead_every_step'] * 100:.1f}% every step (median "
             f"of {len(tel['pairs'])} pairs), {tel['overhead_log_steps_only_projected'] * 100:.1f}%"
             f" projected log-steps-only",
             f"  matmul peak {r['matmul_peak']['gflops_best']:.1f} GFLOP/s (n={r['matmul_peak']['n_best']})"
             f"  model {r['flops']['model_flops_per_sec'] / 1e9:.1f} GFLOP/s  MFU {r['mfu'] * 100:.1f}%",
             f"  peak RSS {r['peak_rss_gib']:.2f} GiB (training run, {r['train_run']['steps']} "
             f"steps); bench process {r['bench_process_peak_rss_gib']:.2f} GiB",
             "  targets:"]
    for name, tg in r["targets"].items():
        lines.append(f"    [{'PASS' if tg['pass'] else 'FAIL'}] {name}: "
                     f"{tg['measured']:.4g} vs {tg['target']}")
    lines.append(f"  wrote {out}")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %"


def _rows(r: dict) -> list[tuple[str, str, str]]:
    """(what, measured, target name) of each table row."""
    t, cc, tel = r["throughput"], r["compile_count"], r["telemetry_overhead"]
    ratios = [p["ratio"] - 1.0 for p in tel["pairs"]]
    sizes = ", ".join(str(s["n"]) for s in r["matmul_peak"]["sizes"])
    dtype = r["matmul_peak"].get("dtype", "float32")  # reports before the field: fp32 only
    shapes = cc["train"] - cc["shared_update"]
    shared = " + 1 shared update" if cc["shared_update"] else ""
    return [
        ("real tokens/s, bucketed vs pad-to-max",
         f"{t['real_tokens_per_sec']:,.0f} vs {t['pad_to_max_real_tokens_per_sec']:,.0f}: "
         f"**{t['bucketed_over_pad_to_max']:.2f}×**", "throughput_vs_pad_to_max"),
        ("XLA compilations", f"{shapes} train shapes{shared} + {cc['eval']} eval = "
         f"**{cc['total']}** (bound {cc['bound']}: one per bucket and eval shape"
         f"{', plus the shape-independent update' if shared else ''})", "compilations"),
        (f"pad fraction, {r['config']['data']['source']} corpus",
         f"**{_pct(r['pad_fraction'])}** (pad-to-max: {_pct(r['pad_to_max']['pad_fraction'])})",
         "pad_fraction"),
        ("telemetry overhead", f"**{_pct(tel['overhead_every_step'])}** of step time: median of "
         f"{len(ratios)} interleaved on/off pairs (pairs {_pct(min(ratios))} to "
         f"{_pct(max(ratios))})", "telemetry_overhead"),
        ("model-FLOPs utilisation",
         f"{r['flops']['model_flops_per_sec'] / 1e9:.1f} GFLOP/s of model FLOPs ÷ "
         f"{r['matmul_peak']['gflops_best']:.0f} GFLOP/s {dtype} XLA matmul "
         f"peak (best of n = "
         f"{sizes}) = **{_pct(r['mfu'])}**", "mfu"),
        ("peak RSS of a training run", f"**{r['peak_rss_gib']:.2f} GiB** (`trainer train` in a "
         f"child process until every bucket shape has been compiled: {r['train_run']['steps']} "
         f"steps; the bench process itself {r['bench_process_peak_rss_gib']:.2f} GiB)",
         "peak_rss"),
    ]


def _goal_text(name: str, tg: dict) -> str:
    if name == "compilations":
        return "≤ buckets + eval shapes"
    goal, unit = tg["target"], tg.get("unit")
    value = {"x": f"{goal:g}×", "fraction": f"{goal * 100:g} %", "GiB": f"{goal:g} GiB"}[unit]
    return ("≥ " if GOALS[name][1] == "min" else "≤ ") + value


def markdown(r: dict) -> str:
    """The performance table (``PAGE``) of report ``r``, with its machine and command."""
    m, st, c = r["machine"], r["step_time_s"], r["command"]
    lines = [f"Measured on {m['cpu_model']} ({m['usable_cores']} usable cores"
             f"{', ' + ', '.join(m['accelerators']) if m['accelerators'] else ''}), TensorFlow "
             f"{m['versions']['tensorflow']}, Keras {m['versions']['keras']}: `{c['line']}` "
             f"({r['throughput']['steps_timed']} timed steps per measurement, "
             f"{r['wall_s']:.0f} s wall). Step time: median {st['median'] * 1e3:.0f} ms (p10 "
             f"{st['p10'] * 1e3:.0f}, p90 {st['p90'] * 1e3:.0f}).",
             "", "| what | measured | target | |", "|---|---|---|---|"]
    for what, measured, name in _rows(r):
        tg = r["targets"][name]
        lines.append(f"| {what} | {measured} | {_goal_text(name, tg)} | "
                     f"{'pass' if tg['pass'] else '**FAIL**'} |")
    return "\n".join(lines) + "\n"


def _block_re(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- bench:{re.escape(name)} -->\n)(.*?)({re.escape(END_MARK)})", re.S)


def readme_block(text: str, name: str) -> str | None:
    """What ``text`` holds between ``<!-- bench:<name> -->`` and ``<!-- /bench -->``."""
    m = _block_re(name).search(text)
    return m.group(2) if m else None


def replace_block(text: str, name: str, block: str) -> str:
    """``text`` with its ``bench:<name>`` block replaced by ``block``."""
    if readme_block(text, name) is None:
        raise ValueError(f"no '<!-- bench:{name} -->' ... '{END_MARK}' block")
    return _block_re(name).sub(lambda m: m.group(1) + block + m.group(3), text, count=1)
