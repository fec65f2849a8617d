"""Files beside the pages: thumbnails (JPEG, at most 256 px), copied plots, and a bounded record lookup."""

from __future__ import annotations

import hashlib
import shlex
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.images import ImageError, decode
from curate.core.records import BadRecord, expand_inputs, read_part, split_file

THUMB_PX = 256


class Assets:
    """Writes thumbnails and plots under ``REPORT/assets/`` and returns their page-relative paths."""

    def __init__(self, report: Path) -> None:
        self.root = report / "assets"
        self.root.mkdir(parents=True, exist_ok=True)
        self.thumbs = 0
        self.failed = 0

    def thumb(self, image: Any) -> str | None:
        """A ≤256 px JPEG thumbnail of an image (path or bytes); None when it cannot be decoded."""
        if image is None:
            return None
        data = image if isinstance(image, bytes) else str(image).encode("utf-8")
        name = f"t-{hashlib.sha1(data).hexdigest()[:16]}.jpg"
        path = self.root / name
        if not path.exists():
            try:
                img = decode(image if isinstance(image, bytes) else str(image))
            except ImageError:
                self.failed += 1
                return None
            img.thumbnail((THUMB_PX, THUMB_PX))
            tmp = path.with_suffix(".tmp")
            img.save(tmp, "JPEG", quality=80, optimize=True)
            tmp.replace(path)
            self.thumbs += 1
        return f"assets/{name}"

    def copy(self, src: Path, prefix: str) -> str | None:
        """Copy a plot next to the pages; None when it does not exist."""
        if not src.exists():
            return None
        name = f"{prefix}-{src.name}"
        shutil.copyfile(src, self.root / name)
        return f"assets/{name}"


def sample_indices(n: int, k: int, seed: int, salt: int = 0) -> list[int]:
    """``k`` of ``range(n)`` drawn with ``seed`` (sorted); all of them when ``n <= k``."""
    if n <= k:
        return list(range(n))
    rng = np.random.default_rng([seed, salt])
    return sorted(int(i) for i in rng.choice(n, size=k, replace=False))


#: Tables up to this many rows are read whole; larger ones through a seeded choice of row groups.
FULL_READ_ROWS = 1_000_000


def read_sampled(path: Path, columns: list[str] | None, seed: int, *,
                 max_rows: int | None = None) -> tuple[pa.Table, int, bool]:
    """A Parquet table, or for a large one a seeded choice of whole row groups holding about ``max_rows`` rows.

    Returns:
        (table, rows in the file, whether the table is a sample of row groups).
    """
    pf = pq.ParquetFile(path)
    total = pf.metadata.num_rows
    max_rows = max_rows or FULL_READ_ROWS
    if total <= max_rows or pf.num_row_groups <= 1:
        return pf.read(columns=columns), total, False
    return pf.read_row_groups(chosen_groups(pf, seed, max_rows), columns=columns), total, True


def chosen_groups(pf: pq.ParquetFile, seed: int, max_rows: int | None = None) -> list[int]:
    """The row groups :func:`read_sampled` reads from a large file (seeded, sorted)."""
    max_rows = max_rows or FULL_READ_ROWS
    sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)]
    order = np.random.default_rng([seed, 7]).permutation(len(sizes))
    chosen, rows = [], 0
    for g in order:
        chosen.append(int(g))
        rows += sizes[g]
        if rows >= max_rows:
            break
    return sorted(chosen)


def lookup_records(inputs: Sequence[str], ids: Iterable[str] | None = None, *,
                   max_rows: int = 200_000) -> dict[str, dict[str, Any]]:
    """Canonical records of the inputs by id: those in ``ids`` (or all), reading at most ``max_rows`` rows.

    The bound keeps a report on a large run fast: records beyond it are shown without
    their image or text.
    """
    wanted = None if ids is None else set(ids)
    found: dict[str, dict[str, Any]] = {}
    rows = 0
    try:
        paths = expand_inputs(list(inputs))
    except Exception:  # noqa: BLE001 - inputs moved or removed since the run: show what the outputs hold
        return found
    for path in paths:
        try:
            parts = split_file(path, 1 << 62)
        except Exception:  # noqa: BLE001
            continue
        for part in parts:
            for rec in read_part(part):
                rows += 1
                if not isinstance(rec, BadRecord) and (wanted is None or rec["id"] in wanted):
                    found.setdefault(rec["id"], rec)
                if rows >= max_rows or (wanted is not None and len(found) >= len(wanted)):
                    return found
    return found


def inputs_of(stats: dict[str, Any], verb: str) -> list[str]:
    """The record inputs of a stage: ``inputs`` in its ``stats.json``, else the positional arguments after the verb
    on its command line."""
    if isinstance(stats.get("inputs"), list):
        return [str(p) for p in stats["inputs"]]
    try:
        argv = shlex.split(stats.get("command", ""))
    except ValueError:
        return []
    if verb not in argv:
        return []
    out, skip = [], False
    for arg in argv[argv.index(verb) + 1:]:
        if skip:
            skip = False
        elif arg.startswith("--"):
            skip = "=" not in arg
        else:
            out.append(arg)
    return out
