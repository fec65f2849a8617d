"""Tokens a record's text may not hold: the ones the chat template and the processor give a meaning to.

A message whose text holds ``<|image_pad|>`` makes the processor expect one more image than the
record has (the trainer's processor fails on it, or pairs pixels with the wrong placeholder); one
holding ``<|im_end|>`` or ``<|im_start|>`` ends a turn or starts a fake one, so the loss labels no longer
follow the roles. Trainers do not escape such text (they tokenise it as it is), so curate does not
either: a record whose text holds a reserved token is errored ``special_token``, and what is counted is
what the loader and the trainer read.

Reserved (:func:`reserved_tokens`): every special token of the tokenizer that the chat template writes
around the text (its turn markers, found by rendering a probe conversation with an image), the processor's
image and video placeholders, and the tokenizer's ``bos``/``eos``/``pad``/``unk`` tokens. Other special
tokens stay text a record may hold: grounding data writes Qwen2-VL's ``<|box_start|>`` and
``<|object_ref_start|>`` into its answers on purpose.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

#: The reason of a record whose text holds a reserved token.
SPECIAL_TOKEN = "special_token"
_PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "<image>\nq"},
          {"role": "assistant", "content": "a"}]


def reserved_tokens(processor: Any, tokenizer: Any, render: Callable[[list[dict[str, str]]], str]) -> list[str]:
    """The reserved tokens of a processor (see the module docstring), longest first."""
    special: set[str] = set()
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    for token in decoder.values():
        if getattr(token, "special", False) and getattr(token, "content", ""):
            special.add(token.content)
    try:
        rendered = render(_PROBE)
    except Exception:  # noqa: BLE001 - a template refusing a system turn: the user/assistant turns alone
        rendered = render(_PROBE[1:])
    reserved = {t for t in special if t in rendered}
    for name in ("image_token", "video_token"):
        value = getattr(processor, name, None)
        if isinstance(value, str) and value:
            reserved.add(value)
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, str) and value:
            reserved.add(value)
    return sorted(reserved, key=lambda t: (-len(t), t))


class ReservedTokens:
    """Finds the first reserved token in a record's messages (a C-speed search, one pattern for all)."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self.tokens = list(tokens)
        self._pattern = re.compile("|".join(map(re.escape, self.tokens))) if self.tokens else None

    def find(self, messages: Sequence[dict[str, Any]]) -> str | None:
        """A description of the first reserved token in the messages' text, or None."""
        if self._pattern is None:
            return None
        for i, message in enumerate(messages):
            content = message.get("content")
            found = self._pattern.search(content) if isinstance(content, str) else None
            if found is not None:
                return (f"{message.get('role', 'turn')} turn {i} holds {found.group()!r}, a token the chat template "
                        "or the processor gives a meaning to (the trainer would read it as one)")
        return None
