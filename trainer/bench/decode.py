"""``python -m trainer bench decode``: tokens/s of KV-cache decoding vs recomputing the prefix.

For each batch size B: B random prompts of ``--prompt-tokens`` tokens are continued greedily by
``--new-tokens`` tokens, (a) with ``trainer.models.decode.Decoder`` (one prefill, then one cached
position per token) and (b) by a full forward over the whole prefix for every new token (one
program of shape (B, prompt + new), the prefix right-padded, the logits read at its last real
position). Tokens/s = B x new tokens / wall time of the timed pass; each way runs once untimed
first, so compilation is not counted. Weights are freshly initialised: speed does not depend on
them, and no data or checkpoint is needed.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

BATCH_SIZES = (1, 16)


def _cached(model, prompts: np.ndarray, new_tokens: int, xla: bool) -> float:
    from trainer.models.decode import Decoder, Request

    decoder = Decoder(model, xla=xla)
    requests = [Request(list(p), new_tokens) for p in prompts]

    def run():
        return decoder.generate(requests, batch_size=len(requests))

    run()  # compiles the prefill and step programs
    start = time.perf_counter()
    done = run()
    elapsed = time.perf_counter() - start
    assert all(len(c.tokens) == new_tokens for c in done)
    return elapsed


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


def bench_decode(cfg, batch_sizes, prompt_tokens: int, new_tokens: int) -> dict:
    """The report: per batch size, cached and recomputed tokens/s and their ratio."""
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
        cached = _cached(model, prompts, new_tokens, cfg.runtime.xla)
        full = _recompute(model, prompts, new_tokens, cfg.runtime.xla)
        rows.append({"batch_size": b, "cached_tokens_per_sec": b * new_tokens / cached,
                     "recompute_tokens_per_sec": b * new_tokens / full,
                     "cached_over_recompute": full / cached})
    return {"prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "xla": cfg.runtime.xla,
            "model": to_dict(cfg)["model"], "vocab_size": vocab, "max_len": max_len,
            "rows": rows, "machine": machine_block(tf)}


def run(args) -> dict:
    """``bench decode``: measure, print one line per batch size, write ``--out`` (and the
    ``decode`` key of ``--into``, keeping the rest of that report)."""
    from trainer.atomic import read_json, write_json
    from trainer.config import ConfigError, load_config

    cfg = load_config(args.config, args.overrides)
    report = bench_decode(cfg, args.batch_sizes, args.prompt_tokens, args.new_tokens)
    write_json(Path(args.out), report)
    if args.into:
        into = read_json(Path(args.into))
        if not into:
            raise ConfigError(f"--into {args.into}: not a bench report (missing or not JSON)")
        write_json(Path(args.into), {**into, "decode": report})
    for r in report["rows"]:
        print(f"B={r['batch_size']}: cached {r['cached_tokens_per_sec']:,.0f} tokens/s, "
              f"recompute {r['recompute_tokens_per_sec']:,.0f} tokens/s "
              f"({r['cached_over_recompute']:.1f}x)")
    print(f"wrote {args.out}" + (f" and the decode key of {args.into}" if args.into else ""))
    return report
