"""Decoding with a key/value cache, several requests at once (continuous batching).

A ``Decoder`` keeps one cache of ``batch_size`` rows (``CausalLM.new_cache``). Waiting requests
enter free rows by a *prefill*: their prompts, right-padded to a common length, run through the
model once, writing the keys/values of every prompt position; the rows are then copied into the
batch cache. Each *step* then feeds every row its last token at the row's own position, so rows
of different lengths advance together. A row that finishes (``max_new_tokens``, the stop token,
or ``max_len`` tokens in all) frees its slot for the next waiting request. Rows never see each
other: attention and every norm (inference mode) work within a row, so a request's logits do not
depend on what else is in the batch.

Programs are compiled per shape: one step per batch size, one prefill per (rows, padded prompt
length); prompt lengths are padded to a power of two (at most ``max_len``) to keep them few.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

MIN_PREFILL = 8  # shortest padded prompt length: shorter prompts share one prefill program


@dataclass
class Request:
    """One prompt to continue: token ids (BOS first), how many tokens to add at most, and the
    seed of its own sampler (so its sample does not depend on the batch it decodes in)."""

    ids: list[int]
    max_new_tokens: int
    seed: int | tuple[int, ...] = 0  # anything np.random.default_rng takes


@dataclass
class Completion:
    """A request's result: the generated ids and, when recorded, the logits the model gave at
    every position it read (prompt and generated tokens; (positions, vocab) float32)."""

    request: Request
    tokens: list[int] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list)

    @property
    def sequence(self) -> list[int]:
        return list(self.request.ids) + self.tokens


def choose(logits: np.ndarray, temperature: float, top_k: int, rng: np.random.Generator) -> int:
    """The next token from one row's logits: argmax at temperature 0, else a draw from
    softmax(logits / temperature) over the ``top_k`` most likely tokens (0 = all)."""
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    if 0 < top_k < len(z):
        z[z < np.partition(z, -top_k)[-top_k]] = -np.inf
    p = np.exp(z - z.max())
    return int(rng.choice(len(z), p=p / p.sum()))


def padded_length(longest: int, max_len: int) -> int:
    """The prefill length of prompts up to ``longest`` tokens: a power of two, <= max_len."""
    return min(max_len, max(MIN_PREFILL, 1 << (longest - 1).bit_length()))


class Decoder:
    """Greedy or sampled continuation of token prompts by a ``CausalLM`` with a KV cache.

    Args:
        model: a built ``CausalLM``; decoding uses its inference mode (running statistics).
        xla: compile the prefill and step programs with XLA (else plain ``tf.function``).
        stop_id: a token that ends a request when generated (not kept); None: none does.
        record_logits: keep every position's logits in each ``Completion`` (for tests).
    """

    def __init__(self, model, xla: bool = True, stop_id: int | None = None,
                 record_logits: bool = False):
        self.model, self.stop_id, self.record_logits = model, stop_id, record_logits
        self.max_len = model.max_len
        self._forward = tf.function(self._run, jit_compile=xla)

    def _run(self, tokens, positions, cache):
        return self.model(tokens, cache=cache, positions=positions, training=False)

    def generate(self, requests: list[Request], batch_size: int, temperature: float = 0.0,
                 top_k: int = 0) -> list[Completion]:
        """Continue every request, ``batch_size`` rows at a time; results in request order."""
        for r in requests:
            if not 0 < len(r.ids) < self.max_len:
                raise ValueError(f"a prompt needs 1 to {self.max_len - 1} tokens, got {len(r.ids)}")
        done = [Completion(r) for r in requests]
        waiting = deque(range(len(requests)))
        rows: list[int | None] = [None] * batch_size  # request index in each slot
        rngs = [np.random.default_rng(r.seed) for r in requests]
        cache = self.model.new_cache(batch_size)
        last = np.zeros(batch_size, np.int64)  # each row's newest token, fed at the next step

        def emit(slot: int, logits: np.ndarray) -> None:
            i = rows[slot]
            c, token = done[i], choose(logits, temperature, top_k, rngs[i])
            finished = token == self.stop_id
            if not finished:
                c.tokens.append(token)
                last[slot] = token
            if finished or len(c.tokens) >= c.request.max_new_tokens \
                    or len(c.sequence) >= self.max_len:
                rows[slot] = None

        while waiting or any(i is not None for i in rows):
            free = [s for s, i in enumerate(rows) if i is None][:len(waiting)]
            if free:
                for s in free:
                    rows[s] = waiting.popleft()
                cache = self._prefill(free, [done[rows[s]] for s in free], cache, emit)
                continue  # a prompt may end its request at once; refill before stepping
            positions = np.array([[len(done[i].sequence) - 1 if i is not None else 0]
                                  for i in rows], np.int32)
            logits, cache = self._forward(tf.constant(last[:, None], tf.int32),
                                          tf.constant(positions), cache)
            logits = logits.numpy()[:, 0]
            for s, i in enumerate(rows):
                if i is not None:
                    if self.record_logits:
                        done[i].logits.append(logits[s])
                    emit(s, logits[s])
        return done

    def _prefill(self, slots: list[int], completions: list[Completion], cache, emit):
        """Run the prompts of ``completions`` into rows ``slots`` of ``cache``; emit each
        request's first token from its prompt's last position. Returns the updated cache."""
        prompts = [c.request.ids for c in completions]
        length = padded_length(max(map(len, prompts)), self.max_len)
        tokens = np.zeros((len(prompts), length), np.int32)  # right-padded; pads never attended
        for row, ids in enumerate(prompts):
            tokens[row, :len(ids)] = ids
        positions = np.broadcast_to(np.arange(length, dtype=np.int32), tokens.shape)
        logits, rows_kv = self._forward(tf.constant(tokens), tf.constant(positions),
                                        self.model.new_cache(len(prompts)))
        logits = logits.numpy()
        cache = tf.tensor_scatter_nd_update(cache, np.array(slots)[:, None], rows_kv)
        for row, (slot, c) in enumerate(zip(slots, completions)):
            n = len(c.request.ids)
            if self.record_logits:
                c.logits.extend(logits[row, :n])
            emit(slot, logits[row, n - 1])
        return cache
