"""The extra seeds (pre-registration 2's rule), the runner: a plan's new seeds trained into ``ROOT/extra/``
(each from its seed-0 run's own config.yaml, only ``train.seed`` changed), the runs its
analyses read reproduced where their checkpoints are not here, and each analysis re-run on the
runs its CSV did not cover (``extra/RELPATH``). The plan itself, and the judging on all seeds:
``trainer.findings.extra``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.config import ConfigError, load_config
from trainer.findings.reference import EXTRA, Reference
from trainer.provenance import read_stamp
from trainer.rundir import CONFIG, analysis_output

if TYPE_CHECKING:
    from trainer.findings.extra import Plan

def run_plan(ref: Reference, plan: Plan, parallel: int) -> None:
    from trainer.faults import writing
    from trainer.results.summarize import summarize
    from trainer.sweep import Variant, run_variants

    root = ref.root / EXTRA
    by_group: dict = {}
    for name, source in plan.runs.items():
        group, run = name.rsplit("/", 1)  # GROUP may be a path: scale/inst_lr
        seed = int(run.rsplit("=", 1)[1])
        base = ref.root / source / CONFIG
        variant = Variant(run, [f"train.seed={seed}"], base=base)
        by_group.setdefault(group, []).append((variant, load_config(base, variant.overrides)))
    for group, pairs in by_group.items():
        variants, configs = zip(*pairs)
        run_variants(root / group, f"extra {group}", variants[0].base, list(variants),
                     list(configs), parallel)
        with writing("sweep tables", root / group):
            summarize(root / group)
    _reproduce_for_analyses(ref, plan, parallel)
    for relpath, todo in plan.analyses.items():
        _analyse(ref, relpath, todo)


def _reproduce_for_analyses(ref: Reference, plan: Plan, parallel: int) -> None:
    """Reproduce, ``parallel`` at a time, the runs without a checkpoint that the analyses still
    to write read (each once, however many analyses read it), so ``_analyse`` finds them."""
    from trainer.launch import run_local

    names = sorted({name for relpath, todo in plan.analyses.items()
                    if relpath != analysis_output("grad-profile") and not (ref.root / EXTRA / relpath).is_file()
                    for name in todo})
    commands = [command for name in names if (command := _checkpoint(ref, name)[1])]
    if not commands:
        return
    codes = run_local(commands, parallel, desc="extra seeds: reproduce", reuse=False)
    failed = [command for command, code in zip(commands, codes) if code != 0]
    if failed:
        raise ConfigError(_not_reproduced(failed[0][4], Path(failed[0][6]), len(failed)))


def _not_reproduced(source: str, out: Path, count: int) -> str:
    """One error line for reproductions that failed: a mismatch (its verdict's text, which names
    what differs, e.g. the machine's instruction sets) is not resumed by rerunning."""
    from trainer.atomic import read_json
    from trainer.reproduce import VERDICT_FILE

    more = f" (and {count - 1} more)" if count > 1 else ""
    text = read_json(out / VERDICT_FILE).get("text")
    if text:
        return (f"extra seeds: {source}{more} did not reproduce in {out}, so its checkpoint cannot "
                f"stand in for the run's: {text}")
    return f"extra seeds: reproducing {source}{more} failed (rerun the same command to resume)"


def _analyse(ref: Reference, relpath: str, todo: list) -> None:
    """Re-run the analysis that wrote ``relpath`` (its stamp's command) on ``todo`` into
    ``extra/``; runs without checkpoints are reproduced into ``runs/ckpt/`` first."""
    out = ref.root / EXTRA / relpath
    if not todo or out.is_file():
        return
    command = list((read_stamp(ref.root / relpath) or {}).get("command", []))
    if len(command) < 2 or command[0] != "analyze":
        raise ConfigError(f"extra seeds: {relpath} has no analysis command on record")
    kind, args = command[1], command[2:]
    first = next((i for i, a in enumerate(args) if a.startswith("--")), len(args))
    options = _without(args[first:], ("--out", "--seeds"))  # its own options, kept
    if relpath == analysis_output("grad-profile"):  # no runs: its seeds
        targets = ["--seeds", *map(str, todo)]
    else:  # the run directories it read, replaced by the ones it lacks
        targets = [str(_checkpointed(ref, name)) for name in todo]
    subprocess.run([sys.executable, "-m", "trainer", "analyze", kind, *targets, *options,
                    "--out", str(out.parent)], check=True)


def _without(options: list[str], names: tuple[str, ...]) -> list[str]:
    """``options`` without the named ones and their values."""
    out, skip = [], False
    for a in options:
        if a.startswith("--"):
            skip = a.split("=", 1)[0] in names
        if not skip:
            out.append(a)
    return out


def _checkpointed(ref: Reference, name: str) -> Path:
    """A run directory with the final checkpoint of run GROUP/RUN, reproduced first if need be
    (``_checkpoint``)."""
    out, command = _checkpoint(ref, name)
    if command:
        subprocess.run(command, check=True)
    return out


def _checkpoint(ref: Reference, name: str) -> tuple[Path, list[str] | None]:
    """Where the final checkpoint of run GROUP/RUN is, and the command that makes it (None when
    it is there): its own run directory (an extra run made here, or a base run made on this
    machine), else ``runs/ckpt/SETTING/GROUP/RUN`` reproduced (verified against the committed
    curves by ``reproduce``: done once its verdict passes)."""
    from trainer.atomic import read_json
    from trainer.reproduce import PASS, VERDICT_FILE

    group, run = name.split("/", 1)
    for path in (ref.root / EXTRA / group / run, ref.root / group / run):
        if path.is_dir() and list(path.glob("checkpoints/*.index")):
            return path, None
    source = ref.root / group / run
    if not source.is_dir():
        source = ref.root / EXTRA / group / run
    out = Path("runs/ckpt") / ref.setting / group / run
    if read_json(out / VERDICT_FILE).get("verdict") in PASS:
        return out, None
    resume = ["--reuse"] if out.is_dir() else []  # an unfinished one resumes, a mismatch is shown
    return out, [sys.executable, "-m", "trainer", "reproduce", str(source), "--out", str(out),
                 *resume]
