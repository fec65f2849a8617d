"""Number verifier: the last number of the answer equals the gold number.

Handles signs (ASCII and Unicode minus), decimals (``12.0 == 12``), thousands
separators (``1,234 == 1234``), scientific notation, and spelled-out small numbers
(``"seven"``, ``"twenty-one"``) when the answer holds no digits (answers up to 1,000
characters). A number that overflows (``1e999999999``, ``1e400``) or is not finite is
no number: it never equals a finite gold. Numbers compare
with a relative tolerance (parameter ``tolerance``, default ``1e-6``, with the same
absolute floor), so a counting answer must be exact while ``0.30000000000000004``
equals ``0.3``.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from curate.rewards.extract import extract_answer, strip_latex_wrappers
from curate.rewards.verdict import Context, RecordError, VerifierFailure, param, where

DEFAULT_TOLERANCE = 1e-6
MAX_NUMBER_CHARS = 64
MAX_WORD_TEXT = 1_000  # spelled-out numbers are looked for in answers up to this length

# A number not glued to a preceding word character or decimal point.
_NUMBER = re.compile(
    r"(?<![\w.])([-+\u2212]?)"
    r"((?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
    r"(?:[eE]([-+]?\d+))?(?![\d])"
)
_PLAIN = re.compile(r"[-+\u2212]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
MAX_EXPONENT_DIGITS = 6  # beyond ±999999 a float is 0 or overflows; longer exponents are not read

_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "none": 0,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}
_WORD_NUMBER = re.compile(
    r"\b(?:(" + "|".join(_TENS) + r")(?:[\s-]+(" + "|".join(k for k in _UNITS if _UNITS[k] and _UNITS[k] < 10) + r"))?"
    r"|(" + "|".join(_UNITS) + r")|(a\s+hundred|one\s+hundred|hundred))\b",
    re.IGNORECASE,
)


def _to_float(sign: str, digits: str, exponent: str | None) -> float | None:
    """The number's value, or None when it is too long, overflows or is not finite.

    An exponent is read whole (``1e999999999`` is one number that overflows, never
    ``1`` followed by text), so a non-finite answer never equals a finite gold.
    """
    if len(digits) > MAX_NUMBER_CHARS:
        return None
    if exponent and len(exponent.lstrip("+-").lstrip("0")) > MAX_EXPONENT_DIGITS:
        if not exponent.startswith("-"):
            return None  # overflows
        exponent = "-" + "9" * MAX_EXPONENT_DIGITS  # underflows to 0, as float() would
    value = float(digits.replace(",", "") + (f"e{exponent}" if exponent else ""))
    if sign in ("-", "\u2212"):
        value = -value
    return value if math.isfinite(value) else None


def _last_match(text: str):
    last = None
    for m in _NUMBER.finditer(text):
        last = m
    return last


def last_number(text: str) -> float | None:
    """The last number in ``text``: digits first, else a spelled-out number (0–100).

    Only a window before the last digit is scanned when it holds a number, so long
    answers cost a few ``rfind`` calls.
    """
    idx = max(text.rfind(d) for d in "0123456789")
    if idx >= 0:
        last = _last_match(text[max(0, idx - 200) : idx + 1]) or _last_match(text)
        if last is not None:
            return _to_float(last.group(1), last.group(2), last.group(3))
    if len(text) > MAX_WORD_TEXT:
        return None
    word = None
    for m in _WORD_NUMBER.finditer(text):
        word = m
    if word is None:
        return None
    if word.group(1):
        return float(_TENS[word.group(1).lower()] + (_UNITS[word.group(2).lower()] if word.group(2) else 0))
    if word.group(3):
        return float(_UNITS[word.group(3).lower()])
    return 100.0


def plain_number(text: str) -> float | None:
    """The value of ``text`` when it is exactly one number (thousands separators allowed)."""
    s = text.strip()
    if not s or len(s) > MAX_NUMBER_CHARS or not _PLAIN.fullmatch(s):
        return None
    s = s.replace(",", "").replace("\u2212", "-")
    mantissa, _, exponent = s.lower().partition("e")
    if exponent and len(exponent.lstrip("+-").lstrip("0")) > MAX_EXPONENT_DIGITS:
        return None if not exponent.startswith("-") else 0.0
    try:
        value = float(s)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def close(a: float, b: float, tolerance: float = DEFAULT_TOLERANCE) -> bool:
    """``|a - b| <= tolerance * max(1, |b|)``."""
    return abs(a - b) <= tolerance * max(1.0, abs(b))


def gold_numbers(golds: list[str], record_id: Any = None) -> list[float]:
    """Parse the gold answers as numbers; raise :class:`RecordError` when none parses."""
    values = []
    for g in golds:
        v = plain_number(strip_latex_wrappers(g).rstrip("%").strip())
        if v is None:
            v = last_number(g)
        if v is not None:
            values.append(v)
    if not values:
        raise RecordError(f"{where(record_id)}: gold answer {golds!r} is not a number")
    return values


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float:
    """1.0 when the last number of the extracted answer equals a gold number, else 0.0."""
    gold = gold_numbers(golds, ctx.record.get("id"))
    answer = extract_answer(response)
    if answer is None:
        return 0.0
    if len(answer) > 100_000:
        raise VerifierFailure("answer_too_long")
    value = last_number(strip_latex_wrappers(answer))
    if value is None:
        return 0.0
    tol = float(param(params, "tolerance", DEFAULT_TOLERANCE))
    return 1.0 if any(close(value, g, tol) for g in gold) else 0.0
