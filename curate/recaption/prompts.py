"""Request keys, the language drawn per record (``--mix``) and the user turn of ``curate recaption``.

The flags themselves (``--langs``, ``--mix``, ``--prompt-en``/``--prompt-zh``) are
parsed and checked in :mod:`curate.recaption.config`.
"""

from __future__ import annotations

from curate.core.records import IMAGE_TOKEN
from curate.generate.base import derive_seed


def caption_key(rid: str, lang: str, image: int = 0) -> str:
    """The request key (and caption record id) of one image of a record in one language: ``<id>#<lang>`` for its
    first image, ``<id>#<n>#<lang>`` for its ``n``-th (``n`` from 2)."""
    return f"{rid}#{lang}" if image == 0 else f"{rid}#{image + 1}#{lang}"


def choose_lang(seed: int, rid: str, mix: dict[str, float]) -> str:
    """The language drawn for a record: ``u = derive_seed(seed, id, "mix") / 2**53`` against the cumulative weights.

    Depends only on the seed, the record id and the weights (in their given order),
    never on sharding or record order.
    """
    u = derive_seed(seed, rid, "mix", bits=53) / float(1 << 53)
    cumulative = 0.0
    last = None
    for lang, weight in mix.items():
        cumulative += weight
        if weight > 0:
            last = lang
            if u < cumulative:
                return lang
    assert last is not None
    return last  # rounding: u just below 1 and the weights summing to slightly less


def user_turn(prompt: str) -> str:
    """The user turn of a caption request and record: the prompt with one ``<image>`` (first when absent)."""
    return prompt if IMAGE_TOKEN in prompt else f"{IMAGE_TOKEN}\n{prompt}"
