"""After the runs: event readers, sweep tables, plots and the comparison of a run with its rerun
(no TensorFlow, no training code, no claims: tests/test_imports.py).

Modules: ``run`` (one run directory, each file read once), ``events`` (TensorBoard event files
read back), ``config_values`` (a run's config values, a missing key read as its default; the
keys that differ between runs), ``baselines`` (unigram/bigram), ``metrics`` (every derived
number, mean and intervals), ``rule`` (the one threshold and comparison rule), ``summarize`` (a
sweep's tables), ``lr_sweep`` (best rate, LR sensitivity) and ``lr_plot`` (its figure),
``plots``, ``palette`` and ``series`` (the sweep's figures), ``compare`` (a run against its
rerun).
"""
