"""After the runs: event readers, sweep tables, plots and the comparison of a run with its rerun
(no TensorFlow, no training code, no claims: tests/test_imports.py)."""
