"""The run directory's and the results directory's layout, and the summary.json schema: every
file name in one place.

::

    RUN_DIR/config.yaml     CONFIG       the fully resolved config (rerunning it reproduces the run)
    RUN_DIR/meta.json       META         provenance: git sha, packages, machine, data fingerprint
    RUN_DIR/summary.json    SUMMARY      the result, keys in SUMMARY_SCHEMA below
    RUN_DIR/train/          TRAIN        TensorBoard event files: training curves
    RUN_DIR/eval/           EVAL         TensorBoard event files: evaluation curves and probes
    RUN_DIR/checkpoints/    CHECKPOINTS  tf.train checkpoints for resume (never committed)
    RUN_DIR/norm/           NORM_DIR     a norm from outside the lab: the file defining it, and
    RUN_DIR/norm/source.json NORM_SOURCE its spec, original path and SHA-256 (models/plugin.py)
    RUN_DIR/tokenizer.json  TOKENIZER    the run's tokenizer (HF ``tokenizers`` JSON, its bytes hash
                                         to meta.json's tokenizer_hash): generate, the analyses
                                         and model loading need no tokenizer from the data
    RUN_DIR/prompts.json    PROMPTS      the ids of the first PROMPT_COUNT fixed validation
                                         prompts (``generate`` without --prompt reads no data)
    RUN_DIR/model.keras     MODEL        the finished run's model (``checkpoint.save_model``)
    RUN_DIR/.lock           LOCK         held by the process writing the run
    RUN_DIR/baselines.json  BASELINES    unigram/bigram losses of the run's data (results/)
    OUT/reproduce.json      REPRODUCE    the verdict, in a reproduction's directory
    DIR/report.json         REPORT_JSON  evaluate-norm's report (trainer/evaluate), and DIR/report.md
                            REPORT_MD    its page

A results directory (``python -m trainer summarize ROOT``, ``trainer.results.summarize``)::

    ROOT/runs.csv           RUNS_CSV     one row per run
    ROOT/summary.csv        SUMMARY_CSV  one row per variant
    ROOT/summary.md         SUMMARY_MD   the variant table, printed by ``sweep`` and ``summarize``
    ROOT/lr_sweep.csv       LR_SWEEP_CSV best rate and LR sensitivity per variant (rate sweeps)
    ROOT/lr_sweep.md        LR_SWEEP_MD  the same, as a table
    ROOT/plots/             PLOTS        the sweep's figures

A reference root's analyses (``python -m trainer analyze KIND … --out``, ``trainer.analysis``;
the claims in ``trainer.findings`` read them), each output's path ``analysis_output(KIND)``::

    ROOT/analysis/NAME.csv  ANALYSIS     KIND's rows (NAME: KIND with "_" for "-"), beside
                                         NAME.png (its figure) and NAME.meta.json (its stamp)
    ROOT/init/NAME.csv      INIT         the same for ``grad-profile``, the analysis at init

No TensorFlow here: the training loop writes these files, ``trainer.results`` reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

CONFIG = "config.yaml"
META = "meta.json"
SUMMARY = "summary.json"
TRAIN = "train"
EVAL = "eval"
CURVES = (TRAIN, EVAL)  # the event directories, in the order they are read and compared
CHECKPOINTS = "checkpoints"
NORM_DIR = "norm"
NORM_SOURCE = "source.json"
TOKENIZER = "tokenizer.json"
PROMPTS = "prompts.json"
PROMPT_COUNT = 4  # fixed validation prompts saved in PROMPTS: what `generate` continues by default
MODEL = "model.keras"
LOCK = ".lock"
BASELINES = "baselines.json"
REPRODUCE = "reproduce.json"
REPORT_JSON = "report.json"  # evaluate-norm's report (trainer/evaluate), and its page:
REPORT_MD = "report.md"

RUNS_CSV = "runs.csv"
SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"
LR_SWEEP_CSV = "lr_sweep.csv"
LR_SWEEP_MD = "lr_sweep.md"
PLOTS = "plots"
ANALYSIS = "analysis"
INIT = "init"


def analysis_name(kind: str) -> str:
    """An analysis KIND's file stem: ``ln-backward`` -> ``ln_backward``."""
    return kind.replace("-", "_")


def analysis_output(kind: str, suffix: str = ".csv") -> str:
    """The path under a reference root of what ``analyze KIND`` writes there, e.g.
    ``analysis/decode.csv``; ``init/grad_profile.csv`` for ``grad-profile`` (``suffix``:
    ``.png`` for its figure)."""
    return f"{INIT if kind == 'grad-profile' else ANALYSIS}/{analysis_name(kind)}{suffix}"

FINISHED = ("completed", "diverged")  # summary.json statuses of a run that will not train on

# How ``reproduce`` compares a key of two summaries:
EXACT = "exact"            # equal, even where a tolerance applies (a status, a step, a count)
VALUE = "value"            # a number: equal, or within the rerun's tolerance
PROBES = "probes"          # a {tag: value} dict compared tag by tag, as values
WALL_CLOCK = "wall clock"  # timing or memory of this process: never reproducible, not compared
RECORD = "record"          # describes the run (sizes, bookkeeping): not compared


@dataclass(frozen=True)
class Key:
    """One key of summary.json: its name, how ``reproduce`` compares it (``compare``), whether
    it is a column of a results directory's runs.csv (``column``), and what it holds."""

    name: str
    compare: str
    column: bool
    doc: str


SUMMARY_SCHEMA = (
    Key("status", EXACT, True, "completed | diverged"),
    Key("steps", EXACT, True, "optimizer steps run (the diverged step for a diverged run)"),
    Key("diverged_step", EXACT, True, "first step with a non-finite or too large loss; null"),
    Key("final_eval_loss", VALUE, True, "validation loss at the last step, inference mode"),
    Key("final_eval_loss_train_mode", VALUE, True, "the same batches with BN in training mode"),
    Key("final_eval_loss_precise_bn", VALUE, True,
        "BN runs: inference mode on population statistics (PreciseBN); else null"),
    Key("final_test_loss", VALUE, True,
        "test split, once after the last step, inference mode; null when diverged"),
    Key("final_test_loss_train_mode", VALUE, True,
        "BN runs: the test split with BN in training mode (batch statistics); else null"),
    Key("final_test_loss_precise_bn", VALUE, True,
        "BN runs: the test split on population statistics; else null"),
    Key("best_eval_loss", VALUE, True, "lowest validation loss over the evaluations"),
    Key("loss_spikes", EXACT, True, "steps counted as loss spikes (trainer.telemetry.spikes)"),
    Key("loss_spike_steps", EXACT, False, "those steps (the first 100)"),
    Key("max_grad_norm", VALUE, True, "largest global gradient norm before clipping"),
    Key("last_finite", RECORD, False, "step, loss and gradient norm of the last finite step"),
    Key("probes", PROBES, False, "final probe values, {tag: value}"),
    Key("probes_max", PROBES, False,
        "each probe's maximum over the evaluations (step 0 included), {tag: value}"),
    Key("instruments", PROBES, False,
        "the instability instruments at the last step, {tag: value} (telemetry/instruments.py)"),
    Key("instruments_max", PROBES, False, "each instrument's maximum over every step"),
    Key("instruments_min", PROBES, False, "each instrument's minimum over every step"),
    Key("tokens_per_sec", WALL_CLOCK, True, "real (unpadded) tokens per second of train steps"),
    Key("padded_tokens_per_sec", WALL_CLOCK, False, "the same, pads counted"),
    Key("pad_fraction", RECORD, True, "share of pad tokens in one training epoch"),
    Key("compile_count", RECORD, False,
        "programs traced per step (train, eval, eval_train_mode, test) and XLA's "
        "compiled/loaded split"),
    Key("num_params", RECORD, False, "parameters of the model"),
    Key("peak_rss_mb", WALL_CLOCK, False, "peak resident memory of the process"),
    Key("end_time", WALL_CLOCK, False, "when summary.json was written"),
    Key("time", WALL_CLOCK, False, "seconds by phase, wall_s and train_share (train/timing.py)"),
)
SUMMARY_KEYS = tuple(k.name for k in SUMMARY_SCHEMA)


def keys(*compare: str) -> tuple[str, ...]:
    """Names of the summary keys compared as any of ``compare`` (EXACT, VALUE, ...)."""
    return tuple(k.name for k in SUMMARY_SCHEMA if k.compare in compare)


def columns() -> tuple[str, ...]:
    """Names of the summary keys that are runs.csv columns, in schema order."""
    return tuple(k.name for k in SUMMARY_SCHEMA if k.column)
