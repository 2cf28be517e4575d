"""Evaluating a run: the validation loss at eval steps (``Evaluator``), and once after the last
step the test split and the losses on population BN statistics (``Evaluator.final``).

Every evaluation runs the compiled eval step over fixed batches (``Corpus.eval_batches``: the
same for every run and seed) in inference mode; the train-mode loss reruns them with BN on batch
statistics, restoring the running statistics afterwards. None of it changes the model.
"""

from __future__ import annotations

import math

from trainer.memory import release_free_memory
from trainer.rundir import EVAL
from trainer.telemetry.precise_bn import BATCHES as PRECISE_BN_BATCHES, population_statistics
from trainer.telemetry.probes import ProbeBatch, frozen_state, run_probes
from trainer.telemetry.samples import Samples
from trainer.telemetry.tensorboard import RunWriters
from trainer.train.timing import Timings


def running_max(maxima: dict[str, float], values: dict[str, float]) -> dict[str, float]:
    """``maxima`` updated with ``values`` tag by tag; a NaN never replaces a number (nor a
    number a NaN-free maximum), so one non-finite evaluation does not erase the record."""
    out = dict(maxima)
    for tag, value in values.items():
        old = out.get(tag)
        if old is None or math.isnan(old) or (not math.isnan(value) and value > old):
            out[tag] = value
    return out


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


class Evaluator:
    """Evaluations at eval steps: the eval loss (inference mode and train mode), probes and
    their histograms when telemetry is on, all written to the eval curves; keeps the best and
    last values, and each probe's last and maximum value (``probes``, ``probes_max``), which
    carry over a resume through ``history()``.

    Args:
        cfg: the run's resolved config (``data.eval_batches``, ``runtime.telemetry``,
            ``train.samples``: greedy continuations written to the Text tab, 0 = none).
        run: the run's model and compiled steps (``trainer.train.loop.Compiled``).
        corpus: the run's ``Corpus`` (validation and test batches).
        writers: the run's TensorBoard writers.
        timings: where evaluation time is added (phase "eval").
        history: the restored checkpoint's history ({} for a fresh run).
    """

    def __init__(self, cfg, run, corpus, writers: RunWriters, timings: Timings, history: dict):
        self.run, self.writers, self.timings = run, writers, timings
        self.telemetry = cfg.runtime.telemetry
        self.max_batches = cfg.data.eval_batches or None
        self.batches = corpus.eval_batches("validation", self.max_batches)
        self.best = history.get("best_eval_loss", math.inf)
        self.last = history.get("final_eval_loss")
        self.last_train_mode = history.get("final_eval_loss_train_mode")
        self.probes = history.get("probes", {})
        self.probes_max = history.get("probes_max", {})
        self.probe = ProbeBatch(self.batches, corpus.max_len)
        self.samples = Samples(run.model, corpus, cfg.train.samples) if cfg.train.samples else None

    def __call__(self, step: int) -> None:
        with self.timings.phase("eval"):
            run = self.run
            compiled = run.eval_step.compilations()
            loss = evaluate(run.eval_step, self.batches)
            train_mode = (evaluate_train_mode(run.model, run.eval_step_train_mode, self.batches)
                          if run.eval_step_train_mode else loss)
            scalars = {"loss": loss, "perplexity": math.exp(min(loss, 50.0)),
                       "loss_train_mode": train_mode}
            if self.telemetry:
                self.probes, histograms = run_probes(run.model, self.probe)
                self.probes_max = running_max(self.probes_max, self.probes)
                scalars.update(self.probes)
                self.writers.histograms(EVAL, histograms, step)
            self.writers.write(EVAL, scalars, step)
            if self.samples is not None:
                self.writers.text(EVAL, "samples", self.samples(), step)
            if run.eval_step.compilations() != compiled:
                release_free_memory()
            self.last, self.last_train_mode = loss, train_mode
            if math.isfinite(loss):
                self.best = min(self.best, loss)

    def final(self, corpus, seed: int, batch_norm: bool) -> dict:
        """The losses measured once after the last step, by their summary.json keys: the test
        split in inference mode (None when the split is empty) and, when ``batch_norm``, the
        test loss with batch statistics (training-mode BN, as ``loss_train_mode``) and the
        validation and test losses in inference mode on population statistics recomputed over
        training batches (PreciseBN; None otherwise). Test shapes the validation batches did not
        have are traced here: ``run.test_compilations`` counts them."""
        run = self.run
        test = corpus.eval_batches("test", self.max_batches)
        out = dict.fromkeys(("final_test_loss", "final_test_loss_train_mode",
                             "final_eval_loss_precise_bn", "final_test_loss_precise_bn"))
        with self.timings.phase("eval"):
            traced = run.eval_step.compilations()
            if test:
                out["final_test_loss"] = evaluate(run.eval_step, test)
            run.test_compilations = run.eval_step.compilations() - traced
            if not batch_norm:
                return out
            if test and run.eval_step_train_mode:
                out["final_test_loss_train_mode"] = evaluate_train_mode(
                    run.model, run.eval_step_train_mode, test)
            train = [corpus.train_batch(i, seed) for i in range(PRECISE_BN_BATCHES)]
            with population_statistics(run.model, train):
                out["final_eval_loss_precise_bn"] = evaluate(run.eval_step, self.batches)
                if test:
                    out["final_test_loss_precise_bn"] = evaluate(run.eval_step, test)
        return out

    def history(self) -> dict:
        return {"best_eval_loss": self.best, "final_eval_loss": self.last,
                "final_eval_loss_train_mode": self.last_train_mode, "probes": self.probes,
                "probes_max": self.probes_max}
