"""Analyses: forward/backward passes over models (at init or from a run's checkpoint) that
answer one question each and write a CSV (+ PNG) into a results directory.

``python -m trainer analyze KIND ...``; KIND is a key of ``ANALYSES``.
"""

ANALYSES = {"grad-profile": "trainer.analysis.grad_profile",
            "batch-size": "trainer.analysis.batch_size",
            "composition": "trainer.analysis.composition", "padding": "trainer.analysis.padding",
            "stream": "trainer.analysis.stream"}
