"""tf.distribute: MirroredStrategy over 2 logical CPUs and 2 MultiWorker processes on localhost.

Both must train the same model as one device on the same global batches: the loss at step 0 is
the same number (the gradients differ only by summation order afterwards).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]
# Summation order differs between one device and all-reduced replicas: ~1e-6 per step, which
# compounds over a few steps of Adam.
STEP0_TOL, RUN_TOL = 1e-5, 5e-3

MIRRORED = """
import json, sys
import trainer
tf = trainer.import_tensorflow_quietly()
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from trainer.config import load_config
from trainer.results.events import read_scalars
from trainer.train.loop import run_training
out = {}
for strategy in ("default", "mirrored"):
    cfg = load_config(None, json.loads(sys.argv[2]) + [f"runtime.strategy={strategy}"])
    summary = run_training(cfg, f"{sys.argv[1]}/{strategy}", argv=["test"], progress=False)
    curves = read_scalars(f"{sys.argv[1]}/{strategy}/train")
    out[strategy] = {"loss": [v for _, v in curves["loss"]], "eval": summary["final_eval_loss"],
                     "blocks": {k: [v for _, v in c] for k, c in curves.items() if "block_" in k}}
print(json.dumps(out))
"""


def _losses(run_dir: Path) -> list[float]:
    from trainer.results.events import read_scalars

    return [v for _, v in read_scalars(run_dir / "train")["loss"]]


@pytest.mark.slow
def test_mirrored_two_logical_cpus_matches_one_device(tmp_path):
    overrides = [*TINY, "data.tokens_per_batch=512"]
    proc = subprocess.run([sys.executable, "-c", MIRRORED, str(tmp_path), json.dumps(overrides)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    one, two = out["default"], out["mirrored"]
    assert len(one["loss"]) == len(two["loss"]) == 6
    assert two["loss"][0] == pytest.approx(one["loss"][0], abs=STEP0_TOL)
    assert two["loss"] == pytest.approx(one["loss"], abs=RUN_TOL)
    assert two["eval"] == pytest.approx(one["eval"], abs=RUN_TOL)
    assert two["loss"] != one["loss"]  # it really ran on two replicas (different summation)
    # Per-block telemetry: the same curves as one device (gradient norms and update ratios
    # from the all-reduced gradients, stream statistics weighted by each replica's tokens).
    assert set(two["blocks"]) == set(one["blocks"])
    assert any(k.startswith("grad_norm/block_") for k in one["blocks"])
    assert any(k.startswith("activation/block_") for k in one["blocks"])
    assert any(k.startswith("update_ratio/block_") for k in one["blocks"])
    for key, curve in one["blocks"].items():
        assert two["blocks"][key][0] == pytest.approx(curve[0], rel=1e-4, abs=1e-6), key


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.mark.slow
def test_multi_worker_two_processes_on_localhost(tmp_path):
    cluster = {"worker": [f"localhost:{p}" for p in _free_ports(2)]}
    procs = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "trainer", "train", "--quiet", "--workdir",
             str(tmp_path / f"worker{index}"), *TINY, "runtime.strategy=multi_worker"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    single = tmp_path / "single"
    assert subprocess.run([sys.executable, "-m", "trainer", "train", "--quiet", "--workdir",
                           str(single), *TINY], cwd=ROOT, timeout=300).returncode == 0
    w0, w1, one = (_losses(tmp_path / "worker0"), _losses(tmp_path / "worker1"), _losses(single))
    assert w0 == w1  # both workers hold the same all-reduced model
    assert w0[0] == pytest.approx(one[0], abs=STEP0_TOL)
    assert w0 == pytest.approx(one, abs=RUN_TOL)


def test_strategy_names_are_the_config_vocabulary():
    from trainer.choices import ConfigError, Strategy
    from trainer.train.strategy import STRATEGIES, make_strategy

    assert set(STRATEGIES) == set(Strategy)
    with pytest.raises(ConfigError, match=r"unknown runtime.strategy 'mirror' \(did you mean "
                                          r"'mirrored'\?\); valid: auto, "):
        make_strategy("mirror")


@pytest.mark.parametrize("mixed,policy", [(True, "mixed_bfloat16"), (False, "float32")])
def test_precision_sets_the_policy_of_the_config_and_restores_the_previous(mixed, policy):
    """The one dtype policy helper the training loop and the bench both run under."""
    import keras

    from trainer.config import load_config
    from trainer.train.strategy import compute_dtype, precision

    cfg = load_config(None, [f"runtime.mixed_precision={str(mixed).lower()}"])
    before = keras.mixed_precision.global_policy().name
    with precision(cfg):
        assert keras.mixed_precision.global_policy().name == policy
        assert keras.mixed_precision.global_policy().compute_dtype == compute_dtype(mixed)
    assert keras.mixed_precision.global_policy().name == before
