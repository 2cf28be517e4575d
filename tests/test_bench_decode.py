"""``bench decode`` at tiny size: the report's shape (the compiled and the per-token loop side
by side), and ``--into`` adds a key to a report."""

from __future__ import annotations

import json
import statistics

from trainer.__main__ import main

TINY_MODEL = ["model.num_layers=1", "model.dim=32", "model.num_heads=2", "model.ffn_dim=64",
              "data.vocab_size=300", "data.max_len=32", "data.buckets=[32]",
              "data.tokens_per_batch=256"]


def test_bench_decode_reports_the_three_ways_side_by_side(tmp_path, capsys):
    into = tmp_path / "cpu.json"
    into.write_text(json.dumps({"mfu": 0.4, "decode": {"stale": True}}))
    out = tmp_path / "decode.json"
    code = main(["bench", "decode", "--config", "configs/base.yaml", "--batch-sizes", "1,3",
                 "--prompt-tokens", "5", "--new-tokens", "6", "--pairs", "2", "--out", str(out),
                 "--into", str(into), "runtime.xla=false", *TINY_MODEL])
    assert code == 0
    report = json.loads(out.read_text())
    assert [r["batch_size"] for r in report["rows"]] == [1, 3]
    for r in report["rows"]:
        assert min(r["compiled_tokens_per_sec"], r["loop_tokens_per_sec"],
                   r["recompute_tokens_per_sec"]) > 0
        assert r["identical"] and len(r["compiled_over_loop_pairs"]) == 2
        assert r["compiled_over_loop"] == statistics.median(r["compiled_over_loop_pairs"])
        assert min(r["first_pass_s"].values()) > 0 and set(r["first_pass_s"]) == {"compiled",
                                                                                  "loop"}
    assert [t["batch_size"] for t in report["targets"]] == [1]  # B = 1 has one, B = 3 none
    assert report["model"]["dim"] == 32 and report["max_len"] == 32
    merged = json.loads(into.read_text())
    assert merged == {"mfu": 0.4, "decode": report}  # the rest of the report is kept
    assert "B=3: compiled" in capsys.readouterr().out


def test_bench_decode_refuses_more_tokens_than_max_len(tmp_path, capsys):
    code = main(["bench", "decode", "--config", "configs/base.yaml", "--prompt-tokens", "30",
                 "--new-tokens", "6", "--out", str(tmp_path / "d.json"), *TINY_MODEL])
    assert code == 2 and "data.max_len (32)" in capsys.readouterr().err
