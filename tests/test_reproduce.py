"""reproduce: identity on the same machine, tolerance elsewhere, directory mode, --reuse.

One tiny real run and one real reproduction of it; every other case is a copy of those two with
meta.json edited (another CPU, clean trees) or a curve rewritten with TensorFlow's own summary
writer (a later event file wins its step), so each verdict follows from a known difference.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.config import ConfigError, load_config
from trainer.results.events import read_scalars
from trainer.reproduce import choose, reproduce, reproduce_all, reproduce_path
from trainer.results.compare import tolerances
from trainer.train.loop import run_training

REPO = Path(__file__).resolve().parents[1]
# Two blocks, eager steps, evaluations at steps 0 and 6: a few seconds per run.
FAST = ["model.num_layers=2", "runtime.xla=false", "train.eval_every=6",
        "train.checkpoint_every=6"]
SKIP = shutil.ignore_patterns("checkpoints")


# Its module-scoped runs are built once: every test here goes to the same xdist worker
# (--dist loadgroup, setup.cfg), not once per worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("test_reproduce")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A tiny run and its reproduction by this code on this machine (both real)."""
    from tests.conftest import TINY

    root = tmp_path_factory.mktemp("reproduce")
    run_training(load_config("configs/base.yaml", [*TINY, *FAST]), root / "run", argv=["test"],
                 progress=False)
    assert reproduce(root / "run", root / "again", progress=False) == 0
    return root / "run", root / "again"


def _meta(run: Path, **changes) -> dict:
    meta = json.loads((run / "meta.json").read_text())
    for key, value in changes.items():
        if key == "machine":
            meta["machine"] = {**meta["machine"], **value}
        else:
            meta[key] = value
    (run / "meta.json").write_text(json.dumps(meta))
    return meta


def _copies(pair, dest: Path, **meta_changes) -> tuple[Path, Path]:
    """Copies of the run and its reproduction, both recorded as made from a clean checkout (so
    identity is demanded unless ``meta_changes`` say otherwise, e.g. another CPU)."""
    run, again = pair
    if json.loads((again / "meta.json").read_text()).get("git_sha") is None:
        pytest.skip("not a git checkout: no code version to compare")
    a, b = dest / "run", dest / "again"
    shutil.copytree(run, a, ignore=SKIP)
    shutil.copytree(again, b, ignore=SKIP)
    sha = json.loads((b / "meta.json").read_text())["git_sha"]
    _meta(a, git_sha=sha, git_dirty=False, **meta_changes)
    _meta(b, git_dirty=False)
    return a, b


def _rewrite(run: Path, group: str, tag: str, step: int, change) -> tuple[float, float]:
    """Replace one curve point by ``change(old)`` (as float32); returns (old, new) as read back."""
    import tensorflow as tf

    old = dict(read_scalars(run / group)[tag])[step]
    writer = tf.summary.create_file_writer(str(run / group))
    with writer.as_default(step=step):
        tf.summary.scalar(tag, tf.constant(change(np.float32(old)), tf.float32))
    writer.close()
    new = dict(read_scalars(run / group)[tag])[step]
    assert new != old
    return old, new


OTHER_CPU = {"cpu_model": "Made-up CPU 9000", "cpu_flags": ["made_up_isa"]}


def test_tolerance_is_1e4_at_200_steps_and_grows_with_the_run():
    short, ref, long = tolerances(10), tolerances(200), tolerances(100_000)
    assert short["loss"].rtol == ref["loss"].rtol == 1e-4 and ref["loss"].atol == 1e-6
    assert long["loss"].rtol > 100 * 1e-4 * 0.3  # ~ steps * eps: 100k steps of float32 sums
    assert ref["diagnostic"].rtol > ref["loss"].rtol and ref["loss"].holds(5.0, 5.0004)
    assert not ref["loss"].holds(5.0, 5.0006)


def test_a_rerun_here_is_identical_and_records_the_machine(pair, capsys):
    run, again = pair
    machine = json.loads((again / "meta.json").read_text())["machine"]
    assert machine["cpu_model"] and machine["logical_cores"] >= 1
    assert {"intra_op_threads", "inter_op_threads", "onednn_enabled", "xla"} <= set(machine)
    verdict = json.loads((again / "reproduce.json").read_text())
    assert verdict["verdict"] == "IDENTICAL" and verdict["unequal"] == 0
    assert verdict["values"] > 50 and verdict["curves"] > 10


def test_the_same_machine_demands_identity_a_1_ulp_difference_fails(pair, tmp_path, capsys):
    a, b = _copies(pair, tmp_path)
    assert reproduce(a, b, progress=False, reuse=True) == 0
    assert "IDENTICAL: every compared value is exactly equal (same code, packages and machine)" \
        in capsys.readouterr().out
    old, new = _rewrite(a, "eval", "loss", 6, lambda v: np.nextafter(v, np.float32(np.inf)))
    assert reproduce(a, b, progress=False, reuse=True) == 1
    text = capsys.readouterr().out
    assert f"MISMATCH: eval/loss at step 6: original {new!r} vs reproduction {old!r}" in text
    assert "identity demanded" in text


def test_another_cpu_takes_the_tolerance_path(pair, tmp_path, capsys):
    a, b = _copies(pair, tmp_path, machine=OTHER_CPU)
    old, new = _rewrite(a, "eval", "loss", 6, lambda v: v * np.float32(1 + 2e-6))
    assert reproduce(a, b, progress=False, reuse=True) == 0
    text = capsys.readouterr().out
    here = json.loads((b / "meta.json").read_text())["machine"]["cpu_model"]
    assert f"WITHIN TOLERANCE (different CPU: Made-up CPU 9000 vs {here}; different " \
           f"instruction sets" in text
    rel = abs(new - old) / max(abs(new), abs(old))
    assert f"max relative difference {rel:.1e} at eval/loss step 6)" in text
    largest = json.loads((b / "reproduce.json").read_text())["largest"]["loss"]
    assert largest["relative"] == pytest.approx(rel) and 1e-6 < rel < 1e-5
    # --strict demands identity anyway.
    assert reproduce(a, b, progress=False, reuse=True, strict=True) == 1
    assert "MISMATCH: eval/loss at step 6" in capsys.readouterr().out


def test_a_curve_beyond_the_tolerance_is_a_mismatch(pair, tmp_path, capsys):
    a, b = _copies(pair, tmp_path, machine=OTHER_CPU)
    old, new = _rewrite(a, "train", "loss", 3, lambda v: v * np.float32(1 + 3e-4))
    assert reproduce(a, b, progress=False, reuse=True) == 1
    text = capsys.readouterr().out
    assert f"MISMATCH: train/loss at step 3: original {new!r} vs reproduction {old!r} (beyond " \
           f"loss rtol=1.0e-04" in text


def test_status_and_steps_stay_exact_under_the_tolerance(pair, tmp_path, capsys):
    a, b = _copies(pair, tmp_path, machine=OTHER_CPU)
    summary = json.loads((a / "summary.json").read_text())
    (a / "summary.json").write_text(json.dumps({**summary, "steps": summary["steps"] + 1}))
    assert reproduce(a, b, progress=False, reuse=True) == 1
    assert "MISMATCH: summary steps" in capsys.readouterr().out


# The claims' inputs (F2, F3: PreciseBN losses; F5: spikes) and the test split's losses. The
# tiny run is LayerNorm: its PreciseBN values are null, and a number there differs from null.
CLAIM_INPUTS = {"final_eval_loss_precise_bn": lambda v: 5.0 if v is None else v * 1.01,
                "final_test_loss_precise_bn": lambda v: 5.0 if v is None else v * 1.01,
                "final_test_loss": lambda v: v * 1.01,
                "loss_spikes": lambda v: v + 1,
                "loss_spike_steps": lambda v: [*v, 5]}


@pytest.mark.parametrize("key", sorted(CLAIM_INPUTS))
def test_every_input_of_the_claims_is_compared(pair, tmp_path, capsys, key):
    a, b = _copies(pair, tmp_path, machine=OTHER_CPU)
    summary = json.loads((a / "summary.json").read_text())
    (a / "summary.json").write_text(json.dumps({**summary, key: CLAIM_INPUTS[key](summary[key])}))
    assert reproduce(a, b, progress=False, reuse=True) == 1
    assert f"MISMATCH: summary {key}: original" in capsys.readouterr().out


def test_a_key_the_original_lacks_is_not_compared(pair, tmp_path, capsys):
    """A summary written before final_test_loss existed still reproduces."""
    a, b = _copies(pair, tmp_path)
    summary = json.loads((a / "summary.json").read_text())
    del summary["final_test_loss"]
    (a / "summary.json").write_text(json.dumps(summary))
    assert reproduce(a, b, progress=False, reuse=True) == 0
    assert "IDENTICAL" in capsys.readouterr().out


def test_an_existing_out_dir_needs_reuse_and_the_same_code(pair, tmp_path):
    run, again = pair
    before = {p: p.read_bytes() for p in again.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="already exists; pass --reuse"):
        reproduce(run, again, progress=False)
    assert {p: p.read_bytes() for p in again.rglob("*") if p.is_file()} == before
    old = tmp_path / "old"
    shutil.copytree(again, old, ignore=SKIP)
    _meta(old, git_sha="0" * 40)
    with pytest.raises(ConfigError, match="made by code 0000000, this checkout is"):
        reproduce(run, old, progress=False, reuse=True)


def test_the_comparison_reads_the_two_run_directories_only(pair, tmp_path, monkeypatch, capsys):
    """Only the retraining needs the data: comparing a finished reproduction again works with
    an empty data cache and every dataset load an error."""
    import trainer.data.sources

    a, b = _copies(pair, tmp_path)
    cache = tmp_path / "empty-cache"
    monkeypatch.setenv("NORMLAB_CACHE", str(cache))

    def forbidden(*args, **kwargs):
        raise AssertionError("the data was loaded")

    monkeypatch.setattr(trainer.data.sources, "load_splits", forbidden)
    assert reproduce(a, b, progress=False, reuse=True) == 0
    assert "IDENTICAL" in capsys.readouterr().out and not cache.exists()


def test_reproduce_refuses_a_missing_or_unfinished_run(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        reproduce(tmp_path / "nope", progress=False)
    (tmp_path / "half").mkdir()
    with pytest.raises(ConfigError, match="no config.yaml"):
        reproduce(tmp_path / "half", progress=False)


def test_a_sample_is_repeatable_from_its_seed():
    runs = [Path(f"r{i}") for i in range(20)]
    chosen, seed = choose(runs, 5, None)
    assert len(set(chosen)) == 5 and choose(runs, 5, seed) == (chosen, seed)
    assert choose(runs, None, None) == (runs, None)
    with pytest.raises(ConfigError, match="between 1 and 20"):
        choose(runs, 21, 0)


@pytest.fixture(scope="module")
def results_set(pair, tmp_path_factory):
    """results/{grid/same, grid/other_cpu, lr/bad, lr/half} and their reproductions in out/."""
    base = tmp_path_factory.mktemp("results_set")
    root, out = base / "results", base / "out"
    cases = (("grid/same", None, None), ("grid/other_cpu", OTHER_CPU, 1 + 2e-6),
             ("lr/bad", OTHER_CPU, 1.01))
    for name, machine, factor in cases:
        a, b = _copies(pair, base / "tmp" / name, **({"machine": machine} if machine else {}))
        if factor:
            _rewrite(a, "eval", "loss", 6, lambda v, f=factor: v * np.float32(f))
        for src, dest in ((a, root / name), (b, out / name)):
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(src, dest)
    shutil.copytree(root / "grid/same", root / "lr/half",
                    ignore=shutil.ignore_patterns("summary.json"))
    return root, out


def _cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run([sys.executable, "-m", "trainer", "reproduce", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=REPO)


def _rows(stdout: str) -> dict[str, list[str]]:
    rows = [ln.strip().strip("|").split("|") for ln in stdout.splitlines()
            if ln.startswith("| ") and not ln.startswith("| run |")]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows}


@pytest.mark.slow
def test_directory_mode_prints_one_row_per_run_and_fails_if_one_fails(results_set):
    root, out = results_set
    proc = _cli(root, "--out", out, "--reuse", "--parallel", "2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = _rows(proc.stdout)
    assert sorted(rows) == ["grid/other_cpu", "grid/same", "lr/bad"]  # lr/half: unfinished
    assert rows["grid/same"][0] == "IDENTICAL" and rows["grid/same"][1] == "0"
    assert rows["grid/other_cpu"][0] == "WITHIN TOLERANCE"
    rel, where = rows["grid/other_cpu"][1].split(" ", 1)
    assert 1e-6 < float(rel) < 5e-6 and where == "(eval/loss step 6)"
    assert rows["lr/bad"][0] == "MISMATCH" and rows["lr/bad"][4].startswith("eval/loss at step 6")
    assert "1 unfinished runs skipped" in proc.stdout and "2/3 runs reproduced" in proc.stdout

    passing = _cli(root / "grid", "--out", out / "grid", "--reuse")
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert sorted(_rows(passing.stdout)) == ["other_cpu", "same"] and "2/2 runs" in passing.stdout


@pytest.mark.slow
def test_directory_mode_refuses_existing_reproductions_before_starting(results_set):
    root, out = results_set
    with pytest.raises(ConfigError, match="already exists; pass --reuse"):
        reproduce_all(root, out)
    with pytest.raises(ConfigError, match="apply to a results directory"):
        reproduce_path(root / "grid/same", sample=2)
    with pytest.raises(ConfigError, match="--parallel must be at least 1"):
        reproduce_path(root, out / "elsewhere", parallel=0)
    assert not (out / "elsewhere").exists()
