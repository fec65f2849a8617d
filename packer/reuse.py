"""Reusing earlier token counts: the text counts looked up by key, and a report of what was reused.

``curate pack INPUT --lengths OLD/lengths.parquet`` (or the automatic reuse of a folder
that counted the same inputs) takes from ``OLD`` only the text counts of the input's
records whose ``text_key`` matches (:mod:`packer.lengths`); every other record is
counted, and records of ``OLD`` that are not in the input are ignored and reported,
never packed. Both sides work on columns: the driver sorts the earlier keys once into
two ``.npy`` files (:func:`index_text_counts`) that every worker memory-maps
(:class:`TextCounts`: one binary search per lookup, pages shared by all workers of a
machine), and the report compares id columns with Arrow's ``is_in``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.io import atomic_open
from curate.core.progress import note
from curate.core.stats import StageStats

SHOWN_IDS = 5


INDEX_DIR = "_reuse"
"""Folder of an output (beside its shards) holding the sorted earlier keys for the workers."""


class TextCounts:
    """``text_key → text_tokens`` of an earlier ``lengths.parquet``, as sorted arrays (no Python object per row).

    Supports ``key in counts``, ``counts[key]`` and ``len(counts)`` like the dict it replaces;
    a lookup is one binary search. Made from the columns (:meth:`from_columns`) or opened
    memory-mapped from :func:`index_text_counts`'s folder (:meth:`open`).
    """

    def __init__(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self._keys, self._counts = keys, counts

    @classmethod
    def from_columns(cls, keys: pa.Array | pa.ChunkedArray, counts: pa.Array | pa.ChunkedArray) -> TextCounts:
        """Sort the keys (rows without a key or a count are left out)."""
        valid = pc.and_(pc.is_valid(keys), pc.is_valid(counts))
        keys, counts = keys.filter(valid), counts.filter(valid)
        order = pc.sort_indices(keys)
        return cls(_fixed_width(keys.take(order)), np.asarray(counts.take(order).to_numpy(), dtype=np.int64))

    @classmethod
    def open(cls, folder: str | Path) -> TextCounts:
        """The arrays :meth:`save` wrote, memory-mapped (read-only, shared between processes)."""
        folder = Path(folder)
        return cls(np.load(folder / "keys.npy", mmap_mode="r"), np.load(folder / "counts.npy", mmap_mode="r"))

    def save(self, folder: str | Path) -> None:
        """Write ``keys.npy`` and ``counts.npy`` into ``folder`` (each atomically; keys last, read first)."""
        folder = Path(folder)
        for name, array in (("counts.npy", self._counts), ("keys.npy", self._keys)):
            with atomic_open(folder / name, "wb") as fh:
                np.save(fh, array)

    def __len__(self) -> int:
        return int(self._counts.shape[0])

    def _find(self, key: str) -> int:
        raw = key.encode("utf-8")
        i = int(np.searchsorted(self._keys, raw))
        return i if i < len(self) and self._keys[i] == raw else -1

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._find(key) >= 0

    def __getitem__(self, key: str) -> int:
        i = self._find(key)
        if i < 0:
            raise KeyError(key)
        return int(self._counts[i])


def _fixed_width(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Strings as a numpy ``S<width>`` array in the same order (zero-copy when all have one length, as keys do)."""
    arr = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    arr = arr.cast(pa.string())
    n = len(arr)
    if n == 0:
        return np.zeros(0, "S1")
    offsets = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4)
    lengths = np.diff(offsets)
    width = max(int(lengths.max()), 1)
    if int(lengths.min()) == width and arr.null_count == 0:
        return np.frombuffer(arr.buffers()[2], f"S{width}", n, int(offsets[0])).copy()
    return np.array([k.encode("utf-8") for k in arr.to_pylist()], f"S{width}")  # mixed lengths: rare


def reusable_text_counts(path: str | None) -> TextCounts | dict[str, int]:
    """The text counts of an earlier ``lengths.parquet``, or of its index folder (empty without one, or without keys)."""
    if path is None:
        return {}
    if Path(path).is_dir():
        return TextCounts.open(path) if (Path(path) / "keys.npy").exists() else {}
    try:
        schema = pq.read_schema(path)
        if "text_key" not in schema.names or "text_tokens" not in schema.names:
            return {}  # counted before keys existed: nothing can be trusted
        table = pq.ParquetFile(path).read(columns=["text_key", "text_tokens"])
    except (OSError, ValueError, pa.ArrowException):
        return {}
    return TextCounts.from_columns(table.column("text_key"), table.column("text_tokens"))


def index_text_counts(earlier: str | Path, out: str | Path) -> str:
    """Sort an earlier ``lengths.parquet``'s keys once, into ``OUT/_reuse``; return what workers should open.

    The workers then memory-map the same two files instead of each building its own copy.
    Returns the folder, or ``earlier`` itself when it has no keys (nothing is reused then).
    """
    found = reusable_text_counts(str(earlier))
    if not isinstance(found, TextCounts):
        return str(earlier)
    folder = Path(out) / INDEX_DIR
    found.save(folder)
    return str(folder)


def reuse_report(earlier: Path, table: pa.Table, stats: StageStats, *, explicit: bool) -> dict[str, Any]:
    """Compare the earlier counts with this run's; print one line on stderr and return the figures.

    Args:
        earlier: The earlier ``lengths.parquet``.
        table: This run's merged lengths (records counted).
        stats: This run's lengths-step stats (``text_counts_reused`` in ``extra``; rejects).
        explicit: Whether the user named ``earlier`` (``--lengths``) or it was found automatically.
    """
    old_ids = pq.ParquetFile(earlier).read(columns=["id"]).column("id").combine_chunks().cast(pa.string())
    here = pa.chunked_array([table.column("id").cast(pa.string()),
                             stats.rejects_table().column("id")], pa.string()).combine_chunks()
    missing = pc.unique(old_ids.filter(pc.invert(pc.is_in(old_ids, value_set=here, skip_nulls=False))))
    ignored = missing.take(pc.sort_indices(missing)).drop_null()
    shown = ignored.slice(0, SHOWN_IDS).to_pylist()
    reused = int(stats.extra.get("text_counts_reused", 0))
    report = {"from": str(earlier), "records_in_lengths": pc.count_distinct(old_ids, mode="only_valid").as_py(),
              "text_counts_reused": reused, "counted": int(stats.extra.get("text_counts_made", 0)), "ignored": len(ignored),
              "ignored_ids": shown}
    where = f"--lengths {earlier}" if explicit else f"token counts of an earlier run ({earlier})"
    more = f" (e.g. {', '.join(shown)})" if shown else ""
    note(f"{where}: reused the text counts of {reused:,} records, counted {report['counted']:,} new or changed "
         f"records (every image goes through the image gate again), ignored {len(ignored):,} of its records that are not "
         f"in the input{more}")
    return report
