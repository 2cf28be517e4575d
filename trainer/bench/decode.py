"""``python -m trainer bench decode``: tokens/s of the compiled decode loop, the per-token loop,
and recomputing the prefix.

For each batch size B: B random prompts of ``--prompt-tokens`` tokens are continued greedily by
``--new-tokens`` tokens, (a) with ``trainer.models.decode.Decoder`` as ``generate`` runs it (one
prefill, then the token loop compiled as one program on the device), (b) with the same decoder's
per-token loop (``compiled=False``: one program call per token) and (c) by a full forward over
the whole prefix for every new token (one program of shape (B, prompt + new), the prefix
right-padded, the logits read at its last real position). (a) and (b) are timed in ``--pairs``
interleaved pairs, so that both see the same load: ``compiled_over_loop`` is the median of the
pairs' ratios, each way's tokens/s the median of its passes; ``identical``: (a) gave (b)'s
tokens (a target passes only then). Tokens/s = B x new tokens / wall time of a pass; each way
runs once untimed first, so compilation is not counted (``first_pass_s``: that pass's time,
compilation included). Weights are freshly initialised: speed does not depend on them, and no
data or checkpoint is needed. ``targets``: the compiled loop's speed-up over the per-token loop
that issue #57 set, at the batch sizes it names.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

BATCH_SIZES = (1, 16)
TARGETS = {1: 4.0, 16: 2.0}  # batch size -> compiled_over_loop at least


def _timed(run) -> tuple[float, list]:
    start = time.perf_counter()
    done = run()
    return time.perf_counter() - start, [c.tokens for c in done]


def _decoders(model, prompts: np.ndarray, new_tokens: int, xla: bool, pairs: int) -> dict:
    """The compiled and the per-token loop over the same requests, in interleaved pairs."""
    from trainer.models.decode import Decoder, Request

    requests = [Request(list(p), new_tokens) for p in prompts]
    ways = {way: Decoder(model, xla=xla, compiled=way == "compiled")
            for way in ("compiled", "loop")}
    runs = {way: (lambda d=d: d.generate(requests, batch_size=len(requests)))
            for way, d in ways.items()}
    first, outputs = {}, {}
    for way, run in runs.items():  # compiles the programs
        first[way], outputs[way] = _timed(run)
    seconds = {way: [] for way in ways}
    for _ in range(pairs):
        for way in ("loop", "compiled"):
            elapsed, tokens = _timed(runs[way])
            seconds[way].append(elapsed)
            assert tokens == outputs[way]  # the same each pass
    loop_tokens = outputs["loop"]
    assert all(len(t) == new_tokens for t in loop_tokens)
    tokens = len(requests) * new_tokens
    ratios = [lo / co for lo, co in zip(seconds["loop"], seconds["compiled"])]
    return {"compiled_tokens_per_sec": tokens / statistics.median(seconds["compiled"]),
            "loop_tokens_per_sec": tokens / statistics.median(seconds["loop"]),
            "compiled_over_loop": statistics.median(ratios), "compiled_over_loop_pairs": ratios,
            "identical": outputs["compiled"] == loop_tokens,
            "first_pass_s": first}  # with compilation


def _recompute(model, prompts: np.ndarray, new_tokens: int, xla: bool) -> float:
    import tensorflow as tf

    forward = tf.function(lambda t: model(t, training=False), jit_compile=xla)
    rows, length = prompts.shape

    def run():
        tokens = np.zeros((rows, length + new_tokens), np.int32)
        tokens[:, :length] = prompts
        for p in range(length, length + new_tokens):
            logits = forward(tf.constant(tokens)).numpy()
            tokens[:, p] = logits[:, p - 1].argmax(-1)

    run()  # compiles the one full-length program
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def targets(rows: list[dict]) -> list[dict]:
    """``TARGETS`` against the rows measured at those batch sizes."""
    return [{"batch_size": r["batch_size"], "what": "compiled_over_loop",
             "measured": r["compiled_over_loop"], "target": TARGETS[r["batch_size"]],
             "pass": bool(r["compiled_over_loop"] >= TARGETS[r["batch_size"]] and r["identical"])}
            for r in rows if r["batch_size"] in TARGETS]


def bench_decode(cfg, batch_sizes, prompt_tokens: int, new_tokens: int, pairs: int = 5) -> dict:
    """The report: per batch size, the three ways' tokens/s and their ratios."""
    import keras
    import tensorflow as tf

    from trainer.bench.runner import machine_block
    from trainer.config import ConfigError, to_dict
    from trainer.models import build_model

    max_len, vocab = int(cfg.data.max_len), int(cfg.data.vocab_size)
    if prompt_tokens + new_tokens > max_len:
        raise ConfigError(f"--prompt-tokens + --new-tokens ({prompt_tokens + new_tokens}) must "
                          f"be <= data.max_len ({max_len})")
    keras.utils.set_random_seed(cfg.train.seed)
    model = build_model(cfg.model, vocab, max_len)
    rng = np.random.default_rng(0)
    rows = []
    for b in batch_sizes:
        prompts = rng.integers(3, vocab, (b, prompt_tokens)).astype(np.int32)
        row = {"batch_size": b, **_decoders(model, prompts, new_tokens, cfg.runtime.xla, pairs)}
        full = _recompute(model, prompts, new_tokens, cfg.runtime.xla)
        row["recompute_tokens_per_sec"] = b * new_tokens / full
        row["loop_over_recompute"] = row["loop_tokens_per_sec"] / row["recompute_tokens_per_sec"]
        rows.append(row)
    return {"prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "pairs": pairs,
            "xla": cfg.runtime.xla, "model": to_dict(cfg)["model"], "vocab_size": vocab,
            "max_len": max_len, "rows": rows, "targets": targets(rows),
            "machine": machine_block(tf)}


def run(args) -> dict:
    """``bench decode``: measure, print one line per batch size, write ``--out`` (and the
    ``decode`` key of ``--into``, keeping the rest of that report)."""
    from trainer.atomic import read_json, write_json
    from trainer.config import ConfigError, load_config

    cfg = load_config(args.config, args.overrides)
    report = bench_decode(cfg, args.batch_sizes, args.prompt_tokens, args.new_tokens, args.pairs)
    write_json(Path(args.out), report)
    if args.into:
        into = read_json(Path(args.into))
        if not into:
            raise ConfigError(f"--into {args.into}: not a bench report (missing or not JSON)")
        write_json(Path(args.into), {**into, "decode": report})
    for r in report["rows"]:
        print(f"B={r['batch_size']}: compiled {r['compiled_tokens_per_sec']:,.0f} tokens/s, "
              f"per-token loop {r['loop_tokens_per_sec']:,.0f} "
              f"({r['compiled_over_loop']:.1f}x, median of {report['pairs']} pairs; "
              f"{'identical' if r['identical'] else 'DIFFERENT'} tokens), "
              f"recompute {r['recompute_tokens_per_sec']:,.0f}")
    for t in report["targets"]:
        print(f"target B={t['batch_size']}: compiled_over_loop {t['measured']:.2f} >= "
              f"{t['target']:g}: {'pass' if t['pass'] else 'FAIL'}")
    print(f"wrote {args.out}" + (f" and the decode key of {args.into}" if args.into else ""))
    return report
