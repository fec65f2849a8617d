"""OCR verifier: 1 - normalised Levenshtein distance, best over the golds, 0 below 0.5.

Both texts are lower-cased and their whitespace collapsed (as in the
LLaVA-OneVision-1.5-RL anchor); the distance is normalised by the longer of the two
normalised texts, so ``'Helo World'`` vs ``'hello world'`` scores ``1 - 1/11 ≈ 0.909``.
Scores below ``threshold`` (parameter, default 0.5) become 0. The Levenshtein
distance comes from rapidfuzz (bit-parallel, linear in practice).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from rapidfuzz.distance import Levenshtein

from curate.rewards.extract import extract_answer
from curate.rewards.verdict import Context, param

MAX_ANSWER_CHARS = 200_000
_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Lower-case and collapse whitespace."""
    return _SPACES.sub(" ", text.lower()).strip()


def similarity(answer: str, gold: str) -> float:
    """``1 - Levenshtein(answer, gold) / max(len)`` on normalised texts (1.0 for two empties)."""
    return float(Levenshtein.normalized_similarity(normalize(answer), normalize(gold)))


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float:
    """Best similarity over the golds, zeroed below the threshold."""
    answer = extract_answer(response)
    if answer is None:
        return 0.0
    a = normalize(answer)
    if not a or len(a) > MAX_ANSWER_CHARS:
        return 0.0
    threshold = float(param(params, "threshold", 0.5))
    best = 0.0
    for g in golds:
        s = float(Levenshtein.normalized_similarity(a, normalize(g), score_cutoff=threshold))
        best = max(best, s)
    return best if best >= threshold else 0.0
