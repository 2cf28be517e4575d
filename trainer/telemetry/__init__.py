"""What a run records: in-step statistics, probes and TensorBoard writers.

Modules: ``stats`` (statistics inside the compiled step), ``probes`` (evaluation-time probes of
the claims) and ``definitions`` (what they measure, as numbers, no TensorFlow), ``spikes`` (the
one definition of a loss spike), ``contract`` (the norm contract's properties measured on a model: evaluate-norm's checks, an
outside norm's run at init), ``instruments`` (the instability instruments' extremes over a
run, for summary.json), ``precise_bn`` (population statistics after training),
``samples`` (greedy continuations of fixed prompts), ``tensorboard`` (the run's writers)."""
