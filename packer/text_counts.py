"""Token counts of rendered chat texts, a piece between special tokens at a time, each piece counted once.

A Hugging Face tokenizer first cuts its input at its added tokens (``<|im_start|>``,
``<|image_pad|>`` …): each added token becomes its one id, and every piece between two of
them is normalised, pre-tokenised and tokenised on its own. So the length of a text is the
number of added tokens in it plus the lengths of its pieces, and a piece that repeats
(the system prompt, ``user``, an instruction shared by many records) need not be tokenised
again. :class:`PieceCounter` keeps the lengths of the pieces it has seen and tokenises only
new ones, in one batch.

That holds when the tokenizer finds its added tokens as this module does: every added token
matched on the raw text (``normalized`` false), never absorbing the spaces around it
(``lstrip``/``rstrip`` false) nor only as a whole word (``single_word`` false), the longest one
at the leftmost place. :meth:`PieceCounter.of` gives None for any other tokenizer (its texts are
then tokenised whole), and :class:`~packer.tokens.TokenCounter` checks the two ways agree on
probe texts before it uses one.
"""

from __future__ import annotations

import re
from typing import Any

MAX_KEPT = 1 << 16
"""Pieces whose lengths are kept; past it the table starts again (a corpus of unique captions never grows it)."""


class PieceCounter:
    """Counts tokens of texts piece by piece (see the module docstring)."""

    def __init__(self, backend: Any, added: list[str]) -> None:
        self._encode = getattr(backend, "encode_batch_fast", None) or backend.encode_batch
        # longest first: at one place the alternation takes the first that matches, i.e. the longest
        self._split = re.compile("(" + "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True)) + ")")
        self._lengths: dict[str, int] = {"": 0}

    @classmethod
    def of(cls, backend: Any) -> PieceCounter | None:
        """A counter for a ``tokenizers.Tokenizer`` whose added tokens it can find as the tokenizer does, else None."""
        decoder = getattr(backend, "get_added_tokens_decoder", None)
        if decoder is None:
            return None
        tokens = list(decoder().values())
        if not tokens or any(t.normalized or t.lstrip or t.rstrip or t.single_word or not t.content for t in tokens):
            return None
        return cls(backend, [t.content for t in tokens])

    def lengths(self, texts: list[str]) -> list[int]:
        """The number of token ids of each text (``add_special_tokens=False``)."""
        parts = [self._split.split(text) for text in texts]
        known = self._lengths
        wanted = {piece: None for pieces in parts for piece in pieces[::2]}  # distinct, in order
        new = [piece for piece in wanted if piece not in known]
        if new:
            if len(known) + len(new) > MAX_KEPT:
                known.clear()
                known[""] = 0
                new = [piece for piece in wanted if piece not in known]
            for piece, encoding in zip(new, self._encode(new, add_special_tokens=False)):
                known[piece] = len(encoding.ids)
        # re.split with one group: pieces at even places, the added tokens between them (one id each)
        return [sum(known[piece] for piece in pieces[::2]) + len(pieces) // 2 for pieces in parts]
