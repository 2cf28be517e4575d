"""A sweep's progress display (trainer/progress.py): steps counted from real processes, their
output written above the bar and never glued onto it; a sweep shows both end to end."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import tiny_spec
from trainer.progress import ENV, Feed, StepBar, StepReporter

ROOT = Path(__file__).resolve().parents[1]

# A variant stand-in: prints on both streams, reports its steps as the training loop does, and
# ends with a line that has no newline.
CHILD = """
import sys
from trainer.progress import StepReporter
report = StepReporter()
print("first line", flush=True)
for step in range(1, 6):
    report(step, force=True)
print("oops on stderr", file=sys.stderr, flush=True)
print("last words", end="", flush=True)
"""


def _run_child(feed: Feed, index: int) -> None:
    feed.index = index
    proc = subprocess.Popen([sys.executable, "-c", CHILD], cwd=ROOT, **feed.popen())
    while feed.poll(proc) is None:
        pass
    assert proc.returncode == 0


def test_feed_counts_a_process_steps_and_relays_its_lines_above_the_bar(monkeypatch):
    console = io.StringIO()  # one terminal: the bar and both streams interleave on it
    monkeypatch.setattr(sys, "stdout", console)
    monkeypatch.setattr(sys, "stderr", console)
    bar = StepBar([5, 8], "sweep t")
    feed = Feed(bar)
    try:
        _run_child(feed, 1)
        feed.drain()
        assert bar.done == [0, 5] and bar.bar.n == 5  # its steps, counted for variant 1
        feed.ended()
        assert bar.done == [0, 8] and bar.ended == 1  # an ended variant counts all its steps
        _run_child(feed, 0)
        feed.ended(stopped=True)  # a pre-empted one: only the steps it made, and not ended
        assert bar.done == [5, 8] and bar.ended == 1
    finally:
        feed.close()
        bar.close()
    text = console.getvalue()
    for line in ("first line", "oops on stderr", "last words"):
        assert text.count(line) == 2  # once per process: nothing lost, nothing doubled
        at = text.index(line)
        # tqdm.write clears the bar ("\r") before the line and ends it: nothing glued on
        assert text[at - 1] in "\r\n" and text[at + len(line)] == "\n", repr(text)
    assert "0/13 [" in text.split("first line")[0] and "0/2 runs" in text.split("first line")[0]
    assert "13/13 [" in text and "1/2 runs" in text


def test_reporter_never_blocks_a_run():
    read, write = os.pipe()
    try:
        report = StepReporter({ENV: str(write)})
        for step in range(200_000):  # far more than a pipe holds: the surplus is dropped
            report(step, force=True)
        assert os.read(read, 64).split(b"\n")[0] == b"0"
    finally:
        os.close(read)
        os.close(write)
    report(9, force=True)  # a closed pipe: the run goes on, reporting nothing
    assert report.fd is None
    assert StepReporter({}).fd is None and StepReporter({ENV: "junk"}).fd is None


def test_reporter_writes_at_most_every_interval_unless_forced():
    read, write = os.pipe()
    try:
        report = StepReporter({ENV: str(write)})
        report(1)
        report(2)  # too soon after 1: dropped
        report(3, force=True)
        assert os.read(read, 64) == b"1\n3\n"
    finally:
        os.close(read)
        os.close(write)


@pytest.mark.slow
def test_a_parallel_sweep_shows_steps_and_prints_its_variants_lines_whole(tmp_path):
    """``sweep --parallel 2``: one bar in steps over both variants; each variant's line comes
    through whole, and the weight-decay line (in meta.json) is not repeated per variant."""
    spec = tiny_spec(tmp_path / "spec.yaml", "  model.norm: [layer, rms]\n")
    proc = subprocess.run([sys.executable, "-m", "trainer", "sweep", str(spec), "--parallel",
                           "2", "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "12/12 [" in proc.stderr and "2/2 runs" in proc.stderr  # TINY: 6 steps each
    done = [ln for ln in proc.stdout.splitlines() if "completed after 6 steps" in ln]
    assert sorted(ln.split("/")[-1].split(":")[0] for ln in done) == ["norm=layer", "norm=rms"]
    assert "weight decay" not in proc.stdout + proc.stderr


def test_the_training_loop_reports_its_steps_and_keeps_quiet(tmp_path, monkeypatch, capsys):
    """run_training writes its steps to ``$NORMLAB_PROGRESS_FD`` (the first one before any
    step, the last one at the end); without its own bar it prints no weight-decay line."""
    from tests.conftest import TINY
    from trainer.config import load_config
    from trainer.train.loop import run_training

    read, write = os.pipe()
    monkeypatch.setenv(ENV, str(write))
    try:
        run_training(load_config("configs/base.yaml", TINY), tmp_path / "run", argv=["test"],
                     progress=False)
        steps = [int(n) for n in os.read(read, 1 << 16).split()]
    finally:
        os.close(read)
        os.close(write)
    assert steps[0] == 0 and steps[-1] == 6 and steps == sorted(steps)
    assert "weight decay" not in capsys.readouterr().out
