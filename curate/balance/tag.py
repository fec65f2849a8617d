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
sample of the embeddings is printed and recorded. The input layouts live in
:mod:`curate.core.embeddings`, the FAISS side in :mod:`curate.balance.index`;
this module is the stage (shard task and driver).

Output: ``OUT/tags/<shard>.parquet`` per embeddings file (resumable), merged into
``OUT/tags.parquet`` with columns ``id``, ``source``, ``concepts`` (list<int32>,
indices of vocabulary lines, best first) and ``scores`` (list<float32>).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curate.balance.concepts import sidecar_path
from curate.balance.config import TagConfig, wall_timings
from curate.balance.index import (SEARCH_BATCH, auto_nlist, concept_matrix, exact_index, ivf_file, maybe_gpu,
                                  measure_recall, search)
from curate.core.embeddings import EmbeddingFile, find_embeddings, read_ids, sample_rows
from curate.core.columns import counts_by_source, source_names
from curate.core.errors import UserError
from curate.core.io import Location, atomic_open, file_sha256, is_url, write_parquet
from curate.core.remote import local_file, reading, writing
from curate.core.progress import console
from curate.core.shards import Shard, ShardContext, ShardTask
from curate.core.stats import StageStats, finish_stage, stage_result
from curate.core.validate import configure

TAGS_DIR = "tags"
TAGS_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("concepts", pa.list_(pa.int32())),
                         ("scores", pa.list_(pa.float32()))])


# ---------------------------------------------------------------------------
# The shard task
# ---------------------------------------------------------------------------

def _in_out(path: str | None) -> bool:
    """Whether a path a task holds is relative: a file of the run's OUT."""
    return path is not None and not is_url(path) and not os.path.isabs(path)


def readable(path: str, ctx: ShardContext | None) -> Path:
    """A file a tag shard reads, on this node: a file of OUT (relative; fetched from a bucket when missing),
    an object in a bucket (a cached copy) or a local path."""
    if _in_out(path):
        assert ctx is not None, f"{path}: a file of OUT needs the shard's context"
        return ctx.local(path)
    local = local_file(path)
    assert local is not None
    return local


def portable(path: str | os.PathLike[str], out: Path, copied: tuple[Path, str] | None = None) -> str:
    """How a task names a file so that any node finds it: relative to OUT for a file of OUT, the URL of an
    input copied from a bucket (``copied``: its local folder and URL), else the path."""
    p = Path(path)
    for base, name in ((out, ""), *((copied,) if copied else ())):
        try:
            rel = p.resolve().relative_to(Path(base).resolve()).as_posix()
        except ValueError:
            continue
        return f"{name}/{rel}" if name else rel
    return str(path) if is_url(path) or p.is_absolute() else str(p.resolve())  # relative: from here, not OUT


class TagTask(ShardTask):
    """Tags the rows of one embeddings file with their top-K concepts."""

    stage = "tag"
    unit = "records"
    transient = ("_index", "_rows")

    def __init__(self, config: TagConfig, concepts: str, *, index_file: str | None = None) -> None:
        """Tag with ``config``'s K, index kind, ``nprobe`` and id column; what the driver made at run time:
        ``concepts``, the concept matrix as every node finds it (:func:`portable`), and with ``--index ivf``
        ``index_file``, the trained index."""
        self.config, self.concepts, self.index_file = config, concepts, index_file
        self.reads_out = tuple(p for p in (concepts, index_file) if _in_out(p))  # written by the driver
        self._index: Any = None
        self._rows: np.ndarray | None = None

    def setup(self) -> None:
        """Load the concept matrix and build (or read) the index once per worker (files of OUT: with the first
        shard, from that node's OUT)."""
        if not any(_in_out(p) for p in (self.concepts, self.index_file)):
            self._load(None)

    def _load(self, ctx: ShardContext | None) -> None:
        if self._index is not None:
            return
        import faiss

        vectors, rows, _ = concept_matrix(readable(self.concepts, ctx))
        if self.config.index == "ivf":
            assert self.index_file is not None
            index = faiss.read_index(str(readable(self.index_file, ctx)))
            index.nprobe = self.config.nprobe
        else:
            index = exact_index(vectors)
        self._index, self._rows = maybe_gpu(index), rows

    def shard_items(self, shard: Shard) -> int:
        """Rows of the shard's embeddings file."""
        return shard.size

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Search one embeddings file; write ``tags/<shard>.parquet``."""
        self._load(ctx)
        assert self._rows is not None
        given: EmbeddingFile = shard.meta
        file = given._replace(npy=str(readable(given.npy, ctx)), ids=str(readable(given.ids, ctx)))
        ids, codes, names = read_ids(file, self.config.id_column)
        stats = StageStats()
        per_source = counts_by_source(codes, names)
        stats.seen_many(per_source)
        emb = np.load(file.npy, mmap_mode="r")
        if emb.shape[1] != self._index.d:
            raise UserError(f"{given.npy}: embeddings have {emb.shape[1]} dims but the concepts have "
                            f"{self._index.d}; embed images and concepts with the same model")
        k = min(self.config.top_k, len(self._rows))
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
        valid = found >= 0  # -1 hits (fewer than K concepts reachable) are left out
        lengths = valid.sum(axis=1)
        table = tags_table(ids, source_names(codes, names), lengths, found[valid], scores[valid])
        stats.kept_many(per_source)  # a row whose list is empty stays; resample counts it as no_concept
        stats.extra["rows_without_concept"] = int((lengths == 0).sum())
        write_parquet(work / TAGS_DIR / f"{shard.id}.parquet", table)
        return stats


def tags_table(ids: pa.Array | Sequence[str], sources: pa.Array | Sequence[str], lengths: np.ndarray,
               concepts: np.ndarray, scores: np.ndarray) -> pa.Table:
    """The ``tags.parquet`` rows of one shard, built from columns (the one builder of ``tag`` and ``match``).

    Args:
        ids: record ids.
        sources: record sources.
        lengths: tags per record; record ``i`` has the next ``lengths[i]`` of ``concepts``.
        concepts: every record's concept indices, flat, best first.
        scores: their scores (similarities, or match counts), flat.
    """
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    offsets_array = pa.array(offsets)
    return pa.table([pa.array(ids, pa.string()) if not isinstance(ids, pa.Array) else ids.cast(pa.string()),
                     pa.array(sources, pa.string()) if not isinstance(sources, pa.Array) else sources.cast(pa.string()),
                     pa.ListArray.from_arrays(offsets_array, pa.array(np.asarray(concepts, np.int32))),
                     pa.ListArray.from_arrays(offsets_array, pa.array(np.asarray(scores, np.float32)))],
                    schema=TAGS_SCHEMA)


def merge_tags(out: Path, n_shards: int, metadata: dict[str, str], *, schema: pa.Schema = TAGS_SCHEMA) -> int:
    """Concatenate ``tags/<shard>.parquet`` in shard order into ``OUT/tags.parquet``; return rows.

    ``schema``: the columns (``curate match`` may add ``text`` and ``lang``)."""
    schema = schema.with_metadata({k.encode(): v.encode() for k, v in metadata.items()})
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

def tag(embeddings: str | os.PathLike[str], concepts: str | os.PathLike[str], config: TagConfig | None = None, *,
        executor: Any = None, **settings: Any) -> dict[str, Any]:
    """Tag every embedding with its top-K concepts into ``OUT/tags.parquet``; resumable.

    Args:
        embeddings: embeddings folder (curate or clip-retrieval layout).
        concepts: ``V×D`` concept matrix (``.npy``).
        config: the settings (see :class:`TagConfig`): ``out``, ``top_k``, ``index`` (``flat`` or
            ``ivf``), ``nlist`` (None: :func:`auto_nlist` of the usable concepts), ``nprobe``,
            ``recall_sample`` (embeddings sampled to measure IVF recall@K against exact search),
            ``id_column`` (of clip-retrieval metadata) and ``seed`` (IVF training, recall sample).
        executor: a :class:`curate.executors.Executor` (default: local, one worker).
        **settings: fields of :class:`TagConfig`, instead of or over ``config``.

    Returns:
        The ``stats.json`` content (also written).
    """
    config = configure(TagConfig, config, **settings)
    with writing(config.out) as out:
        result, _ = tag_step(embeddings, concepts, config, out, executor=executor)
        return finish_stage(out, result)


def tag_step(embeddings: str | os.PathLike[str], concepts: str | os.PathLike[str], config: TagConfig, out: Path, *,
             executor: Any = None) -> tuple[dict[str, Any], StageStats]:
    """The work of :func:`tag` into the local folder ``out``, for a pipeline that writes its own ``stats.json``
    (``curate balance``): the step's ``stats.json`` content and its stats."""
    given = Location(concepts)
    beside = (given.name, sidecar_path(Path(given.name)).name)
    with reading(given.parent, include=beside) as folder:
        return _tag(Location(embeddings), folder / given.name, given, config, out, executor)


def _ivf(files: list[EmbeddingFile], vectors: np.ndarray, concepts_sha: str, config: TagConfig,
         out: Path) -> tuple[Path | None, int | None, dict[str, Any] | None]:
    """With ``--index ivf``: the trained index's file, its lists and its recall against exact search (printed)."""
    if config.index != "ivf":
        return None, config.nlist, None
    top_k, nprobe = config.top_k, config.nprobe
    nlist = config.nlist or auto_nlist(len(vectors))
    index_file = ivf_file(out, concepts_sha, nlist, config.seed, vectors)
    queries = sample_rows(files, config.recall_sample, config.seed)
    recall = measure_recall(index_file, vectors, queries, min(top_k, len(vectors)), nprobe)
    console.print(f"IVF nlist {nlist} nprobe {nprobe}: recall@{top_k} {recall['recall_at_k']:.4f} against "
                  f"exact search on {recall['queries']:,} sampled embeddings (search {recall['speedup']}× faster)")
    return index_file, nlist, recall


def _tag(embeddings: Location, concepts: Path, given: Location, config: TagConfig, out: Path,
         executor: Any) -> tuple[dict[str, Any], StageStats]:
    """:func:`tag_step`, the concept matrix (``given``) read from ``concepts``."""
    from curate.executors import run_stage

    top_k, index = config.top_k, config.index
    out.mkdir(parents=True, exist_ok=True)
    here = local_file(embeddings, "--embeddings")  # a folder in a bucket: copied into the cache
    assert here is not None
    copied = (here, embeddings.url) if embeddings.is_remote else None
    files = find_embeddings(here)
    with ThreadPoolExecutor(max_workers=1) as hasher:  # the hash reads the file while the matrix is converted
        hashed = hasher.submit(file_sha256, concepts)
        vectors, valid_rows, total_rows = concept_matrix(concepts)
        concepts_sha = hashed.result()
    dims = {int(np.load(f.npy, mmap_mode="r").shape[1]) for f in files}
    if dims != {vectors.shape[1]}:
        raise UserError(f"embeddings have {sorted(dims)} dims but {given} has {vectors.shape[1]}; "
                        "embed images and concepts with the same --model")
    t0 = time.perf_counter()
    index_file, nlist, recall = _ivf(files, vectors, concepts_sha, config, out)
    # any node finds the files: relative to OUT, or an input's URL (curate.core.remote)
    shards = [Shard(i, meta=f._replace(npy=portable(f.npy, out, copied), ids=portable(f.ids, out, copied)), size=f.rows)
              for i, f in enumerate(files)]
    task = TagTask(config, portable(concepts, out, (concepts.parent, given.parent.url) if given.is_remote else None),
                   index_file=portable(index_file, out) if index_file else None)
    settings = {"concepts": concepts_sha[:16], "top_k": top_k, "index": index,
                **({"nlist": nlist, "nprobe": config.nprobe} if index == "ivf" else {}), "id_column": config.id_column,
                "embeddings": [(s.meta.npy, s.meta.rows) for s in shards]}
    stats = run_stage(task, shards, out, executor=executor, seed=config.seed, desc="tag", settings=settings)
    rows = merge_tags(out, len(shards), _tags_meta(concepts, concepts_sha, total_rows, len(valid_rows), top_k))
    result = stage_result("tag", stats, seed=config.seed, out_key="records_tagged",
                          settings={k: v for k, v in settings.items() if k != "embeddings"},
                          rows=rows, concept_rows=total_rows, concepts_embedded=int(len(valid_rows)),
                          layout=files[0].layout, embedding_files=len(files), **({"ivf": recall} if recall else {}),
                          timings=wall_timings(stats, t0), outputs={"tags": "tags.parquet"})
    return result, stats


def _tags_meta(concepts: Path, concepts_sha: str, total_rows: int, valid_rows: int, top_k: int) -> dict[str, str]:
    """``tags.parquet``'s metadata: the concept counts, K, the matrix's hash and what its sidecar says."""
    meta = {"concept_rows": str(total_rows), "concepts_embedded": str(valid_rows), "top_k": str(top_k),
            "concepts_sha256": concepts_sha}
    side = sidecar_path(concepts)
    if side.is_file():
        info = json.loads(side.read_text(encoding="utf-8"))
        keep = ("model", "vocab_sha256", "template", "scripts", "embedded", "skipped")
        meta["concepts_meta"] = json.dumps({k: info.get(k) for k in keep}, sort_keys=True, ensure_ascii=False)
    return meta
