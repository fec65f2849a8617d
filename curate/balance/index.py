"""The FAISS side of ``curate tag``: the concept matrix, exact and IVF indexes, search, recall.

Search is exact inner product (``IndexFlatIP``) unless IVF is asked for: an
``IndexIVFFlat`` trained once (seeded k-means) on the concepts and kept in
``OUT/_tag/``, searched with ``nprobe`` lists. Zero concept rows (entries the
encoder could not read) are left out of every index, so they are never returned.
GPU FAISS is used when the installed FAISS sees a GPU; it is never required.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from curate.balance.concepts import load_concepts
from curate.core.errors import UserError
from curate.core.io import atomic_open

SEARCH_BATCH = 8192


_LOADED_CONCEPTS: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray, int]] = {}


def concept_matrix(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """Non-zero concept rows as float32, their vocabulary indices, and the total row count.

    The rows are converted straight into the storage of an exact index (``IndexFlatIP``):
    :func:`exact_index` of the returned array is that index, with no second copy of the
    matrix (2 GB at 500K × 512 otherwise, and a second of copying and first touches). The
    last matrix loaded is kept for this process (the driver and an in-process worker share it).
    """
    resolved = Path(path).resolve()
    st = resolved.stat() if resolved.is_file() else None
    key = (str(resolved), st.st_size, st.st_mtime_ns) if st else None
    if key is not None and key in _LOADED_CONCEPTS:
        return _LOADED_CONCEPTS[key]
    matrix = load_concepts(path)
    _LOADED_CONCEPTS.clear()  # the previous matrix is freed before this one is read
    index = _flat_index(matrix.shape[1], len(matrix))
    full, bad, used = _load_checked(matrix, out=_index_vectors(index))
    if bad:
        raise UserError(f"--concepts {path}: {bad:,} row(s) hold NaN or infinite values; embed the vocabulary "
                        "again (curate vocab embed) or with --precision fp32")
    nonzero = np.flatnonzero(used)
    if nonzero.size == 0:
        raise UserError(f"--concepts {path}: every row is zero (no concept could be embedded); check --scripts")
    vectors = full
    if nonzero.size < len(full):  # the few zero rows are left out: the others move up, in place
        _compact(full, nonzero)
        del full
        index.codes.resize(nonzero.size * index.code_size)  # smaller: the storage stays where it is
        index.ntotal = int(nonzero.size)
        vectors = _index_vectors(index)
    result = (vectors, nonzero.astype(np.int64), int(len(matrix)))
    if key is not None:
        _LOADED_CONCEPTS[key] = result
    return result


class _IndexVectors:
    """The vectors stored in an ``IndexFlat``, offered to numpy: an array made from it keeps the index alive."""

    def __init__(self, index: Any) -> None:
        self.index = index
        self.__array_interface__ = {"shape": (int(index.ntotal), int(index.d)), "typestr": "<f4",
                                    "data": (int(index.get_xb()), False), "version": 3}


def _flat_index(dim: int, rows: int) -> Any:
    """An ``IndexFlatIP`` of ``rows`` zero vectors, to be written through :func:`_index_vectors`."""
    import faiss

    index = faiss.IndexFlatIP(dim)
    index.codes.resize(rows * index.code_size)
    index.ntotal = rows
    return index


def _index_vectors(index: Any) -> np.ndarray:
    """The vectors of a flat index as a writable float32 array over its storage (no copy)."""
    return np.asarray(_IndexVectors(index))


def _compact(full: np.ndarray, keep: np.ndarray, rows: int = 8192) -> None:
    """Move the rows ``keep`` (increasing) to the top of ``full``, in order, in place.

    Block by block: a block's rows are gathered before they are written, and rows of later
    blocks lie below what is written (``keep[i] >= i``).
    """
    for lo in range(0, len(keep), rows):
        part = keep[lo:lo + rows]
        full[lo:lo + len(part)] = full[part]


def _load_checked(matrix: np.ndarray, rows: int = 8192,
                  out: np.ndarray | None = None) -> tuple[np.ndarray, int, np.ndarray]:
    """The matrix as float32 (written into ``out`` when given), the number of rows holding NaN or infinity,
    and which rows are not all zero.

    One pass, ``rows`` at a time: each block is converted into the result and checked while it is in the
    CPU cache (checking the whole matrix at once made a temporary of one byte per value: 256 MB at 500K × 512).
    A C-ordered memory map of a ``.npy`` is read from its file with plain reads into one block buffer:
    faulting its pages in one by one cost more than the conversion (≈1.6 s for 512 MB here).
    """
    full = np.empty(matrix.shape, np.float32) if out is None else out
    used = np.zeros(len(matrix), bool)
    bad = 0
    mapped = isinstance(matrix, np.memmap) and matrix.filename is not None and matrix.flags.c_contiguous
    buffer = np.empty((rows, *matrix.shape[1:]), matrix.dtype) if mapped else None
    with open(matrix.filename, "rb") if mapped else contextlib.nullcontext() as fh:
        if fh is not None:
            fh.seek(matrix.offset)
        for lo in range(0, len(matrix), rows):
            block = full[lo:lo + rows]
            if fh is None:
                block[...] = matrix[lo:lo + rows]
            else:
                view = memoryview(buffer[:len(block)]).cast("B")
                if fh.readinto(view) != view.nbytes:
                    raise UserError(f"--concepts {matrix.filename}: shorter than its header says")
                block[...] = buffer[:len(block)]
            finite = np.isfinite(block)
            if not finite.all():
                bad += int((~finite.all(axis=1)).sum())
            used[lo:lo + rows] = block.any(axis=1)
    return full, bad, used


def maybe_gpu(index: Any) -> Any:
    """The index on all GPUs when FAISS sees one, else unchanged."""
    import faiss

    try:
        if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:
            return faiss.index_cpu_to_all_gpus(index)
    except Exception:  # noqa: BLE001 - GPU FAISS is optional; the CPU index works
        pass
    return index


def auto_nlist(n: int) -> int:
    """Default IVF lists for ``n`` concepts: 4·√n rounded to a power of two, with ≥ 39 concepts per list.

    500,000 concepts → 2,048 lists (on clustered 512-d vectors, 4,096 lists searched
    with nprobe 8 are about 18× faster than exact search at recall@10 0.9999;
    1,024 lists only about 2.5×: larger lists are scanned without BLAS).
    """
    import math

    target = 2 ** round(math.log2(max(4 * math.sqrt(max(n, 1)), 1)))
    return int(max(1, min(target, n // 39 if n >= 39 else 1)))


def train_ivf(vectors: np.ndarray, nlist: int, seed: int) -> Any:
    """Train an inner-product ``IndexIVFFlat`` on the concepts (seeded k-means) and add them."""
    import faiss

    n, d = vectors.shape
    if nlist < 1:
        raise UserError(f"--nlist must be at least 1, got {nlist}")
    if n < nlist:
        raise UserError(f"--nlist {nlist} is more than the {n} usable concepts; use --nlist ≤ {n} (about √V to 4√V)")
    quantizer = faiss.IndexFlatIP(d)
    index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = int(seed) % (2 ** 31)
    index.train(vectors)
    index.add(vectors)
    return index


def exact_index(vectors: np.ndarray) -> Any:
    """An exact inner-product index (``IndexFlatIP``) holding ``vectors``: for the array of
    :func:`concept_matrix`, the index it was loaded into, else a new one (a copy)."""
    import faiss

    owner = vectors.base
    if (isinstance(owner, _IndexVectors) and vectors.shape == (owner.index.ntotal, owner.index.d)
            and vectors.ctypes.data == int(owner.index.get_xb())):
        return owner.index  # the matrix of concept_matrix: its index already holds it
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    return index


def search(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` search in batches; returns ``(scores, positions)`` with ``-1`` for missing hits."""
    scores = np.empty((len(queries), k), np.float32)
    pos = np.empty((len(queries), k), np.int64)
    for lo in range(0, len(queries), SEARCH_BATCH):
        q = np.ascontiguousarray(queries[lo:lo + SEARCH_BATCH], dtype=np.float32)
        scores[lo:lo + len(q)], pos[lo:lo + len(q)] = index.search(q, k)
    return scores, pos


def recall_at_k(approx: np.ndarray, exact: np.ndarray) -> float:
    """Mean share of each query's exact top-K found by the approximate search."""
    if len(exact) == 0:
        return 1.0
    hits = 0
    total = 0
    for a, e in zip(approx, exact):
        e = e[e >= 0]
        hits += len(np.intersect1d(a[a >= 0], e))
        total += len(e)
    return hits / total if total else 1.0


def ivf_file(out: Path, concepts_sha: str, nlist: int, seed: int, vectors: np.ndarray) -> Path:
    """Train the IVF index once per (concepts, nlist, seed) and keep it in ``OUT/_tag/``."""
    import faiss

    path = out / "_tag" / f"ivf-{concepts_sha[:16]}-{nlist}-{seed}.faiss"
    if not path.is_file():
        index = train_ivf(vectors, nlist, seed)
        with atomic_open(path, "wb") as fh:
            fh.write(faiss.serialize_index(index).tobytes())
    return path


def measure_recall(index_file: Path, vectors: np.ndarray, queries: np.ndarray, k: int, nprobe: int) -> dict[str, Any]:
    """Recall@K and search times of the IVF index against exact search on ``queries``."""
    import faiss

    ivf = faiss.read_index(str(index_file))
    ivf.nprobe = nprobe
    exact = exact_index(vectors)
    t0 = time.perf_counter()
    _, e = search(exact, queries, k)
    t_exact = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, a = search(ivf, queries, k)
    t_ivf = time.perf_counter() - t0
    return {"recall_at_k": round(recall_at_k(a, e), 6), "queries": int(len(queries)),
            "exact_seconds": round(t_exact, 4), "ivf_seconds": round(t_ivf, 4),
            "speedup": round(t_exact / t_ivf, 2) if t_ivf > 0 else None}
