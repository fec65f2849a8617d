"""JSON text of user data parsed within limits: what a crafted line can do is a reason, never an exception.

Every JSON row a reader parses (a JSONL line, a ``.json`` array, a tar's ``.json`` member, a
conversation stored as a JSON string) goes through :func:`parse_json`. Beyond malformed text
(``malformed_json``) it refuses, each with its reason:

* ``number_too_large``: an integer of more than Python's 4,300 digits (``int`` refuses to convert it);
* ``nested_too_deep``: arrays and objects nested more than :data:`MAX_DEPTH` deep (a record is a few
  levels deep; a line of 100,000 brackets would exhaust the interpreter's stack);
* ``invalid_text``: a string holding a lone UTF-16 surrogate (``"\\ud800"``): valid JSON, but no UTF-8
  encoder (Parquet, tars, the tokenizer, the trainer) can write it.

The checks beyond parsing cost a C-speed scan of the text: the depth is walked only when the text holds
more than :data:`MAX_DEPTH` brackets, strings only when it holds an escaped surrogate.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Arrays and objects nested deeper than this are refused (``nested_too_deep``).
MAX_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


class JsonRefused(ValueError):
    """JSON text that is not a usable row; ``reason`` is stable, ``detail`` says what."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def parse_json(text: str | bytes | bytearray) -> Any:
    """Parse JSON text of user data within the limits of the module docstring.

    Raises:
        JsonRefused: ``malformed_json``, ``number_too_large``, ``nested_too_deep`` or ``invalid_text``.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonRefused("malformed_json", exc.msg) from None
    except UnicodeDecodeError:
        raise JsonRefused("malformed_json", "not UTF-8") from None
    except RecursionError:
        raise JsonRefused("nested_too_deep", f"arrays or objects nested more than {MAX_DEPTH} deep") from None
    except ValueError as exc:  # int() refusing more than sys.get_int_max_str_digits() digits
        raise JsonRefused("number_too_large", str(exc).split(";")[0]) from None
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
        surrogates = _SURROGATE_ESCAPE.search(text) is not None
    else:
        brackets = text.count(b"[") + text.count(b"{")
        surrogates = _SURROGATE_ESCAPE_BYTES.search(text) is not None
    if brackets > MAX_DEPTH and depth(value) > MAX_DEPTH:
        raise JsonRefused("nested_too_deep", f"arrays or objects nested more than {MAX_DEPTH} deep")
    if surrogates:
        check_text(value)
    return value


def check_value(value: Any) -> None:
    """The checks of :func:`parse_json` beyond parsing, on a value parsed already (a row of a ``.json`` array).

    Raises:
        JsonRefused: ``nested_too_deep`` or ``invalid_text``.
    """
    if depth(value) > MAX_DEPTH:
        raise JsonRefused("nested_too_deep", f"arrays or objects nested more than {MAX_DEPTH} deep")
    check_text(value)


def depth(value: Any) -> int:
    """How deep arrays and objects nest in a parsed JSON value (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def check_text(value: Any) -> None:
    """Refuse a parsed value holding a string that UTF-8 cannot encode (a lone surrogate), keys included.

    Raises:
        JsonRefused: ``invalid_text``.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise JsonRefused("invalid_text", f"a lone surrogate {item[exc.start]!r} in a string "
                                                  "(no UTF-8 writer accepts it)") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
