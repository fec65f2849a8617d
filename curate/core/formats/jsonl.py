"""JSON Lines (``.jsonl``, ``.ndjson``: one record a line) and JSON arrays (``.json``: one array of records).

A JSONL file is cut into parts at line starts (a part seeks to its first line); a bad line is one errored
row (``malformed_json``, or a limit of :mod:`curate.core.formats.jsontext`), a blank line no row. A JSON
array is read whole; its file must parse (one line naming the file otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.core.formats.container import Container, Part, Row, even_parts
from curate.core.formats.jsontext import JsonRefused, check_value, parse_json
from curate.core.io import as_path, atomic_open, open_input


def _line_offsets(path: Path) -> list[int]:
    """Byte offsets of every line start (the last entry is the file size)."""
    offsets = [0]
    pos = 0
    with open_input(path) as fh:
        for line in fh:
            pos += len(line)
            offsets.append(pos)
    if len(offsets) > 1 and offsets[-1] == offsets[-2]:
        offsets.pop()
    return offsets


class JsonLines(Container):
    """One record a line."""

    name = "jsonl"
    suffixes = (".jsonl", ".ndjson")
    row_word = "line"
    first_row = 1

    def split(self, path: Path, rows_per_part: int) -> list[Part]:
        """Parts at line starts."""
        offsets = _line_offsets(path)
        return even_parts(path, self.name, len(offsets) - 1, rows_per_part, offsets)

    def rows(self, part: Part, heads: bool, views: bool) -> Iterator[Row]:
        """The part's lines, each parsed within the JSON limits."""
        with open_input(part.path) as fh:
            fh.seek(part.offset)
            for row in range(part.start, part.stop):
                text = fh.readline().strip()
                if not text:
                    yield row, None, "blank"
                    continue
                try:
                    yield row, parse_json(text), None
                except JsonRefused as exc:
                    yield row, None, f"{exc.reason}:{exc.detail}"

    def write_back(self, dest: Path, rows: Sequence[dict[str, Any]], source: Path) -> int:
        """One row a line."""
        with atomic_open(dest, "w") as fh:
            for obj in rows:
                fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
        return len(rows)


def load_json_array(path: Path) -> list[Any]:
    """The records of a ``.json`` file (one array).

    Raises:
        UserError: the file is not one readable JSON array (naming the file and the line).
    """
    try:
        with open_input(path) as fh:
            data = json.loads(fh.read())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg}); a .json input must hold one array of "
                        "records") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    except (RecursionError, ValueError) as exc:  # nesting too deep, an integer too long
        raise UserError(f"{path}: not readable JSON ({str(exc).split(';')[0]}); a .json input must hold one array of "
                        "records (use .jsonl: a bad line is then one errored record)") from None
    if not isinstance(data, list):
        raise UserError(f"{path}: a .json input must hold an array of records; for one record per line use .jsonl")
    return data


class JsonArray(Container):
    """One array of records."""

    name = "json"
    suffixes = (".json",)

    def split(self, path: Path, rows_per_part: int) -> list[Part]:
        """Parts of the array's records."""
        return even_parts(path, self.name, len(load_json_array(path)), rows_per_part)

    def rows(self, part: Part, heads: bool, views: bool) -> Iterator[Row]:
        """The part's records, each checked against the JSON limits."""
        data = load_json_array(as_path(part.path))
        for row in range(part.start, min(part.stop, len(data))):
            try:
                check_value(data[row])
            except JsonRefused as exc:
                yield row, None, f"{exc.reason}:{exc.detail}"
                continue
            yield row, data[row], None

    def write_back(self, dest: Path, rows: Sequence[dict[str, Any]], source: Path) -> int:
        """One array."""
        with atomic_open(dest, "w") as fh:
            json.dump(list(rows), fh, ensure_ascii=False, indent=1)
            fh.write("\n")
        return len(rows)
