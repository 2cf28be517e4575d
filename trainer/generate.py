"""``python -m trainer generate RUN_DIR``: continue prompts with a trained run's last checkpoint.

The run's model and tokenizer are restored from the run directory alone (``config.yaml``,
``tokenizer.json``, ``checkpoints/``; ``trainer.train.checkpoint.restore_model``): no data, no
network, no data cache. Prompts become ``[BOS]`` + their tokens, as every training paragraph
starts; decoding uses the KV cache and continuous batching of ``trainer.models.decode`` in
inference mode (batch norms use their running statistics). Without ``--prompt``, the run's fixed
validation prompts (``trainer.telemetry.samples``) are continued: their ids were saved in
``prompts.json`` when the run started, so they need no data either. A run made before runs saved
these two files prepares its data instead (slower; a note on stderr says so). Text output shows each prompt and its continuation; ``--format json`` writes one
object per line: ``prompt``, ``continuation``, ``prompt_ids``, ``continuation_ids``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trainer.config import ConfigError
from trainer.rundir import CONFIG


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``generate`` subcommand's arguments."""
    parser.add_argument("run_dir", help="a trained run directory (its last checkpoint is used)")
    parser.add_argument("--prompt", action="append", default=[], metavar="TEXT",
                        help="a prompt (repeat for several; default: fixed validation prompts)")
    parser.add_argument("--max-new-tokens", type=int, default=64, metavar="N",
                        help="tokens added to each prompt at most (default 64; a row also stops "
                        "at [EOS] or at data.max_len tokens in all)")
    parser.add_argument("--temperature", type=float, default=0.0, metavar="T",
                        help="0: greedy (default); > 0: sample from softmax(logits / T)")
    parser.add_argument("--top-k", type=int, default=0, metavar="K",
                        help="sample from the K most likely tokens only (0 = all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    parser.add_argument("--batch-size", type=int, default=8, metavar="B",
                        help="requests decoded at once; a finished one's slot goes to the next "
                        "waiting prompt (default 8)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text (default) or one JSON object per line")


def encode_prompts(texts: list[str], tokenizer, bos_id: int, max_len: int) -> list[list[int]]:
    """``[BOS]`` + tokens of each prompt; one ConfigError line for a prompt that is empty,
    that the tokenizer maps to nothing, or that leaves no position to generate into."""
    prompts = []
    for n, text in enumerate(texts, 1):
        if not text.strip():
            raise ConfigError(f"prompt {n} is empty")
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            raise ConfigError(f"prompt {n} ({text!r}) maps to no tokens with this run's tokenizer")
        if len(ids) + 1 >= max_len:
            raise ConfigError(f"prompt {n} is {len(ids) + 1} tokens with [BOS]; this model reads "
                              f"at most data.max_len = {max_len}, so it must be shorter")
        prompts.append([bos_id, *ids])
    return prompts


def _check(args) -> None:
    if args.max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.temperature < 0 or args.top_k < 0:
        raise ConfigError("--temperature and --top-k must be >= 0")
    run_dir = Path(args.run_dir)
    if not (run_dir / CONFIG).is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")


def main(args) -> int:
    """Run ``generate`` for parsed ``args``; errors are ConfigError (one line, exit 2)."""
    _check(args)
    from trainer.train.checkpoint import restore_model  # TensorFlow starts here
    from trainer.models.decode import Decoder, Request

    cfg, text, model = restore_model(Path(args.run_dir))
    tok = text.tokenizer
    prompts = (encode_prompts(args.prompt, tok, text.bos_id, text.max_len) if args.prompt
               else text.prompts)
    decoder = Decoder(model, xla=cfg.runtime.xla, stop_id=text.eos_id)
    requests = [Request(p, args.max_new_tokens, seed=(args.seed, i)) for i, p in enumerate(prompts)]
    done = decoder.generate(requests, args.batch_size, args.temperature, args.top_k)
    for c in done:
        prompt, continuation = tok.decode(c.request.ids), tok.decode(c.tokens)
        if args.format == "json":
            print(json.dumps({"prompt": prompt, "continuation": continuation,
                              "prompt_ids": c.request.ids, "continuation_ids": c.tokens}))
        else:
            print(f"> {prompt}\n{continuation}\n---")
    return 0
