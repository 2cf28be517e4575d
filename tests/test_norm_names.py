"""The norm table's families agree with the norm registry: a norm with batch statistics (its
class has ``moments``) is in the batch family, every other lab norm in the per-token one."""

from __future__ import annotations

from trainer.norm_names import BATCH, NORM_TABLE, TOKEN, family, row


def test_every_lab_norm_has_a_family_and_the_registry_agrees():
    from trainer.models.norms import BATCH_NORMS, NORMS

    assert set(family(BATCH)) == set(BATCH_NORMS)
    assert set(family(TOKEN)) == set(NORMS) - set(BATCH_NORMS)
    assert set(family(BATCH)) | set(family(TOKEN)) == set(NORM_TABLE)


def test_a_norm_from_outside_the_lab_declares_no_family():
    assert row("my_norms.py:PowerNorm").family is None
