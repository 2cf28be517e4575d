"""Norms from outside the lab (``model.norm=PATH.py:Class`` / ``module:Class``) and the one norm
table: the contract is checked before anything is written, a run keeps the norm it trained
with, and resume, reproduce, generate and ``keras.saving.load_model`` find it again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY, run_cli
from trainer.choices import Norm
from trainer.config import ConfigError, load_config
from trainer.norm_names import NORM_TABLE, OUTSIDE_COLOR, plugin_target, row

ROOT = Path(__file__).resolve().parents[1]
GROUP_NORM = "examples/norms/group_norm.py:GroupNorm"
POWER_NORM = "examples/norms/power_norm.py:PowerNorm"
GOOD = '''
import keras
from keras import ops


class Scale(keras.layers.Layer):
    def __init__(self, epsilon=1e-5, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        self.g = self.add_weight(name="g", shape=(input_shape[-1],), initializer="ones")

    def call(self, x, padding_mask=None, training=None):
        x = ops.cast(x, "float32")
        y = self.g * x * ops.rsqrt(ops.mean(ops.square(x), -1, keepdims=True) + self.epsilon)
        return y

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}
'''


# ---- the one table ------------------------------------------------------------------------

def test_the_norm_table_is_the_vocabulary_and_the_registry():
    from trainer.models.norms import NORMS
    from trainer.results.palette import NORM_COLORS, NORM_SHORT, norm_color, short_value

    assert set(NORM_TABLE) == {m.value for m in Norm} == {str(k) for k in NORMS}
    for name, r in NORM_TABLE.items():  # figures read the table, nothing else
        assert NORM_COLORS[name] == norm_color(name) == r.color
        assert NORM_SHORT[name] == short_value("model.norm", name) == r.short
    assert len({r.color for r in NORM_TABLE.values()}) == len(NORM_TABLE)
    assert OUTSIDE_COLOR not in NORM_COLORS.values()
    assert row(GROUP_NORM).name == "GroupNorm" and norm_color(GROUP_NORM) == OUTSIDE_COLOR


@pytest.mark.parametrize("spec,expected", [
    ("a/b.py:Norm", ("file", "a/b.py", "Norm")), ("pkg.mod:Cls", ("module", "pkg.mod", "Cls")),
    ("layer", None), ("x.py", None), ("pkg.mod:", None), (":Cls", None), ("a b:C", None)])
def test_plugin_syntax(spec, expected):
    assert plugin_target(spec) == expected


def test_config_takes_lab_norms_and_plugin_specs_and_nothing_else():
    for name in NORM_TABLE:
        assert load_config(None, [f"model.norm={name}"]).model.norm == name
    assert load_config(None, [f"model.norm={GROUP_NORM}"]).model.norm == GROUP_NORM
    with pytest.raises(ConfigError, match="valid: layer.*FILE.py:Class"):
        load_config(None, ["model.norm=btach"])


# ---- the contract, checked before anything is written -----------------------------------

BAD = {
    "missing file": (None, "nope.py:X", "not found"),
    "missing module": (None, "no_such_module_xyz:X", "cannot import module"),
    "missing class": (GOOD, "{f}:Nope", "no class 'Nope'"),
    "not a layer": ("class Scale:\n    pass\n", "{f}:Scale", "not a keras.layers.Layer"),
    "import error": ("raise RuntimeError('boom')\n", "{f}:Scale", "RuntimeError: boom"),
    "call signature": (GOOD.replace("padding_mask=None, training=None", "mask=None"),
                       "{f}:Scale", "must accept (x, padding_mask=None, training=None)"),
    # one case per axis of (B, T, C): a check that compares only some axes misses one
    "shape B": (GOOD.replace("return y\n", "return y[:1]\n"), "{f}:Scale", "output shape"),
    "shape T": (GOOD.replace("return y\n", "return y[:, :4]\n"), "{f}:Scale", "output shape"),
    "shape C": (GOOD.replace("return y\n", "return y[..., :4]\n"), "{f}:Scale", "output shape"),
    "nan": (GOOD.replace("ops.rsqrt(", "0.0 * ops.log(-ops.abs(x) - 1) * ops.rsqrt("),
            "{f}:Scale", "NaN or Inf"),
    "round trip": (GOOD.replace('"epsilon": self.epsilon}', '"epsilon": self.epsilon, "bad": 1}'),
                   "{f}:Scale", "round trip"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_norm_is_one_line_and_exit_2_before_anything_is_written(tmp_path, case):
    source, spec, fragment = BAD[case]
    f = tmp_path / "my_norm.py"
    if source is not None:
        f.write_text(source)
    workdir = tmp_path / "run"
    result = run_cli("train", "--config", "configs/base.yaml", *TINY,
                     f"model.norm={spec.format(f=f)}", "--workdir", workdir)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("error: model.norm") and fragment in lines[0], lines[0]
    assert not workdir.exists()


def test_a_good_file_passes_the_contract(tmp_path):
    from trainer.models import plugin

    (tmp_path / "my_norm.py").write_text(GOOD)
    plugin.check(f"{tmp_path}/my_norm.py:Scale", 16, epsilon=1e-5, momentum=0.9, affine=True)
    assert plugin.constructor_kwargs(plugin.load_class(f"{tmp_path}/my_norm.py:Scale"),
                                     epsilon=1e-6, momentum=0.9, affine=False) == {"epsilon": 1e-6}


# ---- a plugin run: kept, resumed, reproduced, generated from, loaded ---------------------

@pytest.mark.slow
def test_a_plugin_run_keeps_its_norm_for_resume_reproduce_generate_and_loading(tmp_path):
    """Train with a copy of the PowerNorm example, then change and delete the original: the
    run's own copy is what a resume, ``reproduce`` (IDENTICAL), ``generate`` from another
    directory and ``keras.saving.load_model`` use."""
    work = tmp_path / "work"
    (work / "norms").mkdir(parents=True)
    shutil.copy(ROOT / POWER_NORM.split(":")[0], work / "norms/power.py")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = work / "run"

    def cli(*args, cwd=work):
        return subprocess.run([sys.executable, "-m", "trainer", *map(str, args)], cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=600)

    first = cli("train", "--config", ROOT / "configs/base.yaml", *TINY,
                "model.norm=norms/power.py:PowerNorm", "--quiet", "--workdir", run)
    assert first.returncode == 0, first.stderr
    kept = run / "norm" / "power.py"
    assert kept.read_text() == (work / "norms/power.py").read_text()
    done = json.loads((run / "summary.json").read_text())
    # resume from the step-3 checkpoint with the original file broken: the kept copy is used
    (work / "norms/power.py").write_text("raise RuntimeError('edited after the run')\n")
    (run / "summary.json").unlink()
    for f in (run / "checkpoints").glob("ckpt-6*"):
        f.unlink()
    (run / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')
    resumed = cli("train", "--config", run / "config.yaml", "--quiet", "--workdir", run)
    assert resumed.returncode == 0, resumed.stderr
    again = json.loads((run / "summary.json").read_text())
    assert again["final_eval_loss"] == done["final_eval_loss"]  # an exact resume
    (work / "norms/power.py").unlink()

    rerun = cli("reproduce", run, "--out", tmp_path / "rerun")
    assert rerun.returncode == 0 and "IDENTICAL" in rerun.stdout, rerun.stdout + rerun.stderr
    gen = cli("generate", run, "--prompt", "The history of", "--max-new-tokens", "4",
              "--format", "json", cwd=tmp_path)
    assert gen.returncode == 0 and '"continuation"' in gen.stdout, gen.stderr
    load = subprocess.run([sys.executable, "-c", (
        "import trainer.models, keras, numpy as np, sys; "
        f"trainer.models.use_run_norm({str(run)!r}); "
        f"m = keras.saving.load_model({str(run / 'model.keras')!r}); "
        "print(type(m.blocks[0].attention_norm).__name__, "
        "np.isfinite(np.asarray(m(np.ones((1, 4), 'int32')))).all())")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert load.returncode == 0 and "PowerNorm True" in load.stdout, load.stderr


def test_a_changed_copy_is_refused(tmp_path):
    from trainer.models import plugin

    run = tmp_path / "run"
    (tmp_path / "my_norm.py").write_text(GOOD)
    spec = f"{tmp_path}/my_norm.py:Scale"
    copy = plugin.keep_copy(spec, run)
    assert plugin.run_copy(run) == copy and plugin.use_run_norm(run) == spec
    copy.write_text(GOOD + "\n# edited\n")
    with pytest.raises(ConfigError, match="differs from the norm the run was trained with"):
        plugin.run_copy(run)


def test_a_leaky_outside_norm_trains_with_one_warning_and_its_checks_in_meta(tmp_path):
    """A norm that pools over time (a later token moves earlier outputs) is not refused, but
    the run says so in one line and keeps the failed check; a lab norm's run has no checks."""
    run = tmp_path / "leaky"
    result = run_cli("train", "--config", "configs/base.yaml", *TINY, "train.steps=2",
                     "model.norm=tests/fixtures/time_norm.py:TimeGroupNorm", "--quiet",
                     "--workdir", run)
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "causal" in warnings[0], result.stderr
    checks = json.loads((run / "meta.json").read_text())["norm_checks"]
    assert checks["causal"]["holds"] is False and checks["causal"]["max_abs_diff"] > 1e-2
    assert checks["batch_invariant"]["holds"] is True  # it pools over time, not over the batch
    from trainer.results.summarize import summarize

    summarize(tmp_path, plots=False)  # the results table marks the run
    assert "norm contract fails: causal" in (tmp_path / "summary.md").read_text()
