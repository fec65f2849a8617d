"""Which files of an input folder are records.

A folder given as input is searched recursively for files with a records suffix.
Hidden files and folders (``.tmp``, ``.nv-meta``) are never inputs, and a ``.json``
file holds records only as an array: a JSON object, such as a folder's
``EXPECTED.json`` or a ``stats.json``, is skipped with one line on stderr that
names it and says why. A file named directly on the command line is always read
(and refused with a one-line error when it is not records).
"""

from __future__ import annotations

import sys
from collections.abc import Container
from pathlib import Path

_REPORTED: set[Path] = set()  # one line per skipped file and process, however often a folder is listed


def _json_array(path: Path) -> bool:
    """Whether a ``.json`` file starts like an array (or is empty); reads at most 4 KiB."""
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if head in (b"[", b""):
        return True
    if path.resolve() not in _REPORTED:
        _REPORTED.add(path.resolve())
        print(f"skipped {path}: not records (a .json input holds an array of records; this file starts with "
              f"{head.decode(errors='replace')!r})", file=sys.stderr)
    return False


def records_files(folder: Path, suffixes: Container[str]) -> list[Path]:
    """The record files under ``folder`` (sorted), skipping hidden paths and JSON that is not an array.

    Args:
        folder: An input folder.
        suffixes: Lower-case file suffixes of record formats (``.jsonl``, ``.parquet``, ...).
    """
    found = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix.lower() not in suffixes:
            continue
        if any(part.startswith(".") for part in path.relative_to(folder).parts):
            continue
        if path.suffix.lower() == ".json" and not _json_array(path):
            continue
        found.append(path)
    return found
