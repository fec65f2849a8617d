"""String verifier (answer type ``any``): exact match after normalisation.

Normalisation: Unicode NFKC, ``$``/``\\text{}``/``\\boxed{}``/markdown-bold wrappers
removed, case folded, whitespace collapsed, surrounding quotes and trailing
sentence punctuation removed. Any of several golds may match.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Mapping

from curate.rewards.extract import extract_answer, strip_latex_wrappers
from curate.rewards.verdict import Context

MAX_ANSWER_CHARS = 100_000
_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Canonical form used for exact comparison."""
    s = unicodedata.normalize("NFKC", strip_latex_wrappers(text))
    s = _SPACES.sub(" ", s.casefold()).strip()
    s = s.strip("\"'`“”‘’").strip()
    return s.rstrip(".。!！?？;；").strip()


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float:
    """1.0 when the normalised extracted answer equals a normalised gold, else 0.0."""
    answer = extract_answer(response)
    if answer is None or len(answer) > MAX_ANSWER_CHARS:
        return 0.0
    a = normalize(answer)
    if not a:
        return 0.0
    return 1.0 if any(a == normalize(g) for g in golds) else 0.0
