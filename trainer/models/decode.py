"""Decoding with a key/value cache, several requests at once (continuous batching).

A ``Decoder`` keeps one cache of ``batch_size`` rows (``CausalLM.new_cache``). Waiting requests
enter free rows by a *prefill*: their prompts, right-padded to a common length, run through the
model once, writing the keys/values of every prompt position; the rows are then copied into the
batch cache. The token loop then feeds every row its last token at the row's own position, so
rows of different lengths advance together. A row that finishes (``max_new_tokens``, the stop
token, or ``max_len`` tokens in all) frees its slot for the next waiting request. Rows never see
each other: attention and every norm (inference mode) work within a row, so a request's logits
do not depend on what else is in the batch.

The token loop runs on the device by default (``compiled=True``): one program
(``decode_loop.token_loop``, a ``tf.while_loop``) decodes until every row is done, or, while
requests wait, until one row is, so the host only retires and refills rows between calls.
``compiled=False`` is the per-token loop, one program call per token with the bookkeeping on the
host (what ``bench decode`` compares against). Both draw every token with the same stateless
sampler (``decode_loop.choose``), so they give the same tokens, greedy or sampled. (A stateless
draw compiled by XLA differs from the same draw in graph mode: with ``xla=False`` a sampled
request gets other tokens, as reproducible.)

Programs are compiled per shape: one token loop (or step) per batch size, one prefill per (rows,
padded prompt length); prompt lengths are padded to a power of two (at most ``max_len``) to keep
them few. Temperature and top-k are part of a program: each setting used compiles its own; so is
the cache length the requests of a ``generate`` call can reach (``decode_loop.reach``: at most
eight), as the token loop runs on the cache's first positions while the rows are short.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

from trainer.models import decode_loop
from trainer.models.decode_loop import NO_STOP, request_key

MIN_PREFILL = 8  # shortest padded prompt length: shorter prompts share one prefill program


@dataclass
class Request:
    """One prompt to continue: token ids (BOS first), how many tokens to add at most, and the
    seed of its own sampler (an int or a tuple of ints: ``decode_loop.request_key``), so its
    sample does not depend on the batch it decodes in."""

    ids: list[int]
    max_new_tokens: int
    seed: int | tuple[int, ...] = 0


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


def padded_length(longest: int, max_len: int) -> int:
    """The prefill length of prompts up to ``longest`` tokens: a power of two, <= max_len."""
    return min(max_len, max(MIN_PREFILL, 1 << (longest - 1).bit_length()))


class _Rows:
    """The batch's slots on the host: which request each holds, and the per-row state the token
    loop reads (``decode_loop.token_loop``'s ``rows``, plus the sampler keys)."""

    def __init__(self, batch_size: int):
        self.request: list[int | None] = [None] * batch_size  # request index in each slot
        self.state = {name: np.zeros(batch_size, np.int32)
                      for name in ("last", "position", "budget", "count")}
        self.state["active"] = np.zeros(batch_size, bool)
        self.keys = np.zeros((batch_size, 2), np.int32)

    def busy(self) -> bool:
        return any(i is not None for i in self.request)

    def free(self) -> list[int]:
        return [s for s, i in enumerate(self.request) if i is None]


class Decoder:
    """Greedy or sampled continuation of token prompts by a ``CausalLM`` with a KV cache.

    Args:
        model: a built ``CausalLM``; decoding uses its inference mode (running statistics).
        xla: compile the prefill and token-loop programs with XLA (else plain ``tf.function``).
        stop_id: a token that ends a request when generated (not kept); None: none does.
        record_logits: keep every position's logits in each ``Completion`` (for tests).
        compiled: run the token loop on the device (default); False: one call per token.
    """

    def __init__(self, model, xla: bool = True, stop_id: int | None = None,
                 record_logits: bool = False, compiled: bool = True):
        self.model, self.stop_id, self.record_logits = model, stop_id, record_logits
        self.compiled, self.max_len = compiled, model.max_len
        self._prefill = tf.function(lambda *a: decode_loop.prefill(model, *a), jit_compile=xla)
        self._step = tf.function(lambda *a: decode_loop.step(model, *a), jit_compile=xla)
        self._loop = tf.function(lambda *a: decode_loop.token_loop(
            model, *a[:-1], record_logits=record_logits, top=a[-1]), jit_compile=xla)

    def generate(self, requests: list[Request], batch_size: int, temperature: float = 0.0,
                 top_k: int = 0) -> list[Completion]:
        """Continue every request, ``batch_size`` rows at a time; results in request order."""
        for r in requests:
            if not 0 < len(r.ids) < self.max_len:
                raise ValueError(f"a prompt needs 1 to {self.max_len - 1} tokens, got {len(r.ids)}")
        sampler = (float(temperature), int(top_k))
        done = [Completion(r) for r in requests]
        waiting = deque(range(len(requests)))
        rows = _Rows(batch_size)
        cache = self.model.new_cache(batch_size)
        top = decode_loop.reach([len(r.ids) + r.max_new_tokens for r in requests], self.max_len)
        while waiting or rows.busy():
            free = rows.free()[:len(waiting)]
            if free:
                admitted = [waiting.popleft() for _ in free]
                cache = self._admit(free, admitted, rows, done, cache, sampler)
            elif self.compiled:  # a prompt may end its request at once: refill before this
                cache = self._run_loop(rows, done, cache, bool(waiting), sampler, top)
            else:
                cache = self._run_step(rows, done, cache, sampler)
        return done

    def _admit(self, slots: list[int], admitted: list[int], rows: _Rows, done, cache, sampler):
        """Prefill the prompts of requests ``admitted`` into rows ``slots`` of ``cache``; emit
        each request's first token, drawn from its prompt's last position. Returns the cache."""
        prompts = [done[i].request.ids for i in admitted]
        length = padded_length(max(map(len, prompts)), self.max_len)
        tokens = np.zeros((len(prompts), length), np.int32)  # right-padded; pads never attended
        for row, ids in enumerate(prompts):
            tokens[row, :len(ids)] = ids
        lengths = np.array([len(p) for p in prompts], np.int32)
        for slot, i in zip(slots, admitted):
            rows.request[slot], rows.keys[slot] = i, request_key(done[i].request.seed)
        first, rows_kv, logits = self._prefill(tf.constant(tokens), tf.constant(lengths),
                                               tf.constant(rows.keys[slots]), *sampler)
        cache = tf.tensor_scatter_nd_update(cache, np.array(slots)[:, None], rows_kv)
        first = first.numpy()
        logits = logits.numpy() if self.record_logits else None
        for row, (slot, n) in enumerate(zip(slots, lengths)):
            if self.record_logits:
                done[rows.request[slot]].logits.extend(logits[row, :n])
            self._emit(rows, done, slot, int(first[row]))
        return cache

    def _emit(self, rows: _Rows, done, slot: int, token: int) -> None:
        """Give the request in ``slot`` its next token; free the slot when it is done (the
        host's copy of the rule ``token_loop`` applies on the device)."""
        c, state = done[rows.request[slot]], rows.state
        if token != self.stop_id:
            c.tokens.append(token)
        budget = min(c.request.max_new_tokens - len(c.tokens), self.max_len - len(c.sequence))
        if token == self.stop_id or budget <= 0:
            rows.request[slot], state["active"][slot] = None, False
            return
        state["last"][slot], state["position"][slot] = token, len(c.sequence) - 1
        state["budget"][slot], state["count"][slot] = budget, len(c.tokens)
        state["active"][slot] = True

    def _run_step(self, rows: _Rows, done, cache, sampler):
        """The per-token loop's step: one program call, one token for every busy row."""
        s = rows.state
        chosen, logits, cache = self._step(tf.constant(s["last"]), tf.constant(s["position"]),
                                           cache, tf.constant(rows.keys),
                                           tf.constant(s["count"]), *sampler)
        chosen = chosen.numpy()
        logits = logits.numpy() if self.record_logits else None
        for slot, i in enumerate(rows.request):
            if i is not None:
                if self.record_logits:
                    done[i].logits.append(logits[slot])
                self._emit(rows, done, slot, int(chosen[slot]))
        return cache

    def _run_loop(self, rows: _Rows, done, cache, refill: bool, sampler, top: int):
        """The compiled token loop: decode on the device until every row is done (or, with
        ``refill``, one is); then hand each request its tokens and free the done rows. ``top``:
        the cache length no request reaches (``decode_loop.reach``)."""
        stop = NO_STOP if self.stop_id is None else self.stop_id
        before = rows.state["count"].copy()
        out = self._loop(cache, {k: tf.constant(v) for k, v in rows.state.items()},
                         tf.constant(rows.keys), tf.constant(refill),
                         tf.constant(stop, tf.int32), *sampler, top)
        rows.state = {k: out[k].numpy() for k in rows.state}
        tokens, fed = out["tokens"].numpy(), out["fed"].numpy()
        logits = out["logits"].numpy() if self.record_logits else None
        for slot, i in enumerate(rows.request):
            if i is None:
                continue
            done[i].tokens.extend(int(t) for t in tokens[slot, :rows.state["count"][slot]
                                                         - before[slot]])
            if self.record_logits:
                done[i].logits.extend(logits[slot, :fed[slot]])
            if not rows.state["active"][slot]:
                rows.request[slot] = None
        return out["cache"]
