"""``curate tag``: image embeddings × concept embeddings → top-K concepts per record (FAISS).

Inputs:

* an embeddings folder in curate's layout (``NAME.npy`` + ``NAME.ids.parquet``, as
  written by ``curate embed`` into ``OUT/embeddings/``; ``OUT`` itself is accepted), or
  in clip-retrieval's layout (``img_emb/img_emb_N.npy`` + ``metadata/metadata_N.parquet``;
  the id comes from ``--id-column``, by default the first of ``id``, ``key``,
  ``image_path``, ``url``);
* a concept matrix (``V×D``, from ``curate vocab embed``). Zero rows (entries the
  encoder could not read) are left out of the index, so they are never returned.

Search is exact inner product (FAISS ``IndexFlatIP``) unless ``index="ivf"``:
an ``IndexIVFFlat`` with ``nlist`` lists trained once (seeded) on the concepts,
searched with ``nprobe`` lists; its recall@K against exact search on a seeded
sample of the embeddings is printed and recorded. GPU FAISS is used when the
installed FAISS sees a GPU; it is never required.

Output: ``OUT/tags/<shard>.parquet`` per embeddings file (resumable), merged into
``OUT/tags.parquet`` with columns ``id``, ``source``, ``concepts`` (list<int32>,
indices of vocabulary lines, best first) and ``scores`` (list<float32>).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.balance.config import DEFAULT_NLIST, DEFAULT_NPROBE, DEFAULT_TOP_K, TagConfig  # noqa: F401 (re-exported)
from curate.core.errors import UserError
from curate.core.io import atomic_open, write_json, write_parquet
from curate.core.progress import console
from curate.core.shards import Shard, ShardContext, ShardTask
from curate.core.stats import StageStats, run_header
from curate.core.validate import configure
from curate.balance.vocab.embed import file_hash, load_concepts, sidecar_path

TAGS_DIR = "tags"
TAGS_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("concepts", pa.list_(pa.int32())),
                         ("scores", pa.list_(pa.float32()))])
ID_COLUMNS = ("id", "key", "image_path", "url")
SEARCH_BATCH = 8192


@dataclass(frozen=True)
class EmbeddingFile:
    """One row-aligned pair: a ``.npy`` matrix and its ids table."""

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


def read_ids(file: EmbeddingFile, id_column: str | None = None) -> tuple[list[str], list[str]]:
    """The ids and sources of an embeddings file's rows."""
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
    ids = [str(v) for v in table.column(id_column).to_pylist()]
    if "source" in names:
        sources = [s if isinstance(s, str) and s else "unknown" for s in table.column("source").to_pylist()]
    else:
        sources = [file.layout] * len(ids)
    return ids, sources


# ---------------------------------------------------------------------------
# Index
# ---------------------------------------------------------------------------

_LOADED_CONCEPTS: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray, int]] = {}


def concept_matrix(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray, int]:
    """Non-zero concept rows as float32, their vocabulary indices, and the total row count.

    The last matrix loaded is kept for this process (the driver and an in-process
    worker share it).
    """
    resolved = Path(path).resolve()
    st = resolved.stat() if resolved.is_file() else None
    key = (str(resolved), st.st_size, st.st_mtime_ns) if st else None
    if key is not None and key in _LOADED_CONCEPTS:
        return _LOADED_CONCEPTS[key]
    full = np.asarray(load_concepts(path), dtype=np.float32)
    if not np.isfinite(full).all():
        bad = int((~np.isfinite(full).all(axis=1)).sum())
        raise UserError(f"--concepts {path}: {bad:,} row(s) hold NaN or infinite values; embed the vocabulary "
                        "again (curate vocab embed) or with --precision fp32")
    nonzero = np.flatnonzero(full.any(axis=1))
    if nonzero.size == 0:
        raise UserError(f"--concepts {path}: every row is zero (no concept could be embedded); check --scripts")
    vectors = full if nonzero.size == len(full) else np.ascontiguousarray(full[nonzero])
    result = (vectors, nonzero.astype(np.int64), int(full.shape[0]))
    _LOADED_CONCEPTS.clear()
    if key is not None:
        _LOADED_CONCEPTS[key] = result
    return result


def _maybe_gpu(index: Any) -> Any:
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


def _exact_index(vectors: np.ndarray) -> Any:
    import faiss

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


# ---------------------------------------------------------------------------
# The shard task
# ---------------------------------------------------------------------------

class TagTask(ShardTask):
    """Tags the rows of one embeddings file with their top-K concepts."""

    stage = "tag"
    unit = "records"

    def __init__(self, concepts: str, *, top_k: int = DEFAULT_TOP_K, index: str = "flat",
                 index_file: str | None = None, nprobe: int = DEFAULT_NPROBE, id_column: str | None = None) -> None:
        self.concepts, self.top_k, self.index_kind = concepts, top_k, index
        self.index_file, self.nprobe, self.id_column = index_file, nprobe, id_column
        self._index: Any = None
        self._rows: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_index"] = None
        state["_rows"] = None
        return state

    def setup(self) -> None:
        """Load the concept matrix and build (or read) the index once per worker."""
        if self._index is not None:
            return
        import faiss

        vectors, rows, _ = concept_matrix(self.concepts)
        if self.index_kind == "ivf":
            assert self.index_file is not None
            index = faiss.read_index(self.index_file)
            index.nprobe = self.nprobe
        else:
            index = _exact_index(vectors)
        self._index, self._rows = _maybe_gpu(index), rows

    def shard_items(self, shard: Shard) -> int:
        """Rows of the shard's embeddings file."""
        return shard.size

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Search one embeddings file; write ``tags/<shard>.parquet``."""
        self.setup()
        assert self._rows is not None
        file = EmbeddingFile(*shard.meta)
        ids, sources = read_ids(file, self.id_column)
        stats = StageStats()
        for source, n in sorted(Counter(sources).items()):
            stats.seen(source, n)
        emb = np.load(file.npy, mmap_mode="r")
        if emb.shape[1] != self._index.d:
            raise UserError(f"{file.npy}: embeddings have {emb.shape[1]} dims but the concepts have "
                            f"{self._index.d}; embed images and concepts with the same model")
        k = min(self.top_k, len(self._rows))
        concept_lists: list[np.ndarray] = []
        score_lists: list[np.ndarray] = []
        with stats.timer("search"):
            for lo in range(0, len(emb), SEARCH_BATCH):
                scores, pos = search(self._index, np.asarray(emb[lo:lo + SEARCH_BATCH]), k)
                concept_lists.append(np.where(pos >= 0, self._rows[np.maximum(pos, 0)], -1))
                score_lists.append(scores)
                ctx.progress(len(pos))
        found = np.concatenate(concept_lists) if concept_lists else np.zeros((0, k), np.int64)
        scores = np.concatenate(score_lists) if score_lists else np.zeros((0, k), np.float32)
        table = _tags_table(ids, sources, found, scores)
        for source, n in sorted(Counter(sources).items()):
            stats.kept(source, n)  # a row whose list is empty stays; resample counts it as no_concept
        lengths = pc.list_value_length(table.column("concepts")).to_numpy(zero_copy_only=False)
        stats.extra["rows_without_concept"] = int((lengths == 0).sum())
        write_parquet(work / TAGS_DIR / f"{shard.id}.parquet", table)
        return stats


def _tags_table(ids: list[str], sources: list[str], found: np.ndarray, scores: np.ndarray) -> pa.Table:
    """Build the tags table; ``-1`` hits (fewer than K concepts reachable) are left out."""
    n, k = found.shape if found.ndim == 2 else (0, 0)
    valid = found >= 0
    lengths = valid.sum(axis=1)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    concepts = pa.ListArray.from_arrays(pa.array(offsets), pa.array(found[valid].astype(np.int32)))
    score_col = pa.ListArray.from_arrays(pa.array(offsets), pa.array(scores[valid].astype(np.float32)))
    return pa.table([pa.array(ids, pa.string()), pa.array(sources, pa.string()), concepts, score_col],
                    schema=TAGS_SCHEMA)


def merge_tags(out: Path, n_shards: int, metadata: dict[str, str]) -> int:
    """Concatenate ``tags/<shard>.parquet`` in shard order into ``OUT/tags.parquet``; return rows."""
    schema = TAGS_SCHEMA.with_metadata({k.encode(): v.encode() for k, v in metadata.items()})
    rows = 0
    with atomic_open(out / "tags.parquet", "wb") as fh, \
            pq.ParquetWriter(fh, schema, compression="zstd", write_statistics=True) as writer:
        for i in range(n_shards):
            table = pq.read_table(out / TAGS_DIR / f"{i:06d}.parquet").replace_schema_metadata(schema.metadata)
            writer.write_table(table.cast(schema))
            rows += table.num_rows
    return rows


def tags_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The key/value metadata ``curate tag`` stores in ``tags.parquet`` (concept counts, K...)."""
    meta = pq.read_schema(path).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if not k.startswith(b"ARROW")}


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def _ivf_file(out: Path, concepts_sha: str, nlist: int, seed: int, vectors: np.ndarray) -> Path:
    """Train the IVF index once per (concepts, nlist, seed) and keep it in ``OUT/_tag/``."""
    import faiss

    path = out / "_tag" / f"ivf-{concepts_sha[:16]}-{nlist}-{seed}.faiss"
    if not path.is_file():
        index = train_ivf(vectors, nlist, seed)
        with atomic_open(path, "wb") as fh:
            fh.write(faiss.serialize_index(index).tobytes())
    return path


def _sample_rows(files: list[EmbeddingFile], n: int, seed: int) -> np.ndarray:
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


def measure_recall(index_file: Path, vectors: np.ndarray, queries: np.ndarray, k: int, nprobe: int) -> dict[str, Any]:
    """Recall@K and search times of the IVF index against exact search on ``queries``."""
    import faiss

    ivf = faiss.read_index(str(index_file))
    ivf.nprobe = nprobe
    exact = _exact_index(vectors)
    t0 = time.perf_counter()
    _, e = search(exact, queries, k)
    t_exact = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, a = search(ivf, queries, k)
    t_ivf = time.perf_counter() - t0
    return {"recall_at_k": round(recall_at_k(a, e), 6), "queries": int(len(queries)),
            "exact_seconds": round(t_exact, 4), "ivf_seconds": round(t_ivf, 4),
            "speedup": round(t_exact / t_ivf, 2) if t_ivf > 0 else None}


def tag(embeddings: str | os.PathLike[str], concepts: str | os.PathLike[str], config: TagConfig | None = None, *,
        executor: Any = None, write_stats: bool = True, quiet: bool = False, **settings: Any) -> dict[str, Any]:
    """Tag every embedding with its top-K concepts into ``OUT/tags.parquet``; see :func:`run_tag`."""
    return run_tag(embeddings, concepts, config, executor=executor, write_stats=write_stats, quiet=quiet,
                   **settings)[0]


def run_tag(embeddings: str | os.PathLike[str], concepts: str | os.PathLike[str], config: TagConfig | None = None, *,
            executor: Any = None, write_stats: bool = True, quiet: bool = False,
            **settings: Any) -> tuple[dict[str, Any], StageStats]:
    """Tag every embedding with its top-K concepts into ``OUT/tags.parquet``; resumable.

    Args:
        embeddings: embeddings folder (curate or clip-retrieval layout).
        concepts: ``V×D`` concept matrix (``.npy``).
        config: the settings (see :class:`TagConfig`): ``out``, ``top_k``, ``index`` (``flat`` or
            ``ivf``), ``nlist`` (None: :func:`auto_nlist` of the usable concepts), ``nprobe``,
            ``recall_sample`` (embeddings sampled to measure IVF recall@K against exact search),
            ``id_column`` (of clip-retrieval metadata) and ``seed`` (IVF training, recall sample).
        executor: a :class:`curate.executors.Executor` (default: local, one worker).
        write_stats: write ``OUT/stats.json``.
        quiet: do not print the recall line.
        **settings: fields of :class:`TagConfig`, instead of or over ``config``.

    Returns:
        The ``stats.json`` content and the merged stats (with the rejects).
    """
    from curate.executors import run_stage

    config = configure(TagConfig, config, **settings)
    out, top_k, index, nlist, nprobe = Path(config.out), config.top_k, config.index, config.nlist, config.nprobe
    recall_sample, id_column, seed = config.recall_sample, config.id_column, config.seed
    out.mkdir(parents=True, exist_ok=True)
    files = find_embeddings(embeddings)
    concepts = Path(concepts)
    vectors, valid_rows, total_rows = concept_matrix(concepts)
    dims = {int(np.load(f.npy, mmap_mode="r").shape[1]) for f in files}
    if dims != {vectors.shape[1]}:
        raise UserError(f"embeddings have {sorted(dims)} dims but {concepts} has {vectors.shape[1]}; "
                        "embed images and concepts with the same --model")
    concepts_sha = file_hash(concepts)
    t0 = time.perf_counter()
    index_file = None
    recall = None
    if index == "ivf":
        nlist = nlist or auto_nlist(len(vectors))
        index_file = _ivf_file(out, concepts_sha, nlist, seed, vectors)
        queries = _sample_rows(files, recall_sample, seed)
        recall = measure_recall(index_file, vectors, queries, min(top_k, len(vectors)), nprobe)
        if not quiet:
            console.print(f"IVF nlist {nlist} nprobe {nprobe}: recall@{top_k} {recall['recall_at_k']:.4f} against "
                          f"exact search on {recall['queries']:,} sampled embeddings "
                          f"(search {recall['speedup']}× faster)")
    shards = [Shard(i, meta=(f.npy, f.ids, f.layout, f.rows), size=f.rows) for i, f in enumerate(files)]
    task = TagTask(str(concepts), top_k=top_k, index=index, index_file=str(index_file) if index_file else None,
                   nprobe=nprobe, id_column=id_column)
    settings = {"concepts": concepts_sha[:16], "top_k": top_k, "index": index,
                **({"nlist": nlist, "nprobe": nprobe} if index == "ivf" else {}), "id_column": id_column,
                "embeddings": [(f.npy, f.rows) for f in files]}
    stats = run_stage(task, shards, out, executor=executor, seed=seed, desc="tag", settings=settings)
    meta = {"concept_rows": str(total_rows), "concepts_embedded": str(len(valid_rows)), "top_k": str(top_k),
            "concepts_sha256": concepts_sha}
    side = sidecar_path(concepts)
    if side.is_file():
        info = json.loads(side.read_text(encoding="utf-8"))
        keep = ("model", "vocab_sha256", "template", "scripts", "embedded", "skipped")
        meta["concepts_meta"] = json.dumps({k: info.get(k) for k in keep}, sort_keys=True, ensure_ascii=False)
    rows = merge_tags(out, len(shards), meta)
    counts = stats.to_dict()
    result = {
        **run_header("tag", seed=seed, settings={k: v for k, v in settings.items() if k != "embeddings"}),
        "records_in": counts["records_in"], "records_tagged": counts["records_out"], "rows": rows,
        "dropped": counts["dropped"], "errored": counts["errored"], "per_source": counts["per_source"],
        "concept_rows": total_rows, "concepts_embedded": int(len(valid_rows)),
        "layout": files[0].layout, "embedding_files": len(files),
        **({"ivf": recall} if recall else {}),
        "timings": {**counts["timings"], "wall": round(time.perf_counter() - t0, 3)},
        "outputs": {"tags": "tags.parquet"},
    }
    if write_stats:
        write_json(out / "stats.json", result)
    return result, stats
