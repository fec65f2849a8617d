"""What a record container is to curate: a row range of one input file, and the interface every format fills.

A :class:`Container` (one per module of :mod:`curate.core.formats`, registered in
:mod:`curate.core.formats.registry`) knows its file suffixes, how to cut a file into :class:`Part`\\ s
of at most N rows, how to yield a part's raw rows, and how to write rows back (``resample``'s
selected records). Adding a format (``.arrow``, say) is one module and one registry line.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

#: ``(row, raw row or None, problem or None)``: what a container yields for each row of a part; ``problem`` is
#: ``"blank"`` for a line that is no row, else ``"reason:detail"``.
Row = tuple[int, Any, "str | None"]


@dataclass(frozen=True)
class Part:
    """A contiguous range of rows ``[start, stop)`` of one input file.

    ``offset`` is the byte offset of row ``start`` for containers that can seek to a row (JSONL lines, tar
    member groups), 0 otherwise. Reading settings of the run, carried by its parts to the workers:
    ``text_field`` (a caption field for rows in no known layout: :func:`curate.core.records.to_canonical`),
    ``image_root`` (the folder or bucket prefix relative image paths are read from instead of the file's own:
    ``--image-root``), ``text_only`` (the run reads text only: a caption or URL row without an image is
    text, not ``missing_image``) and ``layout`` (the RL layout the run names, ``--layout``: rows are read as
    :mod:`curate.core.formats.rl_layouts` converts that layout; None: detected row by row).
    """

    path: str
    format: str
    start: int
    stop: int
    offset: int = 0
    text_field: str | None = None
    image_root: str | None = None
    text_only: bool = False
    layout: str | None = None

    def __len__(self) -> int:
        return self.stop - self.start


class Container(ABC):
    """One input format (see the module docstring)."""

    #: The format's name, carried by its parts.
    name: ClassVar[str]
    #: Lower-case file suffixes (``.tar.gz`` counts as one).
    suffixes: ClassVar[tuple[str, ...]]
    #: Whether splitting walks the whole file, so its parts are worth keeping across runs (``curate.core.splits``).
    cached_split: ClassVar[bool] = False
    #: The suffix of a file of this format written back (tars come back as Parquet).
    written_suffix: ClassVar[str | None] = None
    #: How messages name a row, and the number of the first (JSONL: ``line 1``; others: ``row 0``); a row
    #: without an id gets ``<stem>:<number>``.
    row_word: ClassVar[str] = "row"
    first_row: ClassVar[int] = 0

    @abstractmethod
    def split(self, path: Path, rows_per_part: int) -> list[Part]:
        """The parts of one file, of at most ``rows_per_part`` rows each, in row order."""

    @abstractmethod
    def rows(self, part: Part, heads: bool, views: bool) -> Iterator[Row]:
        """The raw rows of a part (``heads``, ``views``: :func:`curate.core.records.iter_rows`)."""

    @abstractmethod
    def write_back(self, dest: Path, rows: Sequence[dict[str, Any]], source: Path) -> int:
        """Write ``rows`` (raw rows of ``source``) to ``dest`` in this format (or :attr:`written_suffix`'s); the count."""

    def parts(self, path: Path, counts: Sequence[tuple[int, int, int]]) -> list[Part]:
        """Parts from ``(start, stop, offset)`` triples."""
        return [Part(str(path), self.name, start, stop, offset) for start, stop, offset in counts]


def even_parts(path: Path, fmt: str, n: int, rows_per_part: int, offsets: Sequence[int] | None = None) -> list[Part]:
    """``n`` rows cut into parts of ``rows_per_part`` (with each part's byte ``offsets`` when a reader seeks)."""
    return [Part(str(path), fmt, s, min(s + rows_per_part, n), offsets[s] if offsets is not None else 0)
            for s in range(0, n, rows_per_part)]
