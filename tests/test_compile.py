"""Compile counts held against XLA's own record, the persistent cache, and the bound.

The bound from first principles: a run compiles one train program per bucket shape (plus the
shape-independent update when ``runtime.shared_update``), one eval program per eval shape (and
as many train-mode eval programs for models with batch statistics), and nothing afterwards:
every batch has one of the bucket shapes, so a second epoch adds zero compilations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]


def _train(tmp: Path, name: str, cache: Path, extra=()) -> tuple[dict, int]:
    """A ``python -m trainer train`` run with XLA dumping its modules; returns the summary
    and the number of modules XLA compiled (each dumps one ``*.before_optimizations.txt``)."""
    dump = tmp / f"dump-{name}"
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={dump}", NORMLAB_XLA_CACHE=str(cache))
    proc = subprocess.run([sys.executable, "-m", "trainer", "train", "--workdir", str(tmp / name),
                           "--quiet", *TINY, *extra], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modules = len(list(dump.glob("*before_optimizations.txt"))) if dump.is_dir() else 0
    return json.loads((tmp / name / "summary.json").read_text()), modules


def _traced(summary: dict) -> int:
    c = summary["compile_count"]
    return c["train"] + c["eval"] + c["eval_train_mode"] + c["test"]


@pytest.mark.slow
def test_compile_count_is_what_xla_compiled_and_the_cache_serves_the_rest(tmp_path):
    cache = tmp_path / "xla-cache"
    # batch norm: train-mode eval programs too
    first, dumped = _train(tmp_path, "first", cache, ["model.norm=batch"])
    xla = first["compile_count"]["xla"]
    assert xla["cache"] and dumped == _traced(first) == xla["compiled"] >= 4
    assert xla["loaded"] == 0 and first["compile_count"]["eval_train_mode"] >= 1

    # The same programs in a new process: XLA compiles nothing, the count says where they came
    # from, and the results are the same to the last bit.
    again, dumped = _train(tmp_path, "again", cache, ["model.norm=batch"])
    assert dumped == again["compile_count"]["xla"]["compiled"] == 0
    assert again["compile_count"]["xla"]["loaded"] == _traced(again) == _traced(first)
    assert again["final_eval_loss"] == first["final_eval_loss"]
    assert again["max_grad_norm"] == first["max_grad_norm"]

    # A truncated entry (a full disk, a kill while writing) is dropped, not fed to TensorFlow
    # (which would fail the run reading it): that one program compiles again.
    store = next(p for p in cache.iterdir() if p.is_dir())
    victim = sorted(store.glob("*.pb"))[0]
    victim.write_bytes(victim.read_bytes()[:1000])
    third, dumped = _train(tmp_path, "third", cache, ["model.norm=batch"])
    assert dumped == third["compile_count"]["xla"]["compiled"] == 1
    assert third["compile_count"]["xla"]["loaded"] == _traced(third) - 1
    assert third["final_eval_loss"] == first["final_eval_loss"]


def test_second_epoch_adds_no_compilation(tmp_path):
    """Every bucket shape is compiled within the first epoch; the second compiles nothing."""
    import trainer

    trainer.import_tensorflow_quietly()
    from trainer.config import load_config
    from trainer.data import prepare
    from trainer.train.loop import build_run
    from trainer.train.strategy import make_strategy

    text = tmp_path / "small.txt"
    words = "the cat sat on a mat while one dog ran far away from home".split()
    lines = [" ".join((words * 4)[i % 7:(i % 7) + 2 + i % 37]) for i in range(240)]
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = load_config(None, [*TINY, "data.source=files", f"data.files={text}",
                             "runtime.shared_update=true"])
    corpus = prepare(cfg.data)
    run = build_run(cfg, corpus, make_strategy("default"))
    shapes = {b["inputs"].shape for b in corpus.epoch_batches("train", epoch=0)}
    assert len(shapes) == len(cfg.data.buckets)  # the text fills every bucket
    assert corpus.num_batches("train") > len(shapes)  # shapes repeat within an epoch
    counts = []
    for epoch in (0, 1):
        for batch in corpus.epoch_batches("train", epoch=epoch):
            run.train_step(batch)
        counts.append(run.train_step.compilations())
    assert counts == [len(shapes) + 1] * 2  # one per bucket shape + the shared update; then none


def test_the_store_key_tells_every_accelerator_apart():
    """A program compiled for one GPU is never offered to another: the key names the model and
    compute capability; a CPU-only key is what it was before accelerators entered it."""
    import hashlib

    from trainer.compile_cache import store_key

    cpu = ("Some CPU @ 2.0GHz", ["avx2", "fma"])
    plain = store_key("2.21.0", *cpu, [])
    assert plain == "tf2.21.0-cpu" + hashlib.sha256(b"Some CPU @ 2.0GHz|avx2 fma").hexdigest()[:12]
    h200 = "GPU: NVIDIA H200 (compute capability 9.0)"
    h100 = "GPU: NVIDIA H100 80GB HBM3 (compute capability 9.0)"
    a100 = "GPU: NVIDIA A100-SXM4-80GB (compute capability 8.0)"
    keys = [plain, store_key("2.21.0", *cpu, [h200]), store_key("2.21.0", *cpu, [h100]),
            store_key("2.21.0", *cpu, [a100]), store_key("2.21.0", *cpu, [h200, h200]),
            store_key("2.21.0", *cpu, [h200, a100]), store_key("2.20.0", *cpu, [h200]),
            store_key("2.21.0", "Other CPU", cpu[1], [h200])]
    assert len(set(keys)) == len(keys)
    assert all(k.startswith(plain.split("-cpu")[0]) for k in keys[1:6])
    assert store_key("2.21.0", *cpu, [a100, h200]) == store_key("2.21.0", *cpu, [h200, a100])


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    from trainer.machine import parse_nvidia_smi, visible_accelerators

    smi = "0, GPU-aaaa1111, NVIDIA H200, 9.0\n1, GPU-bbbb2222, NVIDIA A100-SXM4-80GB, 8.0\n"
    h200, a100 = ("GPU: NVIDIA H200 (compute capability 9.0)",
                  "GPU: NVIDIA A100-SXM4-80GB (compute capability 8.0)")
    assert parse_nvidia_smi(smi) == [h200, a100]
    assert parse_nvidia_smi(smi, "1") == [a100] and parse_nvidia_smi(smi, "1,0") == [a100, h200]
    assert parse_nvidia_smi(smi, "GPU-bbbb") == [a100]
    assert parse_nvidia_smi(smi, "MIG-1234") == [h200, a100]  # unknown ids: name every GPU
    assert parse_nvidia_smi("0, GPU-cccc, Tesla V100-SXM2-16GB\n") == ["GPU: Tesla V100-SXM2-16GB"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # CUDA sees no GPU: the key must not either
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE", raising=False)
    assert not any(a.startswith("GPU") for a in visible_accelerators())


def test_compiled_programs_live_under_the_data_cache_root(tmp_path, monkeypatch):
    """One root: ``data.cache_dir`` (else $NORMLAB_CACHE) holds the compiled programs too, and a
    run whose config names another root than the process started with moves to it."""
    import hashlib

    from trainer import compile_cache

    monkeypatch.setenv("NORMLAB_CACHE", str(tmp_path / "env"))
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.setenv("TF_XLA_FLAGS", "")
    own = compile_cache.store_dir(tmp_path / "own")
    assert own.parent == tmp_path / "own" / "xla"
    assert compile_cache.store_dir().parent == tmp_path / "env" / "xla"
    monkeypatch.setenv(compile_cache.ENV, "off")
    assert compile_cache.store_dir(tmp_path / "own") is None
    monkeypatch.delenv(compile_cache.ENV)

    own.mkdir(parents=True)
    (own / "old.pb").write_bytes(b"program")
    (own / "old.pb.sha256").write_text(hashlib.sha256(b"program").hexdigest())
    try:
        assert compile_cache.enable() == compile_cache.store_dir()
        assert compile_cache.follow(tmp_path / "own") == own
        assert "old.pb" in compile_cache.snapshot()  # offered to TF from the run's own store
        flag = "--tf_xla_persistent_cache_directory="
        staging = Path(next(f for f in os.environ["TF_XLA_FLAGS"].split() if f.startswith(flag))
                       [len(flag):])
        (staging / "new.pb").write_bytes(b"compiled here")  # as TF writes a new program
        assert compile_cache.promote() == 1
        assert (own / "new.pb").read_bytes() == b"compiled here"
        assert not list(compile_cache.store_dir().glob("new.pb"))
    finally:
        compile_cache.close()


@pytest.mark.slow
def test_without_xla_nothing_counts_as_compiled_or_loaded(tmp_path):
    """``runtime.xla=false`` traces plain tf.functions: XLA neither compiles nor loads a program."""
    summary, dumped = _train(tmp_path, "no-xla", tmp_path / "xla-cache", ["runtime.xla=false"])
    assert dumped == 0 and _traced(summary) >= 3  # traced per bucket and eval shape, not compiled
    assert summary["compile_count"]["xla"] == {"compiled": 0, "loaded": 0, "cache": True}
