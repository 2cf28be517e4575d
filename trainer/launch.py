"""Launching a sweep's variants and waiting for them, including variants another process runs.

Each variant is one ``python -m trainer train`` command line; its exit code says how it ended:
0 completed or diverged, ``EXIT_STOPPED`` pre-empted (resumable), ``EXIT_BUSY`` refused
because another live process holds its run directory ("running elsewhere"), anything else
failed. Two sweeps (or a relaunch after a timeout) may share a results directory: each runs
what nobody else is running and waits for the rest.

Locally, ``--parallel N`` keeps N worker processes (``python -m trainer worker``) that import
TensorFlow once and fork a child per command, which runs it through the same function as
``python -m trainer train`` (``trainer.train.command``), so interpreter and import start-up are
paid N times, not once per variant; ``reuse=False`` starts one process per command instead
(as submitit jobs do). A run gives the same numbers either way, bit for bit
(tests/test_bench_sweep.py).
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import submitit
from tqdm.auto import tqdm

from trainer.faults import EXIT_BUSY, EXIT_STOPPED
from trainer.progress import Feed, StepBar
from trainer.rundir import FINISHED
from trainer.train.preempt import stop_requests
from trainer.train.rundir import RunDirError, inspect_run_dir, is_locked

POLL_S = 2.0  # how often a waiting sweep looks at the variants running elsewhere
REPORT_S = 60.0  # a progress line at least this often while waiting
STOP_WAIT_S = 300  # how long a requeued job gives its training process to checkpoint


def run_local(commands: list[list[str]], parallel: int, desc: str, reuse: bool = True,
              steps: list[int] | None = None) -> list[int]:
    """N local processes at a time; returns the exit codes in order.

    ``reuse``: N worker processes run the commands (``python -m trainer train ARGS...``) in turn;
    else one process per command. SIGTERM/SIGINT to the sweep is passed on to the running
    variants as SIGTERM (Kubernetes signals only the main process), so they checkpoint and
    exit ``EXIT_STOPPED``; variants not started yet count as stopped too. With ``steps`` (each
    command's ``train.steps``) and ``parallel`` > 1, one bar counts the steps the variants train
    and their output is printed above it (``trainer.progress``); else a bar counts ended
    commands (none for ``parallel`` 1: a variant then shows its own).
    """
    with stop_requests() as stop:
        jobs: queue.Queue = queue.Queue()
        for i in range(len(commands)):
            jobs.put(i)
        codes: list[int | None] = [None] * len(commands)
        steps_bar = StepBar(steps, desc) if steps is not None and parallel > 1 else None
        bar = steps_bar or tqdm(total=len(commands), desc=desc, unit="run", disable=parallel == 1)

        def serve() -> None:
            worker, feed = None, Feed(steps_bar) if steps_bar else None
            try:
                while True:
                    try:
                        i = jobs.get_nowait()
                    except queue.Empty:
                        return
                    if feed:
                        feed.index = i
                    if stop.requested:
                        codes[i] = EXIT_STOPPED
                    elif reuse:
                        if worker is not None and not worker.alive():  # died on a variant
                            worker.close()
                            worker = None
                        worker = worker or Worker(feed)
                        codes[i] = worker.run(commands[i][3:], stop)  # after "python -m trainer"
                    else:
                        codes[i] = _run_process(commands[i], stop, feed)
                    if feed:
                        feed.ended(stopped=codes[i] == EXIT_STOPPED)
                    else:
                        bar.update()
            finally:
                if worker is not None:
                    worker.close()
                if feed:
                    feed.close()

        workers = max(min(parallel, len(commands)), 1)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(serve) for _ in range(workers)]:
                future.result()
        bar.close()
        return [EXIT_STOPPED if c is None else c for c in codes]


def _run_process(command: list[str], stop, feed: Feed | None) -> int:
    """``command`` as its own process; its output and steps go to ``feed`` when there is one."""
    proc = subprocess.Popen(command, **(feed.popen() if feed else {}))
    return _wait_forwarding(proc, stop, poll=(lambda: feed.poll(proc)) if feed else None)


def _wait_forwarding(proc: subprocess.Popen, stop, poll=None) -> int:
    """Wait for ``proc`` (or, with ``poll``, until ``poll()`` returns a code), passing a
    requested stop on to it as SIGTERM once."""
    forwarded = False
    while True:
        try:
            rc = poll() if poll is not None else proc.wait(timeout=0.5)
            if rc is not None:
                # Signalled before it could install its handler (still starting): it
                # resumes from its last checkpoint all the same.
                return EXIT_STOPPED if forwarded and rc < 0 else rc
        except subprocess.TimeoutExpired:
            pass
        if stop.requested and not forwarded:
            proc.send_signal(signal.SIGTERM)
            forwarded = True


class Worker:
    """A ``python -m trainer worker`` process: takes one train command's arguments (``train``
    first) per line on its stdin and answers each with the exit code on a result pipe. Its
    stdout and stderr are the console's, like a variant's own process, or ``feed``'s pipes
    (``trainer.progress``), which its children inherit with the steps pipe."""

    def __init__(self, feed: Feed | None = None):
        read, write = os.pipe()
        pipes, self.feed = (feed.popen() if feed else {}), feed
        self.proc = subprocess.Popen([sys.executable, "-m", "trainer", "worker", str(write)],
                                     stdin=subprocess.PIPE, text=True,
                                     **{**pipes, "pass_fds": (write, *pipes.get("pass_fds", ()))})
        os.close(write)
        self.results = os.fdopen(read, "r")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, args: list[str], stop) -> int:
        """Run one command; a worker that dies on it (killed, out of memory) fails it."""
        try:
            self.proc.stdin.write(json.dumps(args) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # gone before it read the command
            return self.proc.wait() or 1
        return _wait_forwarding(self.proc, stop, poll=self._answer)

    def _answer(self) -> int | None:
        if (self.feed.wait([self.results], 0.5) if self.feed
                else select.select([self.results], [], [], 0.5)[0]):
            line = self.results.readline()
            if line:
                return int(json.loads(line)["rc"])
            return self.proc.wait() or 1  # the result pipe closed: the worker is gone
        return None

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait()
        self.results.close()


def serve_worker(result_fd: int) -> int:
    """The worker's side, a fork server: TensorFlow, Keras and the trainer are imported once
    (nothing run: TF's runtime and XLA's flags start in each child), then each ``train``
    command read from stdin runs in a forked child with ``trainer.train.command.train`` (what
    ``python -m trainer train`` runs), and its exit code is written back. Every run thus
    starts from the same fresh state as its own process would (same numbers, same XLA
    programs, so seeds share the compilation cache), and a crash or leak stays in its child.
    SIGTERM/SIGINT are passed on to the running child."""
    import importlib

    importlib.import_module("trainer.train.loop")  # the imports every run needs, paid once

    child = 0

    def forward(signum, frame):
        if child:
            os.kill(child, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    with os.fdopen(result_fd, "w") as results:
        for line in sys.stdin:
            sys.stdout.flush()
            sys.stderr.flush()
            child = os.fork()
            if child == 0:
                os._exit(_child(json.loads(line)))
            rc = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
            child = 0
            results.write(json.dumps({"rc": rc}) + "\n")
            results.flush()
    return 0


def _child(args: list[str]) -> int:
    """One ``train ARGS...`` command in a forked worker child, run by the function
    ``python -m trainer train`` runs; returns its exit code (output flushed, cache closed)."""
    from trainer import compile_cache
    from trainer.faults import report
    from trainer.train.command import parse, train

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # until the run installs its own handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if args[:1] != ["train"]:
            print(f"error: a worker runs train commands only, got {args[:1]}", file=sys.stderr)
            rc = 2
        else:  # the command as typed: the worker's own argv[0], like a train process's
            rc = report(lambda: train(parse(args[1:]), [sys.argv[0], *args]))
    except SystemExit as e:  # argparse errors
        rc = e.code if isinstance(e.code, int) else 2
    except BaseException:  # an internal failure: its traceback, and this command fails
        traceback.print_exc()
        rc = 1
    compile_cache.close()
    sys.stdout.flush()
    sys.stderr.flush()
    return rc


def _wait_until_exited(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` exited (gone, or a zombie awaiting its parent) within the time."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


class TrainJob(submitit.helpers.Checkpointable):
    """A submitit job running one training command; requeued with the same command when
    submitit signals pre-emption or a time-out (the training process checkpoints first)."""

    def __init__(self, command: list[str]):
        self.command = command
        self._proc = None

    def __call__(self) -> int:
        self._proc = subprocess.Popen(self.command)
        return self._proc.wait()

    def checkpoint(self, *args, **kwargs):
        """Called by submitit in the job on its pre-emption signal: pass SIGTERM on to the
        training process, let it checkpoint and stop, then resubmit the same command."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            # Not self._proc.wait(): this handler interrupts __call__'s own wait(), which holds
            # the Popen's wait lock, so a nested wait(timeout) can never reap the child and
            # always ran the full timeout. Watch the process instead; after the timeout,
            # resubmit anyway: the rerun resumes from the last checkpoint on disk.
            _wait_until_exited(self._proc.pid, STOP_WAIT_S)
        return submitit.helpers.DelayedSubmission(type(self)(self.command))

    def __getstate__(self):  # the live process handle does not travel with the pickle
        return {"command": self.command, "_proc": None}


def submit_jobs(commands: list[list[str]], root: Path, cluster: str | None, params: dict):
    """One submitit job per command: SLURM when available (cluster=None), else local processes.

    ``params`` go to ``AutoExecutor.update_parameters`` (e.g. timeout_min, slurm_partition,
    gpus_per_node); they come from the sweep spec's ``launcher_params``.
    """
    executor = submitit.AutoExecutor(folder=root / ".submitit", cluster=cluster)
    executor.update_parameters(**{"timeout_min": 24 * 60, **params})
    return [executor.submit(TrainJob(cmd)) for cmd in commands]


def job_codes(jobs) -> list[int]:
    """Wait for submitit jobs; a job that raised (killed, not requeued) counts as failed."""
    codes = []
    for job in jobs:
        try:
            codes.append(int(job.result()))
        except Exception:  # submitit re-raises the job's failure here; the run dir tells why
            codes.append(1)
    return codes


def variant_state(run_dir: Path, cfg) -> str:
    """"ended" (completed or diverged), "elsewhere" (another live process holds its lock)
    or "todo"."""
    try:
        if inspect_run_dir(run_dir, cfg) in FINISHED:
            return "ended"
    except RunDirError:
        return "todo"  # the training process reports it in one line and fails
    return "elsewhere" if is_locked(run_dir) else "todo"


def run_all(run_dirs: list[Path], configs: list, launch, wait: bool, wait_limit_s: float,
            name: str) -> dict[str, list[str]]:
    """Run every variant not finished and not running elsewhere with ``launch(indices)``
    (returns exit codes); wait for those running elsewhere, relaunching any that another
    process left unfinished. Returns the variant names by outcome: ended, failed, stopped,
    elsewhere (still running elsewhere when not waiting or after ``wait_limit_s``)."""
    outcome: dict[int, str] = {}
    pending = list(range(len(run_dirs)))
    deadline = time.monotonic() + wait_limit_s
    while pending:
        states = {i: variant_state(run_dirs[i], configs[i]) for i in pending}
        todo = [i for i in pending if states[i] == "todo"]
        outcome.update({i: s for i, s in states.items() if s != "todo"})
        for i, rc in zip(todo, launch(todo) if todo else []):
            outcome[i] = ("ended" if rc == 0 else "elsewhere" if rc == EXIT_BUSY
                          else "stopped" if rc == EXIT_STOPPED else "failed")
        pending = sorted(i for i, s in outcome.items() if s == "elsewhere")
        if not pending or not wait or "stopped" in outcome.values():
            break
        if not _wait_for(pending, run_dirs, deadline, name):
            break
    return {kind: [run_dirs[i].name for i, s in sorted(outcome.items()) if s == kind]
            for kind in ("ended", "failed", "stopped", "elsewhere")}


def _wait_for(pending: list[int], run_dirs: list[Path], deadline: float, name: str) -> bool:
    """Poll until one of ``pending`` is no longer locked; False when the deadline passed."""
    last_report = -REPORT_S
    while True:
        if any(not is_locked(run_dirs[i]) for i in pending):
            return True
        now = time.monotonic()
        if now > deadline:
            return False
        if now - last_report >= REPORT_S:
            names = ", ".join(run_dirs[i].name for i in pending)
            print(f"sweep {name}: waiting for {len(pending)} variant(s) running elsewhere: "
                  f"{names}", file=sys.stderr, flush=True)
            last_report = now
        time.sleep(POLL_S)
