"""Math verifier: math-verify, gold first, in a worker process with a time limit.

The answer is the last ``<answer>…</answer>`` block or the last brace-aware
``\\boxed{…}`` (see :func:`curate.rewards.extract.extract_answer`). Equality, in order:

1. Equal strings once whitespace, ``$``, ``\\left``/``\\right`` and ``\\dfrac`` are removed
   (no parsing needed).
2. Both sides plain numbers (signs, decimals, thousands separators): equal within the
   relative ``tolerance`` (parameter, default ``1e-6``, with the same absolute floor).
3. Otherwise math-verify: ``verify(parse(gold), parse(answer))`` with the gold as the
   first argument, ``float_rounding`` (parameter, default 6 decimals), and math-verify's
   own timeouts disabled (they rely on SIGALRM, which fails off the main thread); the
   call runs in a worker process that is killed after ``time_limit`` seconds (default 5).
   Each side is parsed as LaTeX (wrapped in ``$…$``) and, failing that, as a plain
   expression. math-verify makes ``\\frac12``, ``0.5``, ``2/4`` and ``1/2`` equal, reads
   ``50\\%`` as both 50 and 0.5, and ``1,234`` as 1234.

Hostile answers are refused before any parsing: over 1,000 characters
(``answer_too_long``) or nested deeper than 30 braces/parentheses (``answer_too_deep``).
"""

from __future__ import annotations

import logging
import unicodedata
from functools import lru_cache
from typing import Any, Mapping

from curate.rewards.verifiers import number
from curate.rewards.extract import extract_answer
from curate.rewards.verdict import Context, Deferred, VerifierFailure, param

MAX_ANSWER_CHARS = 1_000
MAX_DEPTH = 30
DEFAULT_TIME_LIMIT = 5.0


def _clean(s: str) -> str:
    s = unicodedata.normalize("NFKC", s).strip()
    while len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s[1:-1].strip()
    return s.rstrip(".").strip()


def _depth(s: str) -> int:
    depth = best = 0
    for ch in s:
        if ch in "{([":
            depth += 1
            best = max(best, depth)
        elif ch in "})]":
            depth = max(0, depth - 1)
    return best


_CANON = (("\\left", ""), ("\\right", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"))


def _canon(s: str) -> str:
    s = "".join(s.split())
    for old, new in _CANON:
        s = s.replace(old, new)
    return s


@lru_cache(maxsize=8192)
def _parsed(text: str) -> list:
    from math_verify import parse

    out = parse(f"${text}$", parsing_timeout=None)
    if not out:
        out = parse(text, parsing_timeout=None)
    return out


def compare(golds: tuple[str, ...], answer: str, float_rounding: int) -> float:
    """math-verify equality of ``answer`` with any gold (worker task; no signal timeouts)."""
    from math_verify import verify as mv_verify

    target = _parsed(answer)
    if not target:
        return 0.0
    for g in golds:
        gold = _parsed(g)
        if gold and mv_verify(gold, target, float_rounding=float_rounding, timeout_seconds=None):
            return 1.0
    return 0.0


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float | Deferred:
    """1.0 when the extracted answer equals a gold answer mathematically, else 0.0."""
    raw = extract_answer(response)
    if raw is None:
        return 0.0
    if len(raw) > MAX_ANSWER_CHARS:
        raise VerifierFailure("answer_too_long")
    answer = _clean(raw)
    if not answer:
        return 0.0
    if _depth(answer) > MAX_DEPTH:
        raise VerifierFailure("answer_too_deep")
    clean_golds = tuple(_clean(g) for g in golds)
    canon = _canon(answer)
    if any(canon == _canon(g) for g in clean_golds):
        return 1.0
    tol = float(param(params, "tolerance", number.DEFAULT_TOLERANCE))
    a_num = number.plain_number(answer)
    g_nums = [number.plain_number(g) for g in clean_golds]
    if a_num is not None and all(v is not None for v in g_nums):
        return 1.0 if any(number.close(a_num, v, tol) for v in g_nums) else 0.0
    return Deferred("curate.rewards.verifiers.math:compare", (clean_golds, answer, int(param(params, "float_rounding", 6))),
                    limit=float(param(params, "time_limit", DEFAULT_TIME_LIMIT)))


logging.getLogger("math_verify").setLevel(logging.ERROR)


def clear_cache() -> None:
    """Forget the memoised results (a worker warmed up on sample inputs starts clean)."""
    _parsed.cache_clear()
