"""The training loop: data, model, compiled steps, summaries, checkpoints, divergence.

Everything stateful lives here, outside the compiled steps: reading step outputs, writing
summaries, evaluating, checkpointing, deciding that a run diverged.
"""

from __future__ import annotations

import math
import resource
import sys
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from omegaconf import OmegaConf
from tqdm.auto import tqdm

from trainer.data import prepare
from trainer.faults import Stopped
from trainer.models import BATCH_NORMS, build_model
from trainer.memory import keep_large_blocks, release_free_memory
from trainer.telemetry.precise_bn import BATCHES as PRECISE_BN_BATCHES, population_statistics
from trainer.telemetry.probes import ProbeBatch, frozen_state, run_probes
from trainer.telemetry.spikes import SpikeCounter
from trainer.telemetry.tensorboard import RunWriters, expand, truncate_events
from trainer.train import checkpoint
from trainer.train.preempt import stop_requests
from trainer.train.rundir import collect_meta, inspect_run_dir, read_json, run_lock, write_json
from trainer.train.timing import Timings
from trainer.train.step import make_eval_step, make_replicated_train_step, make_train_step
from trainer.train.strategy import make_strategy

# Keys a variant is described by in the HParams dashboard.
HPARAM_KEYS = ("model.norm", "model.placement", "model.residual", "model.num_layers", "model.dim",
               "train.lr", "train.warmup_steps", "train.clip_norm", "train.seed", "data.source")
# Variables no weight decay is applied to: norm gains/biases, gates, biases, embeddings.
NO_DECAY = ["gamma", "beta", "scale", "alpha", "gate", "bias", "embeddings"]


def make_schedule(train_cfg) -> keras.optimizers.schedules.LearningRateSchedule:
    """Linear warm-up from 0 to ``lr``, then cosine decay to ``lr * min_lr_ratio`` (or constant)."""
    t = train_cfg
    alpha = t.min_lr_ratio if t.decay == "cosine" else 1.0
    if t.warmup_steps:
        return keras.optimizers.schedules.CosineDecay(
            0.0, decay_steps=max(t.steps - t.warmup_steps, 1), alpha=alpha,
            warmup_target=t.lr, warmup_steps=t.warmup_steps)
    return keras.optimizers.schedules.CosineDecay(t.lr, decay_steps=t.steps, alpha=alpha)


def make_optimizer(train_cfg) -> keras.optimizers.Optimizer:
    """AdamW on the schedule; no decay on norm parameters, gates, biases and embeddings."""
    opt = keras.optimizers.AdamW(learning_rate=make_schedule(train_cfg),
                                 weight_decay=train_cfg.weight_decay, beta_1=0.9, beta_2=0.95,
                                 epsilon=1e-8)
    opt.exclude_from_weight_decay(var_names=NO_DECAY)
    return opt


def evaluate(eval_step, batches) -> float:
    """Mean token loss over the fixed evaluation batches."""
    total = tokens = 0.0
    for batch in batches:
        out = eval_step(batch)
        total += float(out["loss_sum"])
        tokens += float(out["tokens"])
    return total / max(tokens, 1.0)


def evaluate_train_mode(model, eval_step, batches) -> float:
    """Eval loss with BN in training mode; running statistics are restored afterwards."""
    with frozen_state(model):
        return evaluate(eval_step, batches)


def run_training(cfg, run_dir: Path, argv: list[str] | None = None, progress: bool = True) -> dict:
    """Train ``cfg`` into ``run_dir`` (resuming if it holds the same unfinished run).

    Returns the summary dict also written to ``run_dir/summary.json``. A diverged run is a
    result (status "diverged"), not an exception. SIGTERM/SIGINT stop it after the current
    step with a checkpoint and ``Stopped`` (rerunning resumes).
    """
    run_dir = Path(run_dir)
    keep_large_blocks()  # XLA step buffers reuse heap pages instead of page-faulting each step
    state = inspect_run_dir(run_dir, cfg)
    if state == "completed":
        return read_json(run_dir / "summary.json")
    t = cfg.train
    timings = Timings()
    # Data problems surface before anything is written: no half run dir that looks like a result.
    with timings.phase("data"):
        corpus = prepare(cfg.data, seed=t.seed)
    with run_lock(run_dir, cfg):
        if inspect_run_dir(run_dir, cfg) == "completed":  # finished while we waited for data
            return read_json(run_dir / "summary.json")
        # bfloat16 compute with float32 variables; norms and the head stay float32 (models/).
        previous = keras.mixed_precision.global_policy()
        keras.mixed_precision.set_global_policy(
            "mixed_bfloat16" if cfg.runtime.mixed_precision else "float32")
        try:
            with stop_requests() as stop:
                return _train(cfg, run_dir, corpus, argv, progress, stop, timings)
        finally:
            keras.mixed_precision.set_global_policy(previous)


def _train(cfg, run_dir: Path, corpus, argv, progress: bool, stop, timings) -> dict:
    t = cfg.train
    keras.utils.set_random_seed(t.seed)
    tf.config.experimental.enable_op_determinism()
    strategy = make_strategy(cfg.runtime.strategy)
    with strategy.scope():
        model = build_model(cfg.model, corpus.vocab_size, corpus.max_len)
        optimizer = make_optimizer(t)
        optimizer.build(model.trainable_variables)
    step_var = tf.Variable(0, dtype=tf.int64, name="step")
    ckpt = checkpoint.make_checkpoint(model, optimizer, step_var)
    manager, start, history = checkpoint.restore(ckpt, run_dir)
    if start == 0:
        data_info = {"dataset_fingerprint": corpus.fingerprint,
                     "tokenizer_hash": corpus.tokenizer_hash, "data_stats": corpus.stats(),
                     "devices": [d.name for d in tf.config.list_logical_devices()],
                     "replicas": strategy.num_replicas_in_sync}
        write_json(run_dir / "meta.json",
                   collect_meta(cfg, argv if argv is not None else sys.argv, data_info))
    # Curves past the checkpoint belong to work that is about to be redone (the evaluation at
    # the checkpoint's own step ran before it was saved; a fresh start redoes everything).
    truncate_events(run_dir / "train", keep_below=start)
    truncate_events(run_dir / "eval", keep_below=start + 1 if start else 0)
    if start == 0:
        truncate_events(run_dir, keep_below=0)  # the HParams session is written again below

    xla = cfg.runtime.xla
    if strategy.num_replicas_in_sync > 1:
        train_step = make_replicated_train_step(strategy, model, optimizer,
                                                clip_norm=t.clip_norm, xla=xla)
    else:
        train_step = make_train_step(model, optimizer, clip_norm=t.clip_norm,
                                     telemetry=cfg.runtime.telemetry, xla=xla,
                                     shared_update=cfg.runtime.shared_update)
    eval_step = make_eval_step(model, xla=xla)
    # Without batch statistics or dropout the train-mode program would be the same program:
    # reuse it rather than compile (and hold in memory) a copy per eval shape.
    eval_step_train_mode = (make_eval_step(model, xla=xla, training=True)
                            if model.mode_dependent else None)
    eval_batches = corpus.eval_batches("validation", cfg.data.eval_batches or None)

    writers = RunWriters(run_dir)
    if start == 0:
        writers.hparams({k.split(".")[-1]: _hparam(OmegaConf.select(cfg, k)) for k in HPARAM_KEYS})
        writers.write("train", {"pad_fraction": corpus.stats()["pad_fraction"]}, 0)

    best = history.get("best_eval_loss", math.inf)
    max_grad = history.get("max_grad_norm", 0.0)
    last_eval = history.get("final_eval_loss")
    last_train_mode = history.get("final_eval_loss_train_mode")
    last_probes = history.get("probes", {})
    spikes = SpikeCounter.from_state(corpus.vocab_size, t.log_every, history.get("spikes"))
    status, diverged_step, last_finite = "completed", None, history.get("last_finite", {})
    real_tokens = padded_tokens = 0.0
    timed = 0.0
    window_tokens = window_time = 0.0

    probe = ProbeBatch(eval_batches, corpus.max_len)

    def run_eval(step: int) -> None:
        with timings.phase("eval"):
            _run_eval(step)

    def _run_eval(step: int) -> None:
        nonlocal best, last_eval, last_train_mode, last_probes
        compiled = eval_step.experimental_get_tracing_count()
        loss = evaluate(eval_step, eval_batches)
        train_mode = (evaluate_train_mode(model, eval_step_train_mode, eval_batches)
                      if eval_step_train_mode else loss)
        scalars = {"loss": loss, "perplexity": math.exp(min(loss, 50.0)),
                   "loss_train_mode": train_mode}
        if cfg.runtime.telemetry:
            last_probes, histograms = run_probes(model, probe)
            scalars.update(last_probes)
            writers.histograms("eval", histograms, step)
        writers.write("eval", scalars, step)
        if eval_step.experimental_get_tracing_count() != compiled:
            release_free_memory()
        last_eval, last_train_mode = loss, train_mode
        if math.isfinite(loss):
            best = min(best, loss)

    if start == 0:
        run_eval(0)
    dataset = iter(corpus.train_dataset(t.seed, start_step=start))
    bar = tqdm(range(start, t.steps), initial=start, total=t.steps, disable=not progress,
               desc=run_dir.name, unit="step", dynamic_ncols=True, leave=False)
    for step in bar:
        batch = next(dataset)
        timings.step_started()
        traces = train_step.experimental_get_tracing_count()
        t0 = time.perf_counter()
        out = train_step(batch)
        loss = float(out["loss"])  # also the sync point that makes the timing honest
        dt = time.perf_counter() - t0
        n_real = float(out["tokens"])
        if train_step.experimental_get_tracing_count() != traces:  # compiled a new shape
            timings.add("compile", dt)
            release_free_memory()  # the compiler's garbage, before it adds to the next peak
        else:  # compiling steps don't count
            timings.add("train", dt)
            timed += dt
            real_tokens += n_real
            padded_tokens += float(np.prod(batch["inputs"].shape))
            window_tokens += n_real
            window_time += dt
        nonfinite = bool(out["nonfinite"]) or not math.isfinite(loss)
        if nonfinite or loss > t.loss_upper_bound:
            status, diverged_step = "diverged", step
            writers.write("train", {"nonfinite": float(nonfinite), "loss": loss}, step)
            break
        spikes.update(step, loss)
        grad = float(out["grad_norm/global"])
        max_grad = max(max_grad, grad)
        last_finite = {"step": step, "loss": loss, "grad_norm": grad}
        if step % t.log_every == 0 or step == t.steps - 1:
            scalars = expand({k: v for k, v in out.items() if k != "tokens"})
            if window_time:
                scalars["tokens_per_sec"] = window_tokens / window_time
            writers.write("train", scalars, step)
            window_tokens = window_time = 0.0
            bar.set_postfix(loss=f"{loss:.3f}")
        done = step + 1
        if done % t.eval_every == 0 or done == t.steps:
            run_eval(done)
        if done % t.checkpoint_every == 0 or done == t.steps or stop.requested:
            with timings.phase("checkpoint"):
                writers.flush()
                checkpoint.save(manager, step_var, done,
                                {"best_eval_loss": best, "max_grad_norm": max_grad,
                                 "final_eval_loss": last_eval,
                                 "final_eval_loss_train_mode": last_train_mode,
                                 "last_finite": last_finite, "spikes": spikes.state(),
                                 "probes": last_probes}, run_dir)
        if stop.requested and done < t.steps:  # pre-empted: the checkpoint above is at `done`
            bar.close()
            writers.close()
            raise Stopped(f"stopped at step {done}; rerun the same command to resume")
    bar.close()
    final = {"final/best_eval_loss": best, "final/max_grad_norm": max_grad,
             "final/diverged_step": -1 if diverged_step is None else diverged_step}
    writers.write("eval", final, t.steps)
    writers.close()
    precise_bn = None
    if status == "completed" and model.block_args["norm"] in BATCH_NORMS:
        with timings.phase("eval"), population_statistics(
                model, [corpus.train_batch(i, t.seed) for i in range(PRECISE_BN_BATCHES)]):
            precise_bn = evaluate(eval_step, eval_batches)

    stats = corpus.stats()
    summary = {
        "status": status,
        "steps": (diverged_step if status == "diverged" else t.steps),
        "diverged_step": diverged_step,
        "final_eval_loss": last_eval if status == "completed" else None,
        "final_eval_loss_train_mode": last_train_mode if status == "completed" else None,
        # inference mode with population statistics recomputed after training (BN runs only)
        "final_eval_loss_precise_bn": precise_bn,
        "loss_spikes": spikes.count,
        "loss_spike_steps": spikes.steps,
        "best_eval_loss": best if math.isfinite(best) else None,
        "last_finite": last_finite,
        "max_grad_norm": max_grad,
        "probes": last_probes,
        "tokens_per_sec": real_tokens / timed if timed else None,
        "padded_tokens_per_sec": padded_tokens / timed if timed else None,
        "pad_fraction": stats["pad_fraction"],
        "compile_count": {"train": train_step.experimental_get_tracing_count(),
                          "eval": eval_step.experimental_get_tracing_count(),
                          "eval_train_mode": eval_step_train_mode.experimental_get_tracing_count()
                          if eval_step_train_mode else 0},
        "num_params": int(model.count_params()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "end_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "time": timings.summary(),  # seconds by phase and train_share (train/timing.py)
    }
    write_json(run_dir / "summary.json", summary)
    return summary


def _hparam(value):
    return value if isinstance(value, (bool, int, float, str)) else str(value)

