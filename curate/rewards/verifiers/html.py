"""HTML verifier: 0.6 x token Jaccard + 0.4 x tag Jaccard (1.0 for a normalised exact match).

The code judged is the extracted answer (``<answer>`` or ``\\boxed{}``; its fenced block
if it has one), else the last fenced code block, else the last ``<!DOCTYPE html>`` /
``<html>`` document, else the whole response. Tokens are ``\\w+`` words and the
characters ``< > = / "``; tags are opening and closing tag names (``p``, ``/p``). The
normalised form (exact-match check) collapses whitespace, unifies quotes, drops
comments and lower-cases. All steps are linear in the response length; documents over
300,000 characters are refused (``answer_too_long``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Mapping

from curate.rewards.extract import extract_answer, last_code_block
from curate.rewards.verdict import Context, VerifierFailure

MAX_CODE_CHARS = 300_000
_TOKENS = re.compile(r'\w+|[<>=/"]')
_TAGS = re.compile(r"<(/?\w+)")
_SPACES = re.compile(r"\s+")


def strip_comments(text: str) -> str:
    """Remove ``<!-- … -->`` comments (an unterminated one runs to the end)."""
    out, pos = [], 0
    while True:
        start = text.find("<!--", pos)
        if start < 0:
            out.append(text[pos:])
            break
        out.append(text[pos:start])
        end = text.find("-->", start + 4)
        if end < 0:
            break
        pos = end + 3
    return "".join(out)


def normalize(code: str) -> str:
    """Whitespace collapsed, ``"`` -> ``'``, comments removed, lower-cased."""
    return _SPACES.sub(" ", strip_comments(code)).replace('"', "'").strip().lower()


def jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float:
    """``|a & b| / |a | b|`` (0.0 when both are empty)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def token_set(code: str) -> set[str]:
    """Word and punctuation tokens of ``code`` (lower-cased)."""
    return set(_TOKENS.findall(code.lower()))


def tag_set(code: str) -> set[str]:
    """Opening and closing tag names of ``code`` (lower-cased)."""
    return set(_TAGS.findall(code.lower()))


def extract_document(response: str, marker: str, end_marker: str, languages: tuple[str, ...]) -> str:
    """The markup a response proposes (see the module docstring for the order)."""
    answer = extract_answer(response)
    if answer is not None:
        fenced = last_code_block(answer)
        return (fenced if fenced is not None else answer).strip()
    fenced = last_code_block(response, languages)
    if fenced is not None:
        return fenced.strip()
    low = response.lower()
    start = max(low.rfind(m) for m in marker.split("|"))
    if start >= 0:
        end = low.find(end_marker, start)
        return response[start : (len(response) if end < 0 else end + len(end_marker))].strip()
    return response.strip()


@lru_cache(maxsize=1024)
def _reference(reference: str) -> tuple[str, frozenset[str], frozenset[str]]:
    return normalize(reference), frozenset(token_set(reference)), frozenset(tag_set(reference))


def similarity(code: str, reference: str) -> float:
    """0.6 x token Jaccard + 0.4 x tag Jaccard, or 1.0 for a normalised exact match."""
    ref_norm, ref_tokens, ref_tags = _reference(reference)
    if normalize(code) == ref_norm:
        return 1.0
    tok = jaccard(token_set(code), ref_tokens) if ref_tokens else 0.0
    tag = jaccard(tag_set(code), ref_tags) if ref_tags else 0.0
    return 0.6 * tok + 0.4 * tag


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float:
    """Best similarity of the proposed HTML to a gold document."""
    code = extract_document(response, "<!doctype html|<html", "</html>", ("html", "htm", ""))
    if len(code) > MAX_CODE_CHARS:
        raise VerifierFailure("answer_too_long")
    if not code:
        return 0.0
    return max(similarity(code, g.strip()) for g in golds)
