"""Length limits on user text, applied before anything tokenizes it.

A single row of several megabytes must never cost memory in proportion to its size:
stages refuse text beyond a limit in characters before rendering or tokenizing it,
and record the row with the reason :data:`TOO_LONG` (``curate pack`` lengths,
``curate rl-filter`` prompts, ``curate recaption`` answers; the ``transformers``
generation backend also bounds prompts in tokens). Character counts are cheap
(``len``), so the memory a row costs is proportional to the limit.
"""

from __future__ import annotations

from collections.abc import Iterable

TOO_LONG = "too_long"
#: Characters of one record's text that ``curate pack`` counts (about 250k+ tokens: beyond any context).
MAX_RECORD_CHARS = 1_000_000
#: Characters of one RL prompt (``curate rl-filter``).
MAX_PROMPT_CHARS = 200_000
#: Characters of one caption answer checked by ``curate recaption``.
MAX_CAPTION_CHARS = 20_000
#: Tokens of one prompt the ``transformers`` backend feeds its model.
MAX_PROMPT_TOKENS = 32_768
#: Characters a single token covers at most when bounding tokens by characters (a guard, not a rule).
CHARS_PER_TOKEN_BOUND = 64


def total_chars(texts: Iterable[object]) -> int:
    """The characters of the strings among ``texts`` (other values count 0)."""
    return sum(len(t) for t in texts if isinstance(t, str))


def over(n: int, limit: int | None, what: str) -> str | None:
    """``"N <what> > limit L"`` when ``n`` exceeds ``limit`` (None: no limit), else None."""
    if limit is None or n <= limit:
        return None
    return f"{n:,} {what} > limit {limit:,}"
