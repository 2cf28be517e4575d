"""What a model writes: greedy continuations of fixed prompts from the validation split.

At each evaluation the loop continues ``train.samples`` prompts and writes them as a text
summary (TensorBoard's Text tab, tag ``samples`` in the eval run), so a sweep shows side by side
what each variant writes as it trains; ``python -m trainer generate`` uses the same prompts when
given none. Decoding is greedy, in inference mode and outside the training programs: it draws no
random number and changes no variable, so no training number depends on it.
"""

from __future__ import annotations

import numpy as np

from trainer.models.decode import Decoder, Request

PROMPT_TOKENS = 12  # ids a sample prompt keeps from its paragraph ([BOS] included)
NEW_TOKENS = 32  # tokens each sample adds (fewer when max_len or [EOS] comes first)


def sample_prompts(corpus, count: int, prompt_tokens: int = PROMPT_TOKENS) -> list[list[int]]:
    """The first ``prompt_tokens`` ids of the first ``count`` validation paragraphs that are
    longer than that: the same prompts for every run on this data."""
    prompts = []
    for ids in corpus.windows("validation"):
        if ids[0] == corpus.bos_id and len(ids) > prompt_tokens + 1:  # a paragraph's start
            prompts.append([int(i) for i in ids[:prompt_tokens]])
            if len(prompts) == count:
                break
    return prompts


class Samples:
    """Greedy continuations of ``count`` fixed validation prompts by ``model``.

    Args:
        model: the run's ``CausalLM``, read at each call (its current weights).
        corpus: the run's ``Corpus`` (prompts, tokenizer, [EOS] as the stop token).
        count: how many prompts (``train.samples``).
        new_tokens: tokens added to each prompt at most.
    """

    def __init__(self, model, corpus, count: int, new_tokens: int = NEW_TOKENS):
        self.prompts = sample_prompts(corpus, count)
        self.new_tokens, self.tokenizer = new_tokens, corpus.tokenizer
        # Graph mode, not XLA: the samples add no entry to the run's compilation count or cache.
        self.decoder = Decoder(model, xla=False, stop_id=corpus.eos_id)

    def __call__(self) -> np.ndarray:
        """(count, 2) strings: each prompt's text and its continuation."""
        done = self.decoder.generate([Request(p, self.new_tokens) for p in self.prompts],
                                     batch_size=max(len(self.prompts), 1))
        return np.array([[self.tokenizer.decode(c.request.ids), self.tokenizer.decode(c.tokens)]
                         for c in done], dtype=object)
