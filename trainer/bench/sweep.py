"""``python -m trainer bench sweep [SPEC]``: where a sweep's wall time goes, two ways.

Runs the sweep spec into temporary directories, each as its own ``python -m trainer sweep``
process, with a fresh compilation cache:

- ``baseline``: one process per variant and no compilation cache (``--no-reuse``,
  ``NORMLAB_XLA_CACHE=off``), the path sweeps took before worker processes and the cache;
- ``workers``: ``--parallel`` worker processes that run variants in turn, with the persistent
  XLA cache starting empty (only programs traced twice in the sweep hit: seeds of a variant);
- ``rerun`` (unless ``--no-rerun``): the workers path again on the cache the previous one left,
  as when a sweep is rerun, resumed, extended by seeds or reproduced.

For each: wall time, the share of the workers' time spent in train steps (sum of the runs'
``time.train_s`` over wall time x processes at once), the runs' own time phases summed, XLA
programs compiled and loaded from the cache; and whether every run's numbers agree with the
baseline's to the last bit (``reproduce``'s comparison, ``trainer.results.compare``, made
exact: every summary result and every curve but the wall-clock ones).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _sweep(spec: str, out: Path, parallel: int, env: dict, extra: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trainer", "sweep", "--config", spec,
                           "--out", str(out), "--parallel", str(parallel), *extra],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        from trainer.config import ConfigError

        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConfigError(f"bench sweep: the sweep failed ({out.name}): {tail}")
    return wall


def _path_report(out: Path, wall: float, parallel: int) -> dict:
    from trainer.results.run import load_runs

    runs = load_runs(out)
    train = sum(r.summary["time"]["train_s"] for r in runs)
    xla = [r.summary["compile_count"]["xla"] for r in runs]
    shares = sorted(r.summary["time"]["train_share"] for r in runs)
    phases = {k: round(sum(r.summary["time"][k] for r in runs), 2)
              for k in ("wall_s", "startup_s", "data_s", "compile_s", "eval_s", "checkpoint_s")}
    return {"wall_s": round(wall, 2), "runs": len(runs), "train_s": round(train, 2),
            "runs_sum": phases,  # each phase summed over the runs (process-seconds)
            "train_share": round(train / (wall * min(parallel, len(runs))), 4),
            "run_train_share": {"min": shares[0], "median": shares[len(shares) // 2]},
            "compiled": sum(x["compiled"] for x in xla), "loaded": sum(x["loaded"] for x in xla)}


def _agree(a_root: Path, b_root: Path) -> list[str]:
    """Differences between two sweeps' runs (empty: identical results)."""
    from trainer.results.compare import (Comparison, compare_curves, compare_summaries,
                                         tolerances)
    from trainer.results.run import load_runs

    a_runs = {r.name: r for r in load_runs(a_root)}
    b_runs = {r.name: r for r in load_runs(b_root)}
    if a_runs.keys() != b_runs.keys():
        return [f"different runs: {sorted(a_runs.keys() ^ b_runs.keys())}"]
    diffs = []
    for name, a in sorted(a_runs.items()):
        cmp = Comparison(tolerances(a.summary.get("steps") or 0), exact=True)
        compare_curves(a, b_runs[name], compare_summaries(a.summary, b_runs[name].summary, cmp))
        diffs += [f"{name}: {d}" for d in cmp.diffs]
    return diffs


def bench_sweep(spec: str, parallel: int, out: Path, extra: list[str], rerun: bool = True,
                workdir: str | None = None) -> dict:
    from trainer.atomic import write_json
    from trainer.machine import machine_identity, versions
    from trainer.sweep import load_spec

    load_spec(spec)  # a bad spec is one error line before anything runs
    report = {"spec": spec, "parallel": parallel, "overrides": extra, "paths": {}}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-", dir=workdir) as tmp:
        tmp = Path(tmp)
        cache = tmp / "xla-cache"
        plans = [("baseline", ["--no-reuse"], "off"), ("workers", [], str(cache))]
        if rerun:
            plans.append(("rerun", [], str(cache)))
        for name, flags, cache_env in plans:
            env = dict(os.environ, NORMLAB_XLA_CACHE=cache_env)
            root = tmp / name
            wall = _sweep(spec, root, parallel, env, [*flags, *extra])
            report["paths"][name] = _path_report(root, wall, parallel)
            print(f"bench sweep: {name}: {wall:.1f} s", file=sys.stderr, flush=True)
        for name in report["paths"]:
            if name != "baseline":
                diffs = _agree(tmp / "baseline", tmp / name)
                report["paths"][name]["identical_to_baseline"] = not diffs
                report["paths"][name]["differences"] = diffs[:20]
    base = report["paths"]["baseline"]["wall_s"]
    for path in report["paths"].values():
        path["speedup"] = round(base / path["wall_s"], 3)
    report["machine"] = {**machine_identity(), "versions": versions()}
    write_json(out, report)
    print(text(report, out))
    return report


def text(r: dict, out: Path) -> str:
    lines = [f"bench sweep {r['spec']} (--parallel {r['parallel']}) -> {out}",
             f"  {'path':9} {'wall s':>7} {'speedup':>7} {'train share':>11} "
             f"{'compiled':>8} {'loaded':>6}  identical"]
    for name, p in r["paths"].items():
        same = "-" if name == "baseline" else ("yes" if p["identical_to_baseline"] else "NO")
        lines.append(f"  {name:9} {p['wall_s']:7.1f} {p['speedup']:6.2f}x {p['train_share']:11.1%} "
                     f"{p['compiled']:8d} {p['loaded']:6d}  {same}")
    return "\n".join(lines)
