"""The training loop: data, model, compiled steps, summaries, checkpoints, divergence.

Everything stateful lives here, outside the compiled steps: reading step outputs, writing
summaries, evaluating, checkpointing, deciding that a run diverged. ``_train`` is the whole
run in one screen: ``build_run``, restore the checkpoint (weights and the loop's history), then
each step trains, logs, maybe evaluates (``Evaluator``) and maybe checkpoints; ``_summary``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from trainer import compile_cache
from trainer.atomic import read_json, write_json
from trainer.data import prepare
from trainer.data.tfdata import train_dataset
from trainer.faults import Stopped
from trainer.machine import peak_rss_mb
from trainer.models import BATCH_NORMS, build_model, plugin
from trainer.memory import keep_large_blocks, release_free_memory
from trainer.progress import StepReporter
from trainer.rundir import EVAL, FINISHED, META, PROMPT_COUNT, SUMMARY, TOKENIZER, TRAIN
from trainer.telemetry.instruments import Extremes, is_instrument
from trainer.telemetry.samples import sample_prompts
from trainer.telemetry.spikes import SpikeCounter
from trainer.telemetry.tensorboard import RunWriters, expand, truncate_events
from trainer.train import checkpoint
from trainer.train.evaluation import Evaluator
from trainer.train.optimizer import decay_groups, make_optimizer
from trainer.train.preempt import stop_requests
from trainer.train.rundir import (collect_meta, inspect_run_dir, norm_contract_checks, run_lock,
                                  save_text_files)
from trainer.train.timing import Throughput, Timings
from trainer.train.step import Step, make_eval_step, make_train_step
from trainer.train.strategy import make_strategy, precision

# Keys a variant is described by in the HParams dashboard.
HPARAM_KEYS = ("model.norm", "model.placement", "model.residual", "model.num_layers", "model.dim",
               "train.lr", "train.warmup_steps", "train.clip_norm", "train.seed", "data.source")


def run_training(cfg, run_dir: Path, argv: list[str] | None = None, progress: bool = True) -> dict:
    """Train ``cfg`` into ``run_dir`` (resuming if it holds the same unfinished run).

    Returns the summary dict also written to ``run_dir/summary.json``. A diverged run is a
    result (status "diverged"), not an exception. SIGTERM/SIGINT stop it after the current
    step with a checkpoint and ``Stopped`` (rerunning resumes).
    """
    run_dir = Path(run_dir)
    keep_large_blocks()  # XLA step buffers reuse heap pages instead of page-faulting each step
    if inspect_run_dir(run_dir, cfg) in FINISHED:
        return read_json(run_dir / SUMMARY)
    compile_cache.follow(cfg.data.cache_dir)  # the run's cache root, before anything compiles
    plugin.prepare_run(cfg.model, run_dir)  # a norm from outside the lab fails here, not later
    t = cfg.train
    timings = Timings()
    # Data problems surface before anything is written: no half run dir that looks like a result.
    with timings.phase("data"):
        corpus = prepare(cfg.data, seed=t.seed)
    with run_lock(run_dir, cfg):
        if inspect_run_dir(run_dir, cfg) in FINISHED:  # finished while we waited for data
            return read_json(run_dir / SUMMARY)
        if plugin.is_plugin(cfg.model.norm):
            plugin.keep_copy(cfg.model.norm, run_dir)
        try:
            with precision(cfg), stop_requests() as stop:
                return _train(cfg, run_dir, corpus, argv, progress, stop, timings)
        finally:
            compile_cache.promote()  # what this run compiled, for the next process


@dataclass
class Compiled:
    """A run's model, optimizer and compiled steps (``build_run``)."""

    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    train_step: Step
    eval_step: Step
    # None when the model has no batch statistics or dropout: the inference step gives the
    # same loss, so it is reused rather than compiled (and held in memory) again per shape.
    eval_step_train_mode: Step | None

    xla: bool = True  # runtime.xla: without it nothing is XLA-compiled, nor loaded
    # the persistent cache's entries when the steps were made (compile_count tells new ones)
    cache_before: set = field(default_factory=compile_cache.snapshot)
    # eval programs first traced for the test split (shapes validation lacks; Evaluator.final)
    test_compilations: int = 0

    def compile_count(self) -> dict:
        """Programs traced per step (``test``: the eval step's, for test shapes only);
        ``xla``: of all of them, how many XLA compiled in this run and how many it loaded
        from the persistent cache (``trainer.compile_cache``)."""
        count = {"train": self.train_step.compilations(),
                 "eval": self.eval_step.compilations() - self.test_compilations,
                 "eval_train_mode": self.eval_step_train_mode.compilations()
                 if self.eval_step_train_mode else 0,
                 "test": self.test_compilations}
        traced = sum(count.values()) if self.xla else 0
        return {**count, "xla": compile_cache.account(traced, self.cache_before)}


def build_run(cfg, corpus, strategy) -> Compiled:
    """Model and optimizer (under ``strategy``), then the train, eval and train-mode eval
    steps. The caller seeds first (``keras.utils.set_random_seed``, op determinism): the
    order here is what makes the initial weights, and so every curve, reproducible."""
    t, xla = cfg.train, cfg.runtime.xla
    with strategy.scope():
        model = build_model(cfg.model, corpus.vocab_size, corpus.max_len)
        optimizer = make_optimizer(t)
        optimizer.build(model.trainable_variables)
    train_step = make_train_step(model, optimizer, clip_norm=t.clip_norm,
                                 telemetry=cfg.runtime.telemetry, xla=xla,
                                 shared_update=cfg.runtime.shared_update, strategy=strategy,
                                 z_loss=t.z_loss)
    return Compiled(model, optimizer, train_step, make_eval_step(model, xla=xla),
                    make_eval_step(model, xla=xla, training=True) if model.mode_dependent else None,
                    xla=xla)


class RunningValues:
    """The train steps' running values a resume carries on from: max grad norm, the last
    finite step, loss spikes (``history()`` goes into each checkpoint)."""

    def __init__(self, history: dict, vocab_size: int, log_every: int):
        self.max_grad = history.get("max_grad_norm", 0.0)
        self.last_finite = history.get("last_finite", {})
        self.spikes = SpikeCounter.from_state(vocab_size, log_every, history.get("spikes"))
        self.instruments = Extremes(history.get("instruments"))

    def update(self, step: int, loss: float, grad: float, out: dict) -> None:
        self.spikes.update(step, loss)
        self.max_grad = max(self.max_grad, grad)
        self.last_finite = {"step": step, "loss": loss, "grad_norm": grad}
        self.instruments.update(expand({k: v for k, v in out.items() if is_instrument(k)}))

    def history(self) -> dict:
        return {"max_grad_norm": self.max_grad, "last_finite": self.last_finite,
                "spikes": self.spikes.state(), "instruments": self.instruments.state()}


def _timed_step(train_step, batch, timings: Timings, speed: Throughput) -> tuple[dict, float]:
    """One train step: its outputs and loss. Its time goes to "compile" when it compiled a new
    shape, else to "train" and ``speed``."""
    timings.step_started()
    traces = train_step.compilations()
    t0 = time.perf_counter()
    out = train_step(batch)
    loss = float(out["loss"])  # also the sync point that makes the timing honest
    dt = time.perf_counter() - t0
    if train_step.compilations() != traces:  # compiled a new shape
        timings.add("compile", dt)
        release_free_memory()  # the compiler's garbage, before it adds to the next peak
    else:
        timings.add("train", dt)
        speed.add(dt, float(out["tokens"]), float(np.prod(batch["inputs"].shape)))
    return out, loss


def _train(cfg, run_dir: Path, corpus, argv, progress: bool, stop, timings) -> dict:
    t, stats = cfg.train, corpus.stats()
    keras.utils.set_random_seed(t.seed)
    tf.config.experimental.enable_op_determinism()
    strategy = make_strategy(cfg.runtime.strategy)
    run = build_run(cfg, corpus, strategy)
    manager, start, history = checkpoint.resume(
        checkpoint.make_checkpoint(run.model, run.optimizer, resumable=True), run_dir)
    if start == 0:
        _write_meta(cfg, run_dir, corpus, stats, strategy, argv,
                    decay_groups(run.model.trainable_variables),
                    norm_contract_checks(cfg.model.norm, run.model), announce=progress)
    if start == 0 or not (run_dir / TOKENIZER).is_file():  # a run begun before runs saved it
        save_text_files(run_dir, corpus.tokenizer, sample_prompts(corpus, PROMPT_COUNT))
    writers = _open_curves(cfg, run_dir, start, stats)
    evaluator = Evaluator(cfg, run, corpus, writers, timings, history)
    running, speed = RunningValues(history, corpus.vocab_size, t.log_every), Throughput()
    diverged_step = None
    if start == 0:
        evaluator(0)
    dataset = iter(train_dataset(corpus, t.seed, start_step=start))
    bar, report = _progress(run_dir.name, start, t.steps, progress)
    for step in bar:
        out, loss = _timed_step(run.train_step, next(dataset), timings, speed)
        nonfinite = bool(out["nonfinite"]) or not math.isfinite(loss)
        if nonfinite or loss > t.loss_upper_bound:
            diverged_step = step
            writers.write(TRAIN, {"nonfinite": float(nonfinite), "loss": loss}, step)
            break
        running.update(step, loss, float(out["grad_norm/global"]), out)
        if step % t.log_every == 0 or step == t.steps - 1:
            scalars = expand({k: v for k, v in out.items() if k != "tokens"})
            if (rate := speed.window()) is not None:
                scalars["tokens_per_sec"] = rate
            writers.write(TRAIN, scalars, step)
            bar.set_postfix(loss=f"{loss:.3f}")
        done = step + 1
        report(done, force=done == t.steps)
        if done % t.eval_every == 0 or done == t.steps:
            evaluator(done)
        if done % t.checkpoint_every == 0 or done == t.steps or stop.requested:
            with timings.phase("checkpoint"):
                writers.flush()
                checkpoint.save(manager, done, {**evaluator.history(), **running.history()})
        if stop.requested and done < t.steps:  # pre-empted: the checkpoint above is at `done`
            bar.close()
            writers.close()
            raise Stopped(f"stopped at step {done}; rerun the same command to resume")
    bar.close()
    writers.write(EVAL, {"final/best_eval_loss": evaluator.best,
                           "final/max_grad_norm": running.max_grad,
                           "final/diverged_step": -1 if diverged_step is None else diverged_step},
                  t.steps)
    writers.close()
    final = (evaluator.final(corpus, t.seed, cfg.model.norm in BATCH_NORMS)
             if diverged_step is None else {})
    summary = _summary(t, diverged_step, run, evaluator, running, speed, stats, final, timings)
    checkpoint.save_model(run.model, run_dir)
    write_json(run_dir / SUMMARY, summary)
    return summary


def _progress(name: str, start: int, steps: int, own_bar: bool) -> tuple[tqdm, StepReporter]:
    """The steps ``start .. steps``: the run's own bar (shown when ``own_bar``) and its
    ``StepReporter`` (to a sweep's bar, when a sweep runs it: trainer/progress.py)."""
    bar = tqdm(range(start, steps), initial=start, total=steps, disable=not own_bar, desc=name,
               unit="step", dynamic_ncols=True, leave=False)
    report = StepReporter()
    report(start, force=True)
    return bar, report


def _write_meta(cfg, run_dir: Path, corpus, stats: dict, strategy, argv, decay: dict,
                norm_checks: dict | None, announce: bool = True) -> None:
    """meta.json, and the weight-decay groups (``decay_groups``) once on the console when
    ``announce`` (a run with its own progress bar; a sweep's variants keep them in meta.json);
    ``norm_checks``: a norm from outside the lab's contract checks (None: a lab norm)."""
    d, n = decay["decayed"], decay["not_decayed"]
    if announce:
        print(f"weight decay {cfg.train.weight_decay:g} on {d['tensors']} tensors "
              f"({d['params']:,} parameters), none on {n['tensors']} ({n['params']:,})")
    data_info = {"dataset_fingerprint": corpus.fingerprint,
                 "tokenizer_hash": corpus.tokenizer_hash, "data_stats": stats,
                 "devices": [d.name for d in tf.config.list_logical_devices()],
                 "replicas": strategy.num_replicas_in_sync, "weight_decay": decay}
    if norm_checks is not None:
        data_info["norm_checks"] = norm_checks
    write_json(run_dir / META,
               collect_meta(cfg, argv if argv is not None else sys.argv, data_info))


def _open_curves(cfg, run_dir: Path, start: int, stats: dict) -> RunWriters:
    """The run's summary writers, after dropping curves past the checkpoint at ``start``."""
    # Curves past the checkpoint belong to work that is about to be redone (the evaluation at
    # the checkpoint's own step ran before it was saved; a fresh start redoes everything).
    truncate_events(run_dir / TRAIN, keep_below=start)
    truncate_events(run_dir / EVAL, keep_below=start + 1 if start else 0)
    if start == 0:
        truncate_events(run_dir, keep_below=0)  # the HParams session is written again below
    writers = RunWriters(run_dir)
    if start == 0:
        writers.hparams({k.split(".")[-1]: _hparam(OmegaConf.select(cfg, k)) for k in HPARAM_KEYS})
        writers.write(TRAIN, {"pad_fraction": stats["pad_fraction"]}, 0)
    return writers


def _summary(t, diverged_step, run: Compiled, evaluator: Evaluator, running: RunningValues,
             speed: Throughput, stats: dict, final: dict, timings: Timings) -> dict:
    """summary.json (keys: ``trainer.rundir.SUMMARY_SCHEMA``): the run's result, diverged when
    ``diverged_step`` is set; ``final`` holds ``Evaluator.final``'s losses ({} if diverged)."""
    completed = diverged_step is None
    return {
        "status": "completed" if completed else "diverged",
        "steps": t.steps if completed else diverged_step,
        "diverged_step": diverged_step,
        "final_eval_loss": evaluator.last if completed else None,
        "final_eval_loss_train_mode": evaluator.last_train_mode if completed else None,
        # inference mode with population statistics recomputed after training (BN runs only)
        "final_eval_loss_precise_bn": final.get("final_eval_loss_precise_bn"),
        "final_test_loss": final.get("final_test_loss"),
        "final_test_loss_train_mode": final.get("final_test_loss_train_mode"),
        "final_test_loss_precise_bn": final.get("final_test_loss_precise_bn"),
        "loss_spikes": running.spikes.count,
        "loss_spike_steps": running.spikes.steps,
        "best_eval_loss": evaluator.best if math.isfinite(evaluator.best) else None,
        "last_finite": running.last_finite,
        "max_grad_norm": running.max_grad,
        "probes": evaluator.probes,
        "probes_max": evaluator.probes_max,
        **running.instruments.summary(),
        **speed.summary(),
        "pad_fraction": stats["pad_fraction"],
        "compile_count": run.compile_count(),
        "num_params": int(run.model.count_params()),
        "peak_rss_mb": peak_rss_mb(),
        "end_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "time": timings.summary(),  # seconds by phase and train_share (train/timing.py)
    }


def _hparam(value):
    # A Choice is a str subclass: str() gives its plain value ("layer") for the dashboard.
    return value if type(value) in (bool, int, float, str) else str(value)

