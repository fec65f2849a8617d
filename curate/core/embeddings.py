"""Embedding files in curate's or clip-retrieval's layout, as ``curate tag`` and ``curate dedup --embeddings`` read them.

* curate (``curate embed``): ``NAME.npy`` + ``NAME.ids.parquet`` pairs in a folder
  (``OUT/embeddings/``; ``OUT`` itself is accepted);
* clip-retrieval: ``img_emb/img_emb_N.npy`` + ``metadata/metadata_N.parquet``; the id
  comes from ``--id-column``, by default the first of :data:`ID_COLUMNS`.

A new layout is one more branch in :func:`find_embeddings` that returns
:class:`EmbeddingFile` rows, plus its id column in :func:`read_ids`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.columns import as_array, source_codes
from curate.core.errors import UserError

ID_COLUMNS = ("id", "key", "image_path", "url")


class EmbeddingFile(NamedTuple):
    """One row-aligned pair: a ``.npy`` matrix and its ids table (also a tag shard's ``meta``)."""

    npy: str
    ids: str
    layout: str  #: ``curate`` or ``clip-retrieval``
    rows: int


def _npy_rows(path: Path) -> tuple[int, int]:
    try:
        arr = np.load(path, mmap_mode="r")
    except (ValueError, OSError) as exc:
        raise UserError(f"{path}: not a readable .npy matrix ({exc})") from None
    if arr.ndim != 2:
        raise UserError(f"{path}: expected an N×D matrix, got shape {arr.shape}")
    return int(arr.shape[0]), int(arr.shape[1])


def _suffix_number(name: str) -> tuple[int, str]:
    m = re.search(r"(\d+)$", name)
    return (int(m.group(1)) if m else -1, name)


def find_embeddings(folder: str | os.PathLike[str]) -> list[EmbeddingFile]:
    """List the embedding files of a folder (curate or clip-retrieval layout), in order.

    Raises:
        UserError: no embeddings, a matrix without its ids file, or row counts that differ.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"--embeddings {folder}: no such folder")
    if (folder / "img_emb").is_dir():
        return _find_clip_retrieval(folder)
    if (folder / "embeddings").is_dir() and not list(folder.glob("*.ids.parquet")):
        folder = folder / "embeddings"
    files = []
    for npy in sorted(folder.glob("*.npy")):
        ids = npy.with_name(npy.name[:-4] + ".ids.parquet")
        if not ids.is_file():
            raise UserError(f"{npy}: no ids file {ids.name} beside it; an embeddings folder holds NAME.npy + "
                            "NAME.ids.parquet pairs (curate embed) or img_emb/ + metadata/ (clip-retrieval)")
        rows, _ = _npy_rows(npy)
        n_ids = pq.ParquetFile(ids).metadata.num_rows
        if n_ids != rows:
            raise UserError(f"{npy}: {rows} rows but {ids.name} has {n_ids} ids; the pair must be row-aligned")
        files.append(EmbeddingFile(str(npy), str(ids), "curate", rows))
    if not files:
        raise UserError(f"--embeddings {folder}: no NAME.npy + NAME.ids.parquet pairs, and no img_emb/ folder")
    return files


def _find_clip_retrieval(folder: Path) -> list[EmbeddingFile]:
    files = []
    for npy in sorted((folder / "img_emb").glob("*.npy"), key=lambda p: _suffix_number(p.stem)):
        number, _ = _suffix_number(npy.stem)
        candidates = [p for p in (folder / "metadata").glob("*.parquet") if _suffix_number(p.stem)[0] == number]
        if number < 0 or len(candidates) != 1:
            raise UserError(f"{npy}: no matching metadata/metadata_{number}.parquet (clip-retrieval layout)")
        rows, _ = _npy_rows(npy)
        n_meta = pq.ParquetFile(candidates[0]).metadata.num_rows
        if n_meta != rows:
            raise UserError(f"{npy}: {rows} rows but {candidates[0].name} has {n_meta}; they must be row-aligned")
        files.append(EmbeddingFile(str(npy), str(candidates[0]), "clip-retrieval", rows))
    if not files:
        raise UserError(f"--embeddings {folder}/img_emb: no .npy files")
    return files


def read_ids(file: EmbeddingFile, id_column: str | None = None) -> tuple[pa.Array, np.ndarray, list[str]]:
    """The ids of an embeddings file's rows (as strings) and their sources as ``(codes, names)``.

    Sources come from a ``source`` column (null or empty: ``unknown``), else the
    file's layout names them; see :func:`curate.core.columns.source_codes`.
    """
    schema = pq.read_schema(file.ids)
    names = schema.names
    if id_column is None:
        found = [c for c in ID_COLUMNS if c in names]
        if not found:
            raise UserError(f"{file.ids}: no id column (looked for {', '.join(ID_COLUMNS)}); pass --id-column NAME")
        id_column = found[0]
    elif id_column not in names:
        raise UserError(f"{file.ids}: no column {id_column!r} (columns: {', '.join(names)})")
    cols = [id_column] + (["source"] if "source" in names else [])
    table = pq.read_table(file.ids, columns=cols)
    ids = as_array(table.column(id_column)).cast(pa.string())
    if "source" not in names:
        return ids, np.zeros(len(ids), np.int32), [file.layout]
    sources = as_array(table.column("source")).cast(pa.string())
    sources = pc.if_else(pc.equal(sources, ""), pa.scalar(None, pa.string()), sources)  # empty: unknown
    codes, source_list = source_codes(sources, len(ids))
    return ids, codes, source_list


def sample_rows(files: list[EmbeddingFile], n: int, seed: int) -> np.ndarray:
    """``n`` embeddings drawn without replacement (seeded) from all files, in file order."""
    total = sum(f.rows for f in files)
    rng = np.random.default_rng([seed, 0x7A6])
    picks = np.sort(rng.choice(total, size=min(n, total), replace=False)) if total else np.zeros(0, np.int64)
    out, start = [], 0
    for f in files:
        local = picks[(picks >= start) & (picks < start + f.rows)] - start
        if local.size:
            out.append(np.asarray(np.load(f.npy, mmap_mode="r")[local], dtype=np.float32))
        start += f.rows
    return np.concatenate(out) if out else np.zeros((0, 1), np.float32)
