"""JSON rows parsed within limits: each way a crafted line fails is a reason (curate.core.formats.rows)."""

from __future__ import annotations

import json

import pytest

from curate.core.formats.rows import MAX_DEPTH, JsonRefused, check_value, depth, parse_json


@pytest.mark.parametrize("text, reason", [
    ('{"id": ', "malformed_json"),
    (b'{"id": "\xff"}', "malformed_json"),
    ('{"n": ' + "9" * 5000 + "}", "number_too_large"),
    ("[" * 100_000 + "]" * 100_000, "nested_too_deep"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested_too_deep"),  # parses, but deeper than records go
    ('{"caption": "a \\ud800 b"}', "invalid_text"),
    ('{"\\udfff": 1}', "invalid_text"),  # a key too
])
def test_each_refusal_has_its_reason(text: str | bytes, reason: str) -> None:
    with pytest.raises(JsonRefused) as info:
        parse_json(text)
    assert info.value.reason == reason


def test_what_records_hold_is_read_as_json_reads_it() -> None:
    row = {"id": "a", "messages": [{"role": "user", "content": "😀 \\ud83d"}], "deep": [[[[1]]]]}
    for text in (json.dumps(row), json.dumps(row).encode(), json.dumps(row, ensure_ascii=False)):
        assert parse_json(text) == row  # an escaped surrogate pair is one character, not a refusal
    nested = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert depth(parse_json(nested)) == MAX_DEPTH
    check_value(row)
    with pytest.raises(JsonRefused):
        check_value({"text": "\ud800"})
