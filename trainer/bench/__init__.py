"""``python -m trainer bench``: the performance benchmark (docs/performance.md).

Modules: ``cli`` (arguments), ``runner`` (the report of one config), ``throughput`` (train-step
tokens/s, telemetry on/off interleaved, pad-to-max), ``flops`` (model FLOPs, matmul peak),
``profile`` (forward/backward/update of one shape), ``memory`` (peak RSS of a child training
run), ``data`` (``bench data``: data preparation), ``report`` (targets, text, the docs table),
``sweep`` (``bench sweep``: a sweep's wall time, the old and the new way), ``decode``
(``bench decode``: the compiled and the per-token decode loop, and recomputing, tokens/s),
``device`` (``scripts/device_check.sh``'s accelerator report), ``__main__``
(``python -m trainer.bench``, the same command through ``cli.main``).
"""
