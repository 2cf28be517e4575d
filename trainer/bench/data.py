"""``python -m trainer bench data``: peak RSS and time of ``prepare`` on a generated text file."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from trainer.bench.report import GIB, target
from trainer.machine import peak_rss_mb, versions

RSS_TARGET_GIB = 2.0


def _write_text_file(path: Path, size_mb: int, seed: int = 0) -> int:
    """~size_mb MB of paragraphs of the embedded corpus, shuffled per pass, one per line."""
    from trainer.config import load_config
    from trainer.data import sources

    cfg = load_config(None, [])
    splits = sources.load_splits(cfg.data)
    paras = [t.replace("\n", " ") for s in sources.SPLITS for t in sources.texts_of(splits[s])]
    rng = np.random.default_rng(seed)
    target_bytes = size_mb * 1_000_000
    written = 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target_bytes:
            for i in rng.permutation(len(paras)):
                line = paras[i] + "\n"
                f.write(line)
                written += len(line.encode("utf-8"))
                if written >= target_bytes:
                    break
    return written


def _child_prepare(file: str, cache: str, vocab: int, conn) -> None:
    from trainer.config import load_config
    from trainer.data import prepare

    t0 = time.perf_counter()
    cfg = load_config(None, ["data.source=files", f"data.files={file}", f"data.cache_dir={cache}",
                             f"data.vocab_size={vocab}"])
    corpus = prepare(cfg.data)
    st = corpus.stats()
    conn.send({"prepare_s": time.perf_counter() - t0, "peak_rss_bytes": int(peak_rss_mb() * 2**20),
               "train_tokens": st["target_tokens"]["train"], "examples": st["examples"],
               "pad_fraction": st["pad_fraction"]})
    conn.close()


def _prepare_in_child(ctx, text: Path, cache: Path, vocab_size: int) -> dict:
    """One ``prepare`` in a fresh process; its own ru_maxrss and the sampled tree's RSS."""
    import psutil

    parent, child = ctx.Pipe()
    p = ctx.Process(target=_child_prepare, args=(str(text), str(cache), vocab_size, child))
    t0 = time.perf_counter()
    p.start()
    proc = psutil.Process(p.pid)
    peak_sum, result = 0, None
    while p.is_alive() and result is None:
        try:
            rss = proc.memory_info().rss + sum(c.memory_info().rss
                                               for c in proc.children(recursive=True))
            peak_sum = max(peak_sum, rss)
        except psutil.Error:
            pass
        if parent.poll(0.1):
            result = parent.recv()
    p.join()
    if result is None:
        raise RuntimeError(f"data bench: prepare failed (exit code {p.exitcode})")
    result["wall_s"] = time.perf_counter() - t0
    result["peak_rss_sampled_tree_bytes"] = peak_sum
    result["peak_rss_gib"] = max(peak_sum, result["peak_rss_bytes"]) / GIB
    return result


def bench_data(size_mb: int, out: Path, vocab_size: int = 8192, workdir: str | None = None) -> dict:
    """Tokenise a generated ~size_mb MB text file (cold cache) and report peak RSS and time.

    ``prepare`` runs in a fresh child process; RSS is the child's ru_maxrss and, sampled every
    0.1 s with psutil, the sum over the child and all its descendants (datasets workers).
    A second prepare in another child measures the warm-cache path.
    """
    import multiprocessing as mp

    from trainer.atomic import write_json

    tmp = Path(tempfile.mkdtemp(prefix="normlab-bench-data-", dir=workdir))
    try:
        text = tmp / "corpus.txt"
        t0 = time.perf_counter()
        nbytes = _write_text_file(text, size_mb)
        gen_s = time.perf_counter() - t0
        ctx = mp.get_context("spawn")
        runs = {phase: _prepare_in_child(ctx, text, tmp / "cache", vocab_size)
                for phase in ("cold", "warm")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    worst = max(r["peak_rss_gib"] for r in runs.values())
    rss = target(worst, RSS_TARGET_GIB, worst <= RSS_TARGET_GIB, "GiB",
                 "peak RSS of prepare (cold and warm cache)")
    report = {"size_mb": size_mb, "file_bytes": nbytes, "generate_s": gen_s,
              "vocab_size": vocab_size, "runs": runs, "versions": versions(),
              "targets": {"data_stream_rss": rss}}
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report)
    c, w = runs["cold"], runs["warm"]
    print(f"data bench {size_mb} MB: cold prepare {c['wall_s']:.1f} s, peak RSS "
          f"{c['peak_rss_gib']:.2f} GiB; warm {w['wall_s']:.1f} s, {w['peak_rss_gib']:.2f} GiB; "
          f"{c['train_tokens']:,} train tokens -> [{'PASS' if rss['pass'] else 'FAIL'}] "
          f"RSS <= {RSS_TARGET_GIB:g} GiB; wrote {out}")
    return report
