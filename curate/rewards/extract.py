"""Answer extraction from model responses, linear in the response length.

Every function here runs on untrusted, possibly huge model output, so none of
them uses a regular expression that can backtrack quadratically: tags are found
with ``str.rfind`` and braces are matched in one pass.

- :func:`last_answer_block`: content of the last ``<answer>…</answer>``.
- :func:`last_boxed`: content of the last balanced ``\\boxed{…}`` (nested braces).
- :func:`extract_answer`: the answer a verifier should judge (answer block, then
  the boxed content inside it or anywhere, else ``None``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator

ANSWER_OPEN = "<answer>"
ANSWER_CLOSE = "</answer>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_BOX_COMMANDS = ("\\boxed{", "\\fbox{")
_BRACES = re.compile(r"[{}]")
MAX_BRACES = 50_000
MAX_BARE_ANSWER = 200  # longest untagged text judged as an answer  # brace-matching work per call is bounded: beyond it a box is "not found"
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n`]*\n")


def answer_block_span(text: str) -> tuple[int, int] | None:
    """Span ``(start, end)`` of the last ``<answer>…</answer>`` including both tags."""
    close = text.rfind(ANSWER_CLOSE)
    if close < 0:
        return None
    start = text.rfind(ANSWER_OPEN, 0, close)
    if start < 0:
        return None
    return start, close + len(ANSWER_CLOSE)


def last_answer_block(text: str) -> str | None:
    """Content of the last ``<answer>…</answer>`` block, or ``None``.

    The last closing tag is paired with the nearest opening tag before it.
    """
    span = answer_block_span(text)
    if span is None:
        return None
    return text[span[0] + len(ANSWER_OPEN) : span[1] - len(ANSWER_CLOSE)]


def _escaped(text: str, pos: int) -> bool:
    """True when the brace at ``pos`` is a LaTeX escaped brace (``\\{`` but not ``\\\\{``)."""
    return pos > 0 and text[pos - 1] == "\\" and not (pos > 1 and text[pos - 2] == "\\")


def _match_forward(text: str, open_pos: int, budget: int = MAX_BRACES) -> int:
    """Index of the brace closing the one at ``open_pos``; -1 when unbalanced or over ``budget`` braces."""
    depth = 0
    for n, m in enumerate(_BRACES.finditer(text, open_pos)):
        if n >= budget:
            return -1
        p = m.start()
        if _escaped(text, p):
            continue
        if text[p] == "{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return p
    return -1


def _box_command_before(text: str, brace: int) -> int:
    """Start of the box command whose ``{`` is at ``brace``, or -1."""
    for cmd in _BOX_COMMANDS:
        start = brace - len(cmd) + 1
        if start >= 0 and text.startswith(cmd, start):
            return start
    return -1


def boxed_spans(text: str) -> list[tuple[int, int, int]]:
    """All balanced ``\\boxed{…}`` / ``\\fbox{…}`` as ``(command_start, content_start, close)``.

    One pass over the braces of ``text``; unbalanced commands are skipped. A text with
    more than :data:`MAX_BRACES` braces is not searched (no spans).
    """
    if not any(cmd in text for cmd in _BOX_COMMANDS):
        return []
    braces = [m.start() for m in itertools.islice(_BRACES.finditer(text), MAX_BRACES + 1)]
    if len(braces) > MAX_BRACES:
        return []
    spans: list[tuple[int, int, int]] = []
    for o, close in _brace_pairs(text, braces, "{"):
        start = _box_command_before(text, o)
        if start >= 0:
            spans.append((start, o + 1, close))
    spans.sort()
    return spans


def _brace_pairs(text: str, positions: Iterable[int], opening: str) -> Iterator[tuple[int, int]]:
    """``(open, close)`` of the unescaped braces at ``positions`` that pair up, scanning in their order.

    ``opening`` is the brace that starts a pair in the scanning order: ``{`` scanning
    forwards, ``}`` scanning backwards.
    """
    pending: list[int] = []
    for p in positions:
        if _escaped(text, p):
            continue
        if text[p] == opening:
            pending.append(p)
        elif pending:
            q = pending.pop()
            yield (q, p) if opening == "{" else (p, q)


def _last_balanced_backward(text: str) -> tuple[int, int, int] | None:
    """The balanced box that starts last, scanning at most MAX_BRACES braces from the end."""
    window = max(0, len(text) - 8 * MAX_BRACES)
    braces = [m.start() for m in _BRACES.finditer(text, window)][-MAX_BRACES:]
    for o, close in _brace_pairs(text, reversed(braces), "}"):
        start = _box_command_before(text, o)
        if start >= 0:
            return start, o + 1, close
    return None


def last_boxed_span(text: str) -> tuple[int, int, int] | None:
    """``(command_start, content_start, close)`` of the last balanced box, or ``None``."""
    best = -1
    for cmd in _BOX_COMMANDS:
        best = max(best, text.rfind(cmd))
    if best < 0:
        return None
    cmd_len = next(len(c) for c in _BOX_COMMANDS if text.startswith(c, best))
    close = _match_forward(text, best + cmd_len - 1)
    if close >= 0:
        return best, best + cmd_len, close
    return _last_balanced_backward(text)  # the last command is unbalanced: search backwards


def last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{…}`` (or ``\\fbox{…}``), nested braces allowed."""
    span = last_boxed_span(text)
    if span is None:
        return None
    return text[span[1] : span[2]]


def extract_answer(text: str) -> str | None:
    """The answer to judge: last ``<answer>`` block (its boxed content if it has one), else the
    last ``\\boxed{}`` anywhere, else the text after the last ``</think>`` (or the whole
    response) when it is short enough to be an answer (:data:`MAX_BARE_ANSWER` characters);
    ``None`` when nothing is left.

    A bare answer ("B", "12", "yes") is judged like a tagged one; the format score is
    where missing tags are penalised.
    """
    block = last_answer_block(text)
    if block is not None:
        inner = last_boxed(block)
        return inner if inner is not None else block
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    close = text.rfind(THINK_CLOSE)
    rest = (text[close + len(THINK_CLOSE):] if close >= 0 else text).strip()
    if not rest or len(rest) > MAX_BARE_ANSWER or (close < 0 and THINK_OPEN in text):
        return None  # empty, a whole essay, or an unfinished chain of thought: no answer given
    return rest


def last_code_block(text: str, languages: tuple[str, ...] = ()) -> str | None:
    """Content of the last fenced code block (optionally of one of ``languages``).

    An opening fence without a closing fence takes everything after it.
    """
    best: str | None = None
    pos = 0
    while True:
        m = _FENCE.search(text, pos)
        if m is None:
            break
        end = text.find("```", m.end())
        lang = m.group(1).lower()
        body = text[m.end() :] if end < 0 else text[m.end() : end]
        if not languages or lang in languages:
            best = body
        if end < 0:
            break
        pos = end + 3
    return best


_WRAPPERS = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|textit|mathit|operatorname)\s*\{")


def strip_latex_wrappers(s: str, max_rounds: int = 8) -> str:
    """Remove ``$`` delimiters, ``\\text{…}``-like wrappers, ``\\boxed{…}`` and markdown bold.

    Bounded in work: at most ``max_rounds`` unwrapping passes, each linear.
    """
    s = s.strip()
    for _ in range(max_rounds):
        before = s
        s = s.replace("**", "").strip()
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip()
        if s.startswith("\\(") and s.endswith("\\)"):
            s = s[2:-2].strip()
        if s.startswith("\\[") and s.endswith("\\]"):
            s = s[2:-2].strip()
        inner = last_boxed(s) if ("\\boxed{" in s or "\\fbox{" in s) else None
        if inner is not None:
            s = inner.strip()
        m = _WRAPPERS.search(s)
        if m is not None:
            close = _match_forward(s, m.end() - 1)
            if close > 0:
                s = (s[: m.start()] + s[m.end() : close] + s[close + 1 :]).strip()
        if s == before:
            break
    return s
