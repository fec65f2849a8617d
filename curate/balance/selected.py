"""Selected records written back in the layout of their input files (``OUT/records/`` of ``curate resample``).

Each input file ``NAME`` gives ``OUT/records/NAME`` in the same format; a record
drawn ``k`` times is written ``k`` times, copies after the first with the id
``id#k``; relative image paths are rewritten for the new folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.io import atomic_open, write_parquet


def _rebase(value: Any, src_dir: str, dst_dir: str) -> Any:
    """Rewrite relative image paths (str, list of str, list of {"path": str}) for a new folder.

    A path under the new folder stays relative; any other becomes absolute.
    """
    def one(p: Any) -> Any:
        if isinstance(p, str) and p and "://" in src_dir[:32] and "://" not in p[:32] and not os.path.isabs(p):
            return src_dir.rstrip("/") + "/" + p  # an input in a bucket: its images are objects beside it
        if isinstance(p, str) and p and not os.path.isabs(p) and "://" not in p[:32]:
            absolute = os.path.normpath(os.path.join(os.path.abspath(src_dir), p))
            rel = os.path.relpath(absolute, dst_dir)
            return absolute if rel.startswith("..") else rel
        if isinstance(p, dict) and isinstance(p.get("path"), str) and not p.get("bytes"):
            return {**p, "path": one(p["path"])}  # a struct carrying bytes keeps its original file name
        return p
    if isinstance(value, list):
        return [one(v) for v in value]
    return one(value)


def copy_id(rid: str, k: int) -> str:
    """The id of the ``k``-th copy (1-based) of a record drawn several times: ``id``, ``id#2``, ``id#3``..."""
    return rid if k == 1 else f"{rid}#{k}"


def write_selected_records(inputs: Sequence[str | os.PathLike[str]], selection: pa.Table,
                           folder: Path) -> dict[str, Any]:
    """Write each selected record ``copies`` times, in its input file's format and layout.

    Each input file ``NAME`` gives ``folder/NAME`` (same format); relative image
    paths are rewritten relative to ``folder``; copies after the first get the id
    ``id#k`` so that ids stay unique. Returns counts per output file.
    """
    from curate.core.records import BadRecord, expand_inputs, input_format, read_part, split_file

    wanted = dict(zip(selection.column("id").to_pylist(), selection.column("copies").to_pylist()))
    remaining = dict(wanted)
    folder.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    files: dict[str, int] = {}
    for path in expand_inputs(inputs):
        fmt = input_format(path)
        suffix = ".parquet" if fmt == "tar" else path.suffix  # tars come back as Parquet with image structs
        name = path.stem + suffix
        k = 2
        while name in used:
            name = f"{path.stem}-{k}{suffix}"
            k += 1
        used.add(name)
        src_dir, dst_dir = str(path.parent), str(folder.resolve())
        rows_out: list[tuple[int, Any]] = []
        for part in split_file(path, 1 << 62):
            for raw, rec in read_part(part, with_raw=True):  # the one row reader: same ids as every stage
                if isinstance(rec, BadRecord):
                    continue
                rid = rec["id"]
                n = remaining.pop(rid, 0)
                for c in range(1, n + 1):
                    rows_out.append((c, (rid, raw)))
        files[name] = _write_rows(folder / name, fmt, rows_out, src_dir, dst_dir, path)
    return {"files": files, "records": sum(files.values()), "selected_not_found": len(remaining)}


def _rebased_row(raw: dict[str, Any], rid: str, copy: int, src_dir: str, dst_dir: str) -> dict[str, Any]:
    row = dict(raw)
    for key in ("images", "image"):
        if key in row and row[key] is not None:
            row[key] = _rebase(row[key], src_dir, dst_dir)
    if copy > 1:
        row["id"] = copy_id(rid, copy)
    return row


def _write_rows(dest: Path, fmt: str, rows: list[tuple[int, Any]], src_dir: str, dst_dir: str,
                source_path: Path) -> int:
    if fmt == "tar":  # tar members come back as Parquet rows with datasets image structs
        from curate.core.formats.writeback import records_table

        objs = [_rebased_row(raw, rid, c, src_dir, dst_dir) for c, (rid, raw) in rows]
        write_parquet(dest, records_table(objs))
        return len(objs)
    if fmt in ("jsonl", "json"):
        objs = [_rebased_row(raw, rid, c, src_dir, dst_dir) for c, (rid, raw) in rows]
        with atomic_open(dest, "w") as fh:
            if fmt == "jsonl":
                for obj in objs:
                    fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
            else:
                json.dump(objs, fh, ensure_ascii=False, indent=1)
                fh.write("\n")
        return len(objs)
    from curate.core.io import open_input

    with open_input(source_path) as fh:  # a local file or an object in a bucket
        schema = pq.read_schema(fh)
    objs = [_rebased_row(raw, rid, c, src_dir, dst_dir) for c, (rid, raw) in rows]
    if "id" not in schema.names and any(c > 1 for c, _ in rows):
        schema = schema.append(pa.field("id", pa.string()))
        for obj, (_, (rid, _)) in zip(objs, rows):
            obj.setdefault("id", rid)
    write_parquet(dest, pa.Table.from_pylist(objs, schema=schema))
    return len(objs)
