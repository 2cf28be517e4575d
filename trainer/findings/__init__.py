"""The claims of the teaching texts, judged on the reference runs -> results/README.md.

Above ``results/`` (run tables, plots) and ``analysis/`` (checkpoint analyses), which never
import it; the one module they may read is ``thresholds`` (the pre-registered numbers, no
TensorFlow).

- ``thresholds``: every threshold, with its reason;
- ``claim``: the ``Finding`` record and its formatting;
- ``reference``: the reference runs as one object, looked up by config values;
- ``core`` (S, F1-F7), ``batch`` (F8, F9), ``depth`` (F11), ``ln`` (F13), ``stream`` (F10, F12,
  F14): one function per claim;
- ``page``: results/README.md; ``figures``: the claims' own figures.
"""
