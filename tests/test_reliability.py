"""Reliability: exact resume after SIGKILL or SIGTERM, corrupt checkpoints, full disks, sweeps
sharing a directory, divergence as a result, bad input as one clear line.

The faults are real: signals to real processes, truncated files, a small tmpfs, real locks.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TINY, run_cli, tiny_spec
from trainer import rundir
from trainer.config import load_config
from trainer.faults import EXIT_BUSY, EXIT_IO, EXIT_STOPPED
from trainer.results.events import read_scalars
from trainer.sweep import expand_variants, load_spec
from trainer.train.checkpoint import history_at, make_checkpoint, resume
from trainer.train.loop import run_training
from trainer.train.rundir import RunDirError

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "trainer", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _one_error_line(proc, code: int = 2) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == code and len(lines) == 1 and lines[0].startswith("error:"), \
        (proc.returncode, proc.stderr)
    return lines[0]


def _assert_same_run(a: Path, b: Path, steps: int) -> None:
    """Same summary and every curve (but wall-clock) as the other run; each step logged once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for key in ("status", "steps", "final_eval_loss", "best_eval_loss", "max_grad_norm", "probes",
                "last_finite"):
        assert sa[key] == sb[key], key
    for group in ("train", "eval"):
        ka, kb = read_scalars(a / group), read_scalars(b / group)
        assert ka.keys() == kb.keys()
        for tag in ka:
            if tag != "tokens_per_sec":  # wall-clock, not a result
                assert ka[tag] == kb[tag], (group, tag)
    # no duplicated steps in the raw event records either (TensorBoard shows each step once)
    acc = EventAccumulator(str(a / "train"), size_guidance={"tensors": 0})
    acc.Reload()
    logged = [e.step for e in acc.Tensors("loss")]
    assert logged == sorted(set(logged)) == list(range(steps))


# The fault tests share one uninterrupted run to compare with.
FAULT = [*TINY, "train.steps=20", "train.checkpoint_every=4", "train.eval_every=5"]


def _train_cmd(workdir: Path) -> list[str]:
    return [sys.executable, "-m", "trainer", "train", "--quiet", "--workdir", str(workdir), *FAULT]


def _signal_when(workdir: Path, marker: str, sig=signal.SIGTERM) -> tuple[int, str]:
    """Start a run, send ``sig`` once ``workdir/marker`` exists; returns (exit code, stderr)."""
    proc = subprocess.Popen(_train_cmd(workdir), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not (workdir / marker).exists():
        assert proc.poll() is None and time.time() < deadline, "run ended before the signal"
        time.sleep(0.02)
    proc.send_signal(sig)
    return proc.wait(timeout=240), proc.stderr.read()


def _ckpt_numbers(run: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in (run / "checkpoints").glob("ckpt-*.index"))


# The tests that compare with the shared uninterrupted run go to one xdist worker (--dist
# loadgroup, setup.cfg), so it is trained once, not once per worker.
SHARES_CLEAN_RUN = pytest.mark.xdist_group("test_reliability_clean_run")


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("clean") / "run"
    assert subprocess.run(_train_cmd(run), cwd=ROOT, capture_output=True).returncode == 0
    return run


@pytest.mark.slow
def test_sigkill_then_resume_matches_uninterrupted_run(tmp_path):
    overrides = [*TINY, "train.steps=30", "train.checkpoint_every=3", "train.eval_every=5"]
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    cmd = [sys.executable, "-m", "trainer", "train", "--quiet", "--workdir", str(killed), *overrides]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (killed / "checkpoints" / "ckpt-6.index").exists():
        assert proc.poll() is None and time.time() < deadline, "run ended before the kill"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "summary.json").exists(), "the kill came too late to test resuming"

    assert subprocess.run(cmd, cwd=ROOT, capture_output=True).returncode == 0
    assert _cli("train", "--quiet", "--workdir", str(clean), *overrides).returncode == 0
    _assert_same_run(killed, clean, 30)


@SHARES_CLEAN_RUN  # SIGTERM in the quick tier: one exact-resume check a developer always runs
@pytest.mark.parametrize("sig", [signal.SIGTERM,
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_preempted_run_checkpoints_at_that_step_and_resumes_identically(tmp_path, clean_run, sig):
    run = tmp_path / "run"
    rc, err = _signal_when(run, "checkpoints/ckpt-4.index", sig)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == EXIT_STOPPED and len(lines) == 1, (rc, err)
    step = int(lines[0].split("stopped at step ")[1].split(";")[0])
    assert lines[0] == f"stopped at step {step}; rerun the same command to resume"
    assert 4 <= step < 20 and _ckpt_numbers(run)[-1] == step  # checkpointed where it stopped
    assert history_at(run / "checkpoints" / f"ckpt-{step}")["step"] == step  # and its history
    assert not (run / "summary.json").exists()
    assert subprocess.run(_train_cmd(run), cwd=ROOT, capture_output=True).returncode == 0
    _assert_same_run(run, clean_run, 20)


@pytest.mark.slow
@SHARES_CLEAN_RUN
def test_unreadable_newest_checkpoint_falls_back_to_the_older_one(tmp_path, clean_run):
    run = tmp_path / "run"
    assert _signal_when(run, "checkpoints/ckpt-8.index")[0] == EXIT_STOPPED
    older, newest = _ckpt_numbers(run)
    ckpts = run / "checkpoints"
    # The same state with every checkpoint damaged: refused, nothing deleted.
    broken = tmp_path / "broken"
    shutil.copytree(run, broken)
    for data in (broken / "checkpoints").glob("ckpt-*.data-*"):
        os.truncate(data, data.stat().st_size // 2)
    before = {p: p.read_bytes() for p in broken.rglob("*") if p.is_file()}
    line = _one_error_line(subprocess.run(_train_cmd(broken), cwd=ROOT, capture_output=True,
                                          text=True))
    assert "no readable checkpoint" in line and f"ckpt-{newest}" in line and f"ckpt-{older}" in line
    assert {p: p.read_bytes() for p in broken.rglob("*") if p.is_file()} == before

    data = next(ckpts.glob(f"ckpt-{newest}.data-*"))
    os.truncate(data, data.stat().st_size // 2)  # what a disk error or a cut copy leaves
    (ckpts / f"ckpt-{newest + 1}_temp").mkdir()  # what a save cut short leaves
    proc = subprocess.run(_train_cmd(run), cwd=ROOT, capture_output=True, text=True)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 0 and len(lines) == 1, proc.stderr
    assert f"ckpt-{newest}.* is unreadable" in lines[0] and f"from ckpt-{older}" in lines[0]
    assert not list(ckpts.glob("*_temp*"))
    assert (ckpts / "unreadable" / data.name).exists()  # kept for inspection, out of the way
    _assert_same_run(run, clean_run, 20)  # curves past the older checkpoint were redone once


@pytest.mark.slow
@SHARES_CLEAN_RUN
def test_disk_full_during_a_checkpoint_then_resume_after_freeing_space(tmp_path, clean_run):
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("needs `mount -t tmpfs` (root) for a real full disk")
    try:
        run = disk / "run"
        assert _signal_when(run, "checkpoints/ckpt-4.index")[0] == EXIT_STOPPED
        ckpts = run / "checkpoints"
        last = {p.name: p.read_bytes() for p in ckpts.glob("ckpt-*") if p.is_file()}
        # Leave room for curves and small JSON, not for a checkpoint (~0.5 MB here).
        st = os.statvfs(disk)
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 256 * 1024))
        line = _one_error_line(subprocess.run(_train_cmd(run), cwd=ROOT, capture_output=True,
                                              text=True), EXIT_IO)
        assert line.startswith(f"error: cannot write checkpoint ({ckpts / 'ckpt-'}")
        assert line.endswith("No space left on device"), line
        for name, data in last.items():  # the last complete checkpoints are intact
            assert (ckpts / name).read_bytes() == data, name

        filler.unlink()
        proc = subprocess.run(_train_cmd(run), cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert not list(ckpts.glob("*_temp*"))
        _assert_same_run(run, clean_run, 20)
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_forced_divergence_is_a_result(tmp_path):
    cfg = load_config(None, [*TINY, "model.norm=none", "model.residual=false", "train.lr=1e6",
                             "train.clip_norm=0", "train.warmup_steps=0", "train.steps=12",
                             "train.checkpoint_every=1"])
    summary = run_training(cfg, tmp_path / "div", argv=["test"], progress=False)
    assert summary["status"] == "diverged"
    step = summary["diverged_step"]
    assert 0 < step < 12 and summary["last_finite"]["step"] == step - 1
    assert summary["final_eval_loss"] is None
    # the last finite checkpoint is kept, nothing after it
    ckpts = sorted(int(p.stem.split("-")[1]) for p in (tmp_path / "div/checkpoints").glob("*.index"))
    assert ckpts[-1] == step
    # rerunning a diverged run is a no-op that returns the same result
    assert run_training(cfg, tmp_path / "div", argv=["test"], progress=False) == summary


def test_loss_upper_bound_counts_as_divergence(tmp_path):
    cfg = load_config(None, [*TINY, "train.loss_upper_bound=1.0"])
    summary = run_training(cfg, tmp_path / "r", argv=["test"], progress=False)
    assert summary["status"] == "diverged" and summary["diverged_step"] == 0


def test_run_dir_with_other_config_is_refused(tmp_path):
    cfg = load_config(None, TINY)
    run_training(cfg, tmp_path / "r", argv=["test"], progress=False)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "r").rglob("*") if p.is_file()}
    other = load_config(None, [*TINY, "model.norm=batch"])
    with pytest.raises(RunDirError, match="different config.*--workdir"):
        run_training(other, tmp_path / "r", argv=["test"], progress=False)
    after = {p: p.stat().st_mtime_ns for p in (tmp_path / "r").rglob("*") if p.is_file()}
    assert before == after  # nothing overwritten


@pytest.mark.parametrize("make_args,fragment", [
    (lambda d: ["data.source=files", f"data.files={d}/missing.txt"], "not found"),
    (lambda d: ["data.source=files", f"data.files={d}/latin1.txt"], "latin1.txt"),
    (lambda d: ["data.source=files", f"data.files={d}/blank.txt"], "empty"),
    (lambda d: ["data.source=files", "data.format=json", f"data.files={d}/rows.jsonl",
                "data.text_column=body"], "body"),
    (lambda d: ["model.residual=rezero", "model.placement=post"], "rezero"),
    (lambda d: ["data.vocab_size=100"], "vocab_size"),
])
def test_bad_input_cli_one_line_nothing_written(tmp_path, make_args, fragment):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 cr\xe8me br\xfbl\xe9e\n".encode("latin-1") * 50)
    (tmp_path / "blank.txt").write_text("\n   \n\n")
    (tmp_path / "rows.jsonl").write_text('{"text": "hello world"}\n' * 20)
    workdir = tmp_path / "run"
    line = _one_error_line(run_cli("train", "--workdir", workdir, *TINY, *make_args(tmp_path)))
    assert fragment in line
    assert not workdir.exists()


def test_unwritable_results_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where a directory should be")
    line = _one_error_line(run_cli("train", "--workdir", blocker / "run", *TINY))
    assert "cannot write" in line


def test_locked_run_dir_is_refused(tmp_path):
    import fcntl

    cfg = load_config(None, TINY)
    run = tmp_path / "r"
    run.mkdir()
    with open(run / ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        with pytest.raises(RunDirError, match="another process"):
            run_training(cfg, run, argv=["test"], progress=False)


@pytest.mark.parametrize("text,fragment", [
    ("grid: [1, 2]\n", "malformed"),
    ("base: ../base.yaml\ngrid: {}\n", "non-empty 'grid:'"),
    ("grid:\n  model.norm: layer\n", "malformed"),
    ("grid:\n  model.norm: []\n", "non-empty list"),
    ("- just\n- a list\n", "mapping"),
    ("grid:\n  model.norm: [layer]\nsedes: [0]\n", "malformed"),
    ("grid:\n  model.norm: [layer]\nname: ../../escape\n", "name"),
    ("grid:\n  model.norm: ['../../x']\n", "unsafe"),
])
def test_malformed_sweep_spec(tmp_path, text, fragment):
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    with pytest.raises(Exception, match=fragment):
        expand_variants(load_spec(spec)[0])
    line = _one_error_line(run_cli("sweep", "--config", spec, "--out", tmp_path / "out"))
    assert fragment in line
    assert not (tmp_path / "out").exists()


def _spec(tmp_path: Path, norms: str) -> Path:
    return tiny_spec(tmp_path / "spec.yaml", f"  model.norm: [{norms}]\n")


def _trained_once(run: Path, steps: int) -> bool:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "train"), size_guidance={"tensors": 0})
    acc.Reload()
    return [e.step for e in acc.Tensors("loss")] == list(range(steps))


@pytest.mark.slow
def test_sweep_waits_for_a_variant_running_elsewhere_and_runs_what_it_left(tmp_path):
    spec, out = _spec(tmp_path, "layer"), tmp_path / "out"
    run = out / "norm=layer"
    run.mkdir(parents=True)
    with open(run / ".lock", "a+") as held:  # another live process writing this variant
        fcntl.flock(held, fcntl.LOCK_EX)
        line = _one_error_line(run_cli("train", "--workdir", run, *TINY), EXIT_BUSY)
        assert "another process" in line
        proc = _cli("sweep", "--config", str(spec), "--out", str(out), "--no-wait")
        assert proc.returncode == EXIT_STOPPED, proc.stderr
        assert "1 variant(s) left running elsewhere (norm=layer)" in proc.stderr
        assert not (out / "summary.md").exists()  # tables only once every variant has ended

        log = tmp_path / "sweep.log"
        with open(log, "w") as f:
            sweep = subprocess.Popen([sys.executable, "-m", "trainer", "sweep", "--config",
                                      str(spec), "--out", str(out)], cwd=ROOT, stdout=f, stderr=f)
        deadline = time.time() + 240
        while "waiting for 1 variant(s) running elsewhere: norm=layer" not in log.read_text():
            assert sweep.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.1)
    # The other process let go without finishing: the waiting sweep runs the variant itself.
    assert sweep.wait(timeout=300) == 0, log.read_text()
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert "norm=layer" in (out / "summary.md").read_text()


def _start_sweep(tmp_path, norms: str, marker: str, stdout):
    """Start a sweep over ``norms`` in the background; return once ``out/marker`` exists."""
    spec, out = _spec(tmp_path, norms), tmp_path / "out"
    cmd = [sys.executable, "-m", "trainer", "sweep", "--config", str(spec), "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not (out / marker).exists():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    return proc, out, cmd


@pytest.mark.slow
def test_two_sweeps_sharing_a_results_dir_both_succeed(tmp_path):
    # its first variant is running once that variant's config.yaml exists
    first, out, cmd = _start_sweep(tmp_path, "layer, dyt, rms", "norm=layer/config.yaml",
                                   subprocess.PIPE)
    second = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    out1, err1 = first.communicate(timeout=600)
    assert first.returncode == 0, err1[-3000:]
    assert second.returncode == 0, second.stderr[-3000:]
    runs = ["norm=dyt", "norm=layer", "norm=rms"]
    assert sorted(p.parent.name for p in out.glob("*/summary.json")) == runs
    for r in runs:
        assert json.loads((out / r / "summary.json").read_text())["status"] == "completed"
        assert _trained_once(out / r, 6), r  # each step trained and logged once, by one process
    for stdout in (out1, second.stdout):  # both print the full table
        assert all(r in stdout for r in runs)


@SHARES_CLEAN_RUN
@pytest.mark.slow
def test_submitit_requeues_a_preempted_job_which_resumes_identically(tmp_path, clean_run):
    from submitit.local.local import LocalJobEnvironment

    from trainer.launch import job_codes, submit_jobs

    run = tmp_path / "run"
    [job] = submit_jobs([_train_cmd(run)], tmp_path, "local", {})
    deadline = time.time() + 240
    while not (run / "checkpoints" / "ckpt-4.index").exists():
        assert not job.done() and time.time() < deadline, "job ended before the pre-emption"
        time.sleep(0.05)
    # Pre-empt as SLURM does: submitit's signal (USR2) to the job's process, a child of the
    # local launcher's controller.
    controller = job._process.pid
    [task] = Path(f"/proc/{controller}/task/{controller}/children").read_text().split()
    os.kill(int(task), LocalJobEnvironment._usr_sig())
    assert job_codes([job]) == [0]
    # Two training processes wrote curves (submitit truncates the job's log on requeue, so
    # the event files are the witness): the first stopped at its checkpoint, the second resumed.
    assert len(list((run / "train").glob("events.out.tfevents.*"))) == 2
    _assert_same_run(run, clean_run, 20)


@pytest.mark.slow
def test_sigterm_to_a_sweep_stops_its_variants_resumably(tmp_path):
    # its first variant is training once that variant has eval curves
    sweep, out, cmd = _start_sweep(tmp_path, "layer, dyt", "norm=layer/eval", subprocess.DEVNULL)
    sweep.send_signal(signal.SIGTERM)  # only the sweep, as Kubernetes does
    assert sweep.wait(timeout=300) == EXIT_STOPPED, sweep.stderr.read()
    err = sweep.stderr.read()
    assert "2 variant(s) pre-empted (norm=layer, norm=dyt)" in err, err
    assert "stopped at step" in err and not (out / "summary.md").exists()
    assert subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=600).returncode == 0
    for r in ("norm=dyt", "norm=layer"):
        assert _trained_once(out / r, 6), r


@pytest.mark.slow
def test_batch_norm_run_resumes_with_its_running_statistics(tmp_path):
    """A BN run resumed from a mid-run checkpoint equals the uninterrupted run: the blocks'
    running statistics are in the checkpoint (they were not before ``make_checkpoint`` listed
    every model variable), so inference-mode evaluations after the resume agree exactly."""
    import shutil

    overrides = [*TINY, "model.norm=batch", "train.steps=6", "train.checkpoint_every=3",
                 "runtime.xla=false"]
    cfg = load_config(None, overrides)
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    run_training(cfg, whole, argv=["test"], progress=False)
    shutil.copytree(whole, resumed)
    for path in [resumed / "summary.json", *(resumed / "checkpoints").glob("ckpt-6*")]:
        path.unlink()
    (resumed / "checkpoints" / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-3"\n')
    run_training(cfg, resumed, argv=["test"], progress=False)
    _assert_same_run(resumed, whole, 6)


@pytest.mark.slow
def test_history_survives_a_resume_from_the_checkpoint_alone(tmp_path):
    """The loop's running values (best and last eval losses, max grad norm, last finite step,
    spike counter, probes) come back from the checkpoint itself, with no JSON beside it.

    Killed after its last checkpoint but before summary.json, a rerun trains no step: every
    value of its summary comes from the checkpoint's history. Resumed mid-run, it carries on
    to exactly the history and curves of the uninterrupted run."""
    cfg = load_config(None, [*TINY, "train.steps=6", "train.checkpoint_every=3",
                             "train.eval_every=2"])
    whole = tmp_path / "whole"
    expected = run_training(cfg, whole, argv=["test"], progress=False)
    at3 = history_at(whole / "checkpoints" / "ckpt-3")
    assert at3["step"] == 3 and at3["last_finite"]["step"] == 2 and at3["max_grad_norm"] > 0
    assert at3["final_eval_loss"] is not None and at3["best_eval_loss"] <= at3["final_eval_loss"]
    assert len(at3["spikes"]["recent"]) == 1 and at3["probes"]  # not a fresh start's defaults

    at_end, resumed = tmp_path / "at_end", tmp_path / "resumed"
    for run in (at_end, resumed):
        shutil.copytree(whole, run)
        (run / "summary.json").unlink()
    for path in (resumed / "checkpoints").glob("ckpt-6*"):
        path.unlink()
    (resumed / "checkpoints" / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-3"\n')
    for run in (at_end, resumed):
        # no history beside it: only the run directory's own JSON files (trainer/rundir.py)
        assert sorted(p.name for p in run.rglob("*.json")) == sorted(
            [rundir.META, rundir.TOKENIZER, rundir.PROMPTS])
        summary = run_training(cfg, run, argv=["test"], progress=False)
        for key in ("status", "steps", "final_eval_loss", "final_eval_loss_train_mode",
                    "best_eval_loss", "max_grad_norm", "last_finite", "probes", "loss_spikes",
                    "loss_spike_steps"):
            assert summary[key] == expected[key], (run.name, key)
    assert (history_at(resumed / "checkpoints" / "ckpt-6")
            == history_at(whole / "checkpoints" / "ckpt-6"))
    _assert_same_run(resumed, whole, 6)


def test_a_checkpoint_without_history_is_refused_and_kept(tmp_path):
    """Checkpoints from before the history moved into them (progress-N.json beside them) are
    treated as unreadable: refused with the reason, nothing deleted."""
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    (tmp_path / "checkpoints").mkdir()
    make_checkpoint(model).write(str(tmp_path / "checkpoints" / "ckpt-3"))
    before = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    with pytest.raises(RunDirError, match="ckpt-3: written before checkpoints held the run's hist"):
        resume(make_checkpoint(model, resumable=True), tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == before
