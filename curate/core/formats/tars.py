"""WebDataset tars as containers: plain tars (walked by their headers, parts seek to their first group) and
gzipped tars (``.tgz``, ``.tar.gz``: streamed from the start, their images carried as bytes).

Rows are member groups (:mod:`curate.core.formats.wds`); records written back from a tar are Parquet rows
with ``datasets`` image structs (:func:`curate.core.formats.writeback.records_table`).
"""

from __future__ import annotations

import gzip
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from curate.core.formats.container import Container, Part, Row, even_parts
from curate.core.formats.rows import IMAGE_EXTS
from curate.core.formats.wds import HELD_LIMIT, TEXT_LIMIT, split_name, count_groups, group_row, member_row, \
    scan_groups
from curate.core.io import input_size, open_input, write_parquet


class Tar(Container):
    """A WebDataset tar: its groups found from the member headers alone (cached across runs)."""

    name = "tar"
    suffixes = (".tar",)
    cached_split = True
    written_suffix = ".parquet"

    def split(self, path: Path, rows_per_part: int) -> list[Part]:
        """Parts of member groups, each starting at its first group's header."""
        with open_input(path) as fh:
            offsets, n = count_groups(fh, input_size(path))
        return even_parts(path, self.name, n, rows_per_part, offsets)

    def rows(self, part: Part, heads: bool, views: bool) -> Iterator[Row]:
        """The part's groups as raw rows (images as addresses with ``heads``)."""
        with open_input(part.path) as fh:
            groups = scan_groups(fh, input_size(part.path), part.offset)
            for row, group in zip(range(part.start, part.stop), groups):
                raw, problem = group_row(fh, group, part.path, heads)
                yield row, raw, problem

    def write_back(self, dest: Path, rows: Sequence[dict[str, Any]], source: Path) -> int:
        """Parquet rows with image structs."""
        from curate.core.formats.writeback import records_table

        write_parquet(dest, records_table(list(rows)))
        return len(rows)


class GzippedTar(Tar):
    """A gzipped WebDataset tar: no offsets to seek to, so each part streams the file from its start."""

    name = "tgz"
    suffixes = (".tgz", ".tar.gz")

    def split(self, path: Path, rows_per_part: int) -> list[Part]:
        """Parts of the groups counted by one pass through the stream."""
        return even_parts(path, self.name, count_gzip_groups(str(path)), rows_per_part)

    def rows(self, part: Part, heads: bool, views: bool) -> Iterator[Row]:
        """The part's groups, read from the stream (images as bytes)."""
        for row, (raw, problem) in enumerate(gzip_rows(part.path, part.stop)):
            if row >= part.start:
                yield row, raw, problem


def _gzip_groups(path: str, read: bool) -> Iterator[tuple[str, list[tuple[str, Any]], str]]:
    """``(key, members, problem)`` of every group of a gzipped tar, streamed front to back (member data read
    only with ``read``); the last group has a ``problem`` when the archive is cut short or corrupt."""
    key, members = None, []
    try:
        with open_input(path) as raw, gzip.GzipFile(fileobj=raw) as unzipped, \
                tarfile.open(fileobj=unzipped, mode="r|") as archive:
            for info in archive:
                parts = split_name(info.name) if info.isreg() else None
                if parts is None:
                    continue
                if parts[0] != key and key is not None:
                    yield key, members, ""
                    members = []
                key = parts[0]
                if not read:
                    data = None
                elif info.size > (HELD_LIMIT if parts[1].rsplit(".", 1)[-1] in IMAGE_EXTS else TEXT_LIMIT):
                    yield key, [], f"too_large:group {key}: member .{parts[1]} has {info.size:,} bytes"
                    key, members = None, []
                    continue
                else:
                    data = archive.extractfile(info).read()
                members.append((parts[1].lower(), data))
            while unzipped.read(1 << 20):  # to the end of the stream: a cut file fails here, not silently
                pass
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        yield (key or "@end"), members, f"truncated_tar:group {key or '@end'}: {type(exc).__name__}: {exc}"
        return
    if key is not None:
        yield key, members, ""


def count_gzip_groups(path: str) -> int:
    """How many groups (rows) a gzipped tar holds, the bad last one included."""
    return sum(1 for _ in _gzip_groups(path, read=False))


def gzip_rows(path: str, stop: int) -> Iterator[tuple[dict[str, Any], str | None]]:
    """The raw rows of a gzipped tar's first ``stop`` groups, streamed (see :func:`group_row`)."""
    for row, (key, members, problem) in enumerate(_gzip_groups(path, read=True)):
        if row >= stop:
            return
        yield ({"id": key}, problem) if problem else member_row(key, members)
