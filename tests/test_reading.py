"""The reading's fixes (pre-registration 3, section 4): the table's "after" column follows the
findings it reads, and a replication setting's analysis that is byte for byte the reference's is
not counted as evidence again."""


from trainer.findings import reading
from trainer.findings.claim import Finding
from trainer.findings.dynamics import _reference_copy
from trainer.findings.reference import Reference


def _finding(cid: str, marks: list, lines=()) -> Finding:
    f = Finding(cid, "c", "m", "x")
    f.lines += list(lines)
    for shown in marks:
        f.evidence("part", shown, "why")
    return f


def test_the_after_column_reads_the_live_verdicts():
    judged = {"F14": {"reference": _finding("F14", [True, False],
                                            ["DyT's α₀: 1, the lowest mean validation loss"])},
              "F6": {"long": _finding("F6", [False, True])}}
    text = "\n".join(reading.section(judged))
    assert "DyT's α₀: 1 on the mean" in text and "F14 reads **partly** (✓✗)" in text
    assert "long's F6 reads **partly** (✗✓)" in text
    judged["F14"]["reference"] = _finding("F14", [True, True], ["DyT's α₀: 0.2, x"])
    text = "\n".join(reading.section(judged))
    assert "DyT's α₀: 0.2 on the mean" in text and "F14 reads yes (✓✓)" in text
    assert text.count("not run yet") == len(reading.WAITING)


def test_the_f6_fix_lists_each_setting_and_what_it_waits_for():
    wide = _finding("F6", [True, True])
    wide.evidence("Post-LN needs warm-up", None, "post-LN, warm-up 0's seeds ran at 0.00948, its "
                  "best of the shared rates is 0.003: its seeds there are not run yet")
    judged = {"F6": {"reference": _finding("F6", [True, False, True]), "wide": wide}}
    after = next(x for x in reading.section(judged) if x.startswith("| F6 on shared rates"))
    assert "F6 reads reference **partly** (✓✗✓), wide **inconclusive** (✓✓?)" in after
    assert "waiting for runs: wide: post-LN, warm-up 0's seeds ran at 0.00948" in after
    judged["F6"]["wide"] = _finding("F6", [True, True, True])
    after = next(x for x in reading.section(judged) if x.startswith("| F6 on shared rates"))
    assert "waiting" not in after and "wide yes (✓✓✓)" in after


def test_an_analysis_copied_from_the_reference_is_recognised(tmp_path):
    rel = "init/grad_profile.csv"
    for root, body in (("reference", "a,b\n1,2\n"), ("replication/long", "a,b\n1,2\n"),
                       ("replication/wide", "a,b\n1,3\n")):
        (tmp_path / root / "init").mkdir(parents=True)
        (tmp_path / root / rel).write_text(body)
    assert _reference_copy(Reference(tmp_path / "replication/long", "long"), rel)
    assert not _reference_copy(Reference(tmp_path / "replication/wide", "wide"), rel)
    assert not _reference_copy(Reference(tmp_path / "reference"), rel)
    assert not _reference_copy(Reference(tmp_path / "replication/long", "long"), "absent.csv")
