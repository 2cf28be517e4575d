"""Compiled steps, the training loop, run directories and distribution strategies.

Modules: ``step`` (pure train and eval steps, XLA), ``loop`` (the training loop), ``evaluation``
(validation and the final test split), ``checkpoint`` (save, resume, the finished model),
``optimizer`` (AdamW, the weight-decay rule), ``strategy`` (``runtime.strategy``), ``rundir``
(writing a run directory: lock, config, meta.json), ``preempt`` (signals), ``timing`` (where a
run's time goes), ``command`` (``python -m trainer train``, for the CLI and sweep workers alike)."""
