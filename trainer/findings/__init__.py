"""The claims of the teaching texts, judged on the reference runs -> results/README.md.

Above ``results/`` (run tables, plots) and ``analysis/`` (checkpoint analyses), which never
import it: the thresholds the analyses draw live in ``trainer.analysis.thresholds``, and this
package's ``thresholds`` imports them under the same names.

- ``thresholds``: every threshold, with its reason;
- ``claim``: the ``Finding`` record and its formatting;
- ``reference``: the reference runs as one object, looked up by config values;
- ``core`` (S, F1-F4), ``dynamics`` (F5, F6), ``batch`` (F7-F9), ``stream`` (F10, F12, F14),
  ``depth`` (F11), ``ln`` (F13), ``inference`` (F15-F19): one function per claim (F13's and
  F18's numbers from ``analyze ln-numbers`` and ``ln-epsilon``: the page needs no TensorFlow);
- ``instability``: pre-registration 3's I1 (QK-norm) and I2 (z-loss) on ``scale/inst_lr``;
  ``fixes``: its I3 (Peri-LN) and I4 (DeepNorm); ``collapse``: its I5 (which instrument moves
  first in Post-LN's warm-up collapse; also lists and launches the reruns it needs);
  ``reading``: the independent reading's fixes, each a before → after;
- ``ladder``: pre-registration 3's model-size ladder, each rung's runs of each variant;
  ``ladder_trends``: every headline claim's statistic per rung, its slope over log2 width, where
  its verdict changes, each variant's best rate and LR sensitivity against width;
  ``ladder_page``: its page section; ``ladder_figures``: its two figures;
- ``lr``: the learning-rate table (best rate and sensitivity per variant);
- ``page``: results/README.md; ``figures``, ``figures_best``, ``figures_scale``: the claims'
  own figures;
  ``history``: each verdict against the archived page's, with the reason it changed;
- ``recipes``: each variant against its source paper and code, the lab's deviations and why;
- ``replication``: the claims judged in every setting of pre-registration 2, the claim ×
  setting table, each setting's headline variants, "What we found"; ``headline``: its figure;
- ``extra``: extra seeds for underpowered parts, pre-registration 2's rule (the plan files, the
  ``extra-seeds`` command, each claim judged with them); ``extra_plan``: which runs each part
  reads; ``extra_run``: its runner (the new seeds trained, checkpoints reproduced, analyses
  re-run).
"""
