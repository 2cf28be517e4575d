"""``python -m trainer reproduce``: rerun finished runs from their saved config and compare.

``reproduce RUN_DIR [--out DIR] [--reuse] [--strict]`` trains ``RUN_DIR/config.yaml`` again into
``DIR`` (default ``runs/reproduce/<run name>``, outside ``results/``) and compares the two with
``trainer.results.compare`` (every summary value and curve; identity on the same code, packages
and machine, else a tolerance; ``--strict`` demands identity anyway). The verdict is printed and
written to ``DIR/reproduce.json``. A ``DIR`` that already exists is refused unless ``--reuse``
is given: then a finished reproduction there is compared again (an unfinished one resumed), after
checking that it was made by this checkout's code version.

``reproduce RESULTS_DIR [--sample N] [--seed S] [--parallel P] [--out DIR]`` reruns N of the
finished runs under RESULTS_DIR (default all; a sample is drawn at random with a printed seed, so
the same draw can be repeated), each in its own ``python -m trainer reproduce RUN --out
DIR/<relative path>`` subprocess, P at a time, and prints one row per run with its verdict and
largest differences. Exit 0 only when every row is IDENTICAL or WITHIN TOLERANCE.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trainer import rundir
from trainer.atomic import read_json, write_json
from trainer.config import ConfigError, load_config
from trainer.provenance import git_dirty, git_sha, short_sha
from trainer.results.compare import VERDICT_FILE, WALL_CLOCK, compare_runs, verdict
from trainer.results.run import Run, run_dirs

def _check(run_dir: Path) -> Run:
    if not run_dir.is_dir():
        raise ConfigError(f"run directory not found: {run_dir}")
    if not (run_dir / rundir.CONFIG).is_file():
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
                          f"{short_sha(meta.get('git_sha'))}, this checkout is {short_sha(here)}; "
                          f"delete it or choose another --out")
    if meta.get("git_dirty") or git_dirty():
        print(f"note: uncommitted changes (then or now): {out_dir} may have been made by other "
              f"code than this checkout's {short_sha(here)}", flush=True)


def default_out(run_dir: Path) -> Path:
    """Where a reproduction goes unless told: under the git-ignored ``runs/``, never in results/."""
    return Path("runs") / "reproduce" / run_dir.resolve().name


def reproduce(run_dir: str | Path, out: str | Path | None = None, progress: bool = True,
              reuse: bool = False, strict: bool = False) -> int:
    """Rerun ``run_dir`` into ``out`` (default ``default_out``) and compare; 0 = match, 1 = not.

    The verdict is printed and written to ``out/reproduce.json``.
    """
    from trainer.models import plugin
    from trainer.train.loop import run_training

    run_dir = Path(run_dir)
    original = _check(run_dir)
    cfg = load_config(run_dir / rundir.CONFIG)
    out_dir = Path(out) if out else default_out(run_dir)
    if out_dir.resolve() == run_dir.resolve():
        raise ConfigError("--out must differ from the run directory being reproduced")
    check_out_dir(out_dir, reuse)
    print(f"reusing the finished reproduction of {run_dir} in {out_dir}"
          if Run(out_dir).finished else f"reproducing {run_dir} -> {out_dir}", flush=True)
    plugin.seed_copy(run_dir, out_dir)  # a norm from outside the lab: the one it trained with
    argv = ["python", "-m", "trainer", "reproduce", str(run_dir), "--out", str(out_dir)]
    summary = run_training(cfg, out_dir, argv=argv, progress=progress)
    new = Run(out_dir, summary=summary)  # read after training: its files are final now

    steps = int(original.summary.get("steps") or cfg.train.steps)
    cmp, why = compare_runs(original, new, steps, strict)
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


# ---- a results directory ---------------------------------------------------------------------

PASS = ("IDENTICAL", "WITHIN TOLERANCE")


def find_runs(root: Path) -> tuple[list[Path], list[Path]]:
    """Finished and unfinished run directories under ``root`` (any depth), sorted."""
    finished, unfinished = [], []
    for run in run_dirs(root, skip=(rundir.CHECKPOINTS,)):
        (finished if Run(run).finished else unfinished).append(run)
    return finished, unfinished


def choose(runs: list[Path], sample: int | None, seed: int | None) -> tuple[list[Path], int | None]:
    """``sample`` runs drawn with ``seed`` (drawn here when None), or all runs; and the seed."""
    if sample is None:
        return runs, None
    if not 1 <= sample <= len(runs):
        raise ConfigError(f"--sample must be between 1 and {len(runs)} (the finished runs), "
                          f"got {sample}")
    if seed is None:
        seed = random.SystemRandom().randrange(2 ** 31)
    return sorted(random.Random(seed).sample(runs, sample)), seed


def reproduce_subprocess(run: Path, out: Path, log: Path, flags: list[str] = ()) -> dict:
    """Reproduce one run in a subprocess (its own TensorFlow, as a user would run it)."""
    cmd = [sys.executable, "-m", "trainer", "reproduce", str(run), "--out", str(out), *flags]
    t0 = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT).returncode
    row = {"rc": rc, "seconds": time.perf_counter() - t0}
    if rc in (0, 1):  # a comparison was made and written before the exit
        return {**row, **read_json(out / rundir.REPRODUCE)}
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    return {**row, "verdict": "ERROR", "text": lines[-1] if lines else f"exit code {rc}"}


def _cell(largest: dict | None) -> str:
    if not largest:
        return "0"
    step = f" step {largest['step']}" if largest.get("step") is not None else ""
    return f"{largest['relative']:.1e} ({largest['where']}{step})"


def table(rows: list[tuple[str, dict]]) -> str:
    """Markdown table: run, verdict, largest relative differences, minutes, reason."""
    out = ["| run | verdict | max rel. diff, losses | max rel. diff, diagnostics | min | reason |",
           "|---|---|---|---|---|---|"]
    for name, r in rows:
        largest = r.get("largest") or {}
        if r.get("verdict") == "MISMATCH":
            reason = r["mismatches"][0]
        elif r.get("verdict") == "ERROR":
            reason = r["text"]
        else:
            reason = "; ".join(r.get("reasons") or []) or "same code, packages and machine"
        out.append(f"| {name} | {r.get('verdict')} | {_cell(largest.get('loss'))} | "
                   f"{_cell(largest.get('diagnostic'))} | {r['seconds'] / 60:.1f} | "
                   f"{reason.replace('|', '/')} |")
    return "\n".join(out)


def reproduce_all(root: Path, out: str | Path | None = None, sample: int | None = None,
                  seed: int | None = None, parallel: int = 1, reuse: bool = False,
                  strict: bool = False) -> int:
    """Reproduce the runs under ``root`` into ``out`` (default ``runs/reproduce/<root name>``);
    print the table and return 0 only when every run passes."""
    if parallel < 1:
        raise ConfigError(f"--parallel must be at least 1, got {parallel}")
    runs, unfinished = find_runs(root)
    if not runs:
        raise ConfigError(f"no finished runs under {root} (a run directory holds config.yaml "
                          f"and a summary.json with status completed or diverged)")
    chosen, seed = choose(runs, sample, seed)
    out_root = Path(out) if out else Path("runs") / "reproduce" / root.resolve().name
    outs = {run: out_root / run.relative_to(root) for run in chosen}
    for run_out in outs.values():  # refuse before anything starts, not run by run
        check_out_dir(run_out, reuse)
    drawn = f", drawn at random with --seed {seed}" if seed is not None else ""
    print(f"reproducing {len(chosen)} of {len(runs)} finished runs under {root}{drawn} "
          f"into {out_root}, {parallel} at a time"
          + (f" ({len(unfinished)} unfinished runs skipped)" if unfinished else ""), flush=True)
    flags = [*(["--reuse"] if reuse else []), *(["--strict"] if strict else [])]
    rows: dict[Path, dict] = {}

    def work(run: Path) -> None:
        rel = run.relative_to(root)
        rows[run] = r = reproduce_subprocess(run, outs[run], out_root / f"{rel}.log", flags)
        print(f"[{len(rows)}/{len(chosen)}] {rel}: {r.get('verdict')} "
              f"({r['seconds'] / 60:.1f} min)", flush=True)

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(work, chosen))
    print(table([(str(run.relative_to(root)), rows[run]) for run in chosen]))
    passed = sum(rows[run].get("verdict") in PASS for run in chosen)
    print(f"{passed}/{len(chosen)} runs reproduced (IDENTICAL or WITHIN TOLERANCE); logs in "
          f"{out_root}/<run>.log")
    return 0 if passed == len(chosen) else 1


def reproduce_path(target: Path, out: str | Path | None = None, sample: int | None = None,
                   seed: int | None = None, parallel: int | None = None, reuse: bool = False,
                   strict: bool = False) -> int:
    """The ``reproduce`` command: one run directory (it holds config.yaml), or every run of a
    results directory."""
    if (target / rundir.CONFIG).is_file() or not target.is_dir():
        if (sample, seed, parallel) != (None, None, None):
            raise ConfigError(f"--sample, --seed and --parallel apply to a results directory; "
                              f"{target} is a single run")
        return reproduce(target, out, reuse=reuse, strict=strict)
    return reproduce_all(target, out, sample, seed, 1 if parallel is None else parallel, reuse,
                         strict)
