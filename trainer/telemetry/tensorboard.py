"""TensorBoard writers of one run: ``RUN_DIR/train`` and ``RUN_DIR/eval`` event files, HParams.

Tags inside each writer carry no ``train/`` or ``eval/`` prefix: TensorBoard shows the writer's
directory as the run, so ``loss`` in ``RUN_DIR/eval`` is the "eval loss" of run RUN_DIR — and the
HParams plugin finds metrics by (group=train|eval, tag) the same way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.custom_scalar import layout_pb2, summary as cs_summary
from tensorboard.plugins.hparams import api as hp

from trainer.faults import writing
from trainer.rundir import CURVES, EVAL, TRAIN

# Final values the HParams table shows, as (writer group, tag).
HPARAM_METRICS = ((EVAL, "loss"), (EVAL, "final/best_eval_loss"), (EVAL, "loss_train_mode"),
                  (EVAL, "final/diverged_step"), (EVAL, "final/max_grad_norm"),
                  (TRAIN, "loss"), (EVAL, "probe/batch_invariance"),
                  (EVAL, "probe/token_cosine/block_0"))


def expand(metrics: dict) -> dict[str, float]:
    """Turn step outputs into scalar tags: vectors with a ``{block}`` field become one tag each."""
    out = {}
    for key, value in metrics.items():
        value = np.asarray(value)
        if "{block}" in key:
            for i, v in enumerate(value.reshape(-1)):
                out[key.format(block=f"block_{i}")] = float(v)
        else:
            out[key] = float(value)
    return out


class RunWriters:
    """The run's event-file writers; one ``write(group, scalars, step)`` for all summaries."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.writers = {g: tf.summary.create_file_writer(str(self.run_dir / g))
                        for g in CURVES}

    def write(self, group: str, scalars: dict[str, float], step: int) -> None:
        with writing("events", self.run_dir / group), self.writers[group].as_default(step=step):
            for tag, value in scalars.items():
                tf.summary.scalar(tag, value)

    def histograms(self, group: str, tensors: dict[str, np.ndarray], step: int) -> None:
        with writing("events", self.run_dir / group), self.writers[group].as_default(step=step):
            for tag, value in tensors.items():
                tf.summary.histogram(tag, value)

    def text(self, group: str, tag: str, table: np.ndarray, step: int) -> None:
        """A text summary (Text tab): a string array, shown as a table (nothing when empty)."""
        if table.size:
            with writing("events", self.run_dir / group), self.writers[group].as_default(step=step):
                tf.summary.text(tag, tf.constant(table.astype(str)))

    def hparams(self, values: dict) -> None:
        """One HParams session per run (written at the run root) plus the custom-scalars layout."""
        with writing("events", self.run_dir):
            self._hparams(values)

    def _hparams(self, values: dict) -> None:
        writer = tf.summary.create_file_writer(str(self.run_dir))
        with writer.as_default(step=0):
            hp.hparams(values, trial_id=self.run_dir.name)
            tf.summary.experimental.write_raw_pb(
                cs_summary.pb(custom_scalars_layout()).SerializeToString(), step=0)
        writer.close()

    def flush(self) -> None:
        for group, w in self.writers.items():
            with writing("events", self.run_dir / group):  # a full disk surfaces here
                w.flush()

    def close(self) -> None:
        for group, w in self.writers.items():
            with writing("events", self.run_dir / group):
                w.close()


def truncate_events(log_dir: Path, keep_below: int) -> None:
    """Drop events at steps >= ``keep_below`` from a directory's event files (resume).

    A run killed after its last checkpoint wrote curves for steps it will redo; keeping them
    would show those steps twice. The kept events are rewritten into one file that replaces the
    old ones (written to a temp name first, so a crash here loses nothing).
    """
    files = sorted(Path(log_dir).glob("events.out.tfevents.*"))
    if not files:
        return
    kept, dropped = [], 0
    for record in tf.data.TFRecordDataset([str(f) for f in files]):
        event = event_pb2.Event.FromString(record.numpy())
        if event.HasField("summary") and event.step >= keep_below:
            dropped += 1
        else:
            kept.append(record.numpy())
    if not dropped:
        return
    tmp = files[0].with_name(f".{files[0].name}.tmp")  # outside the events.out.* glob
    with tf.io.TFRecordWriter(str(tmp)) as writer:
        for record in kept:
            writer.write(record)
    tmp.replace(files[0])
    for f in files[1:]:
        f.unlink()


def write_hparams_config(root: Path, hparam_names: list[str], swept: tuple[str, ...] = ()) -> None:
    """The experiment-level HParams config a sweep writes once at its results root.

    ``swept`` names are marked ``differs``: TensorBoard (2.21) orders the table's columns by
    (not differs, name) and checks only the first few by default, so without the mark the
    sweep's own axes (``residual``, ``placement``) sorted alphabetically behind the constant
    ones and started unchecked."""
    from tensorboard.plugins.hparams import api_pb2, summary as hp_summary

    infos = [api_pb2.HParamInfo(name=n, differs=n in swept) for n in hparam_names]
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(group=group, tag=tag),
                                  display_name=f"{group}/{tag}") for group, tag in HPARAM_METRICS]
    writer = tf.summary.create_file_writer(str(root))
    with writer.as_default(step=0):
        tf.summary.experimental.write_raw_pb(
            hp_summary.experiment_pb(infos, metrics).SerializeToString(), step=0)
    writer.close()


def custom_scalars_layout() -> layout_pb2.Layout:
    """One multi-line chart per per-block family (regex over the block index)."""
    families = [("grad_norm", r"grad_norm/block_\d+$"),
                ("token_std (residual stream)", r"activation/block_\d+/token_std"),
                ("token_mean (residual stream)", r"activation/block_\d+/token_mean"),
                ("rms (residual stream)", r"activation/block_\d+/rms"),
                ("token_std after norm", r"activation_normed/block_\d+/token_std"),
                ("token cosine (rank collapse)", r"probe/token_cosine/block_\d+"),
                ("attention logit max (logit growth)", r"attention/block_\d+/max_logit"),
                ("attention entropy (entropy collapse)", r"attention/block_\d+/entropy"),
                ("log Z (output-logit drift)", r"output/log_z_(mean|max)"),
                ("BN statistic drift", r"probe/bn_stat_drift/block_\d+"),
                ("DyT saturation (attention norm)", r"probe/dyt_saturation/block_\d+$"),
                ("DyT saturation (FFN norm)", r"probe/dyt_saturation/block_\d+/ffn$")]
    charts = [layout_pb2.Chart(title=title,
                               multiline=layout_pb2.MultilineChartContent(tag=[regex]))
              for title, regex in families]
    return layout_pb2.Layout(category=[layout_pb2.Category(title="per block", chart=charts)])


def serve(logdir: Path, port: int, host: str) -> int:
    """Run TensorBoard on ``logdir`` until interrupted (``python -m trainer tensorboard``)."""
    import time

    from tensorboard import program

    from trainer.config import ConfigError

    if not logdir.is_dir():
        raise ConfigError(f"no such directory to show: {logdir}")
    board = program.TensorBoard()
    board.configure(logdir=str(logdir), port=port, host=host, load_fast="false")
    try:
        url = board.launch()
    except program.TensorBoardServerException as e:  # e.g. the port is taken
        raise ConfigError(f"TensorBoard could not start: {e.msg}") from None
    print(f"TensorBoard on {logdir} at {url} (Ctrl-C to stop)", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
