"""``curate dedup``: exact, near and semantic duplicates across sources, and overlap with benchmark images.

The stage runs in three steps into ``OUT`` (every one resumable):

1. **hash** (shards, any executor): every record's image hashes (:mod:`curate.dedup.task`), ``hashes/``; the
   references of ``--against`` likewise into ``against/hashes/``;
2. **search** (shards of queries, any executor): near-duplicate pairs by multi-index hashing over an index the
   driver writes to ``_index/near/`` (:mod:`curate.dedup.search`), ``near_pairs/``;
3. **decide** (the driver, the global view): benchmark overlap, exact, near and semantic duplicates, the keep
   rule (:mod:`curate.dedup.decide`, :mod:`curate.dedup.steps`); the kept records are written back in their
   input files' layout to ``records/`` (the one kept-record writer, per input file, as ``curate resample``
   writes its selection: :func:`curate.core.filters.write_kept`), which ``curate balance`` reads next.

Every removed record is a row of ``rejects.parquet`` with its reason (``benchmark_overlap``,
``exact_duplicate``, ``near_duplicate``, ``semantic_duplicate``), ``duplicate_of`` (the kept record's id, or the
reference's) and ``distance`` (0 for exact copies, bits for near ones, 1 − cosine for semantic ones); the columns
every stage's rejects have come first, so readers of other stages' rejects read these too. Records without an
image pass through (kept); an image the gate refuses errors its record with the gate's reason.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.columns import first_occurrences
from curate.core.filters import write_kept
from curate.core.io import out_lock, write_parquet
from curate.core.remote import local_file, writing
from curate.core.shards import Shard, plan_hash, plan_shards
from curate.core.stats import reject_schema, StageStats, finish_stage, stage_result
from curate.core.validate import configure
from curate.dedup.config import DedupConfig
from curate.dedup.decide import REASONS, Decision, Hashed
from curate.dedup.hashing import DIGEST_BYTES, EXACT_CANDIDATE_BITS
from curate.dedup.task import (AGAINST_DIR, HASH_SCHEMA, HASHES_DIR, INDEX_DIR, PAIRS_DIR, AgainstDigestTask,
                               AgainstTask, DigestTask, HashTask, Needed, QueryBlock, SearchTask)

RECORDS_DIR = "records"
#: ``rejects.parquet`` of ``curate dedup``: every stage's columns, then whom a removed record copies and how far.
DEDUP_REJECT_SCHEMA = pa.schema([*reject_schema(), ("duplicate_of", pa.string()), ("distance", pa.float64())])


def dedup(inputs: Sequence[str | os.PathLike[str]], config: DedupConfig | None = None, *, executor: Any = None,
          **settings: Any) -> dict[str, Any]:
    """Remove duplicate records (see the module docstring); returns the ``stats.json`` content.

    Args:
        inputs: record files or folders (any layout curate reads).
        config: the settings (:class:`~curate.dedup.config.DedupConfig`): ``out``, ``near`` and
            ``near_threshold``, ``embeddings`` and ``semantic_threshold``, ``prefer``, ``against`` and
            ``against_embeddings``, ``shard_size``, ``write_records``...
        executor: a :class:`curate.executors.Executor` for the hash and search shards (default: local, one worker).
        **settings: fields of :class:`DedupConfig`, instead of or over ``config``.
    """
    config = configure(DedupConfig, config, **settings)
    with writing(config.out) as out, out_lock(out):  # a bucket: shards stream there; the lock: the driver's steps too
        return _run(list(inputs), config, out, executor)


def _here(folder: Any, flag: str) -> str | None:
    """An embeddings folder to read here: itself, or a copy of a bucket's prefix (None stays None)."""
    local = local_file(folder, flag)
    return None if local is None else str(local)


def benchmark_name(path: str | os.PathLike[str]) -> str:
    """How ``stats.json`` names the benchmark of an ``--against`` path: its folder's name, or its file's stem."""
    name = os.fspath(path).rstrip("/").rsplit("/", 1)[-1]
    return name.split(".", 1)[0] if "." in name[1:] and not Path(path).is_dir() else name


def _hash_step(task: HashTask, inputs: Sequence[Any], config: DedupConfig, out: Path, executor: Any,
               image_root: Any, desc: str, *, per_input: bool = False) -> tuple[StageStats, Hashed, dict[str, Any]]:
    """Hash ``inputs`` as shards; with ``per_input`` (the references) each input is planned apart, and its rows'
    ``sources`` become its :func:`benchmark_name`."""
    from curate.executors import run_stage

    groups = [[p] for p in inputs] if per_input else [list(inputs)]
    shards: list[Shard] = []
    names: list[str] = []
    for group in groups:
        for shard in plan_shards(group, config.shard_size, image_root=image_root):
            shards.append(Shard(len(shards), shard.parts))
            names.append(benchmark_name(group[0]))
    settings = {**task.settings(), "shard_size": config.shard_size, "plan": plan_hash(shards)}
    stats = run_stage(task, shards, out, executor=executor, seed=config.seed, desc=desc, settings=settings)
    tables = [pq.read_table(out / task.folder / f"{s.id}.parquet") for s in shards]
    hashed = Hashed.from_table(pa.concat_tables(tables) if tables else HASH_SCHEMA.empty_table())
    hashed.shards = shards
    hashed.shard_of = np.repeat(np.arange(len(shards), dtype=np.int64), [t.num_rows for t in tables]) \
        if tables else np.zeros(0, np.int64)
    if per_input:
        hashed.sources = pa.array([n for n, t in zip(names, tables) for _ in range(t.num_rows)], pa.string())
    return stats, hashed, settings


def _needed(hashed: Hashed, rows: np.ndarray, partners: np.ndarray, other: Hashed) -> np.ndarray:
    """Rows of ``hashed`` (among ``rows``) whose candidate partner (a row of ``other``) has other bytes, or unknown
    bytes: only those need a pixel digest (the same bytes are the same pixels)."""
    rows, partners = np.asarray(rows, np.int64), np.asarray(partners, np.int64)
    if not len(rows):
        return rows
    mine = hashed.bytes_key.take(pa.array(rows))
    theirs = other.bytes_key.take(pa.array(partners))
    same = pc.fill_null(pc.equal(mine, theirs), False).to_numpy(zero_copy_only=False)
    return np.unique(rows[~same])


def _pixel_keys(hashed: Hashed, needed: np.ndarray, task: DigestTask, config: DedupConfig, out: Path,
                executor: Any, desc: str) -> pa.Array:
    """Every row's ``pixel_key``: the pixel digest (:class:`DigestTask`, run over the shards holding ``needed``
    rows) where needed, else the bytes digest (the same bytes, the same pixels), else a key of the row's own."""
    from curate.executors import run_stage

    ids = hashed.ids.to_pylist()
    wanted: dict[int, set[str]] = {}
    for r in needed.tolist():
        wanted.setdefault(int(hashed.shard_of[r]), set()).add(ids[r])
    shards = [Shard(hashed.shards[k].index, hashed.shards[k].parts, meta=Needed(tuple(sorted(wanted[k]))))
              for k in sorted(wanted)]
    found: dict[tuple[int, str], bytes] = {}
    if shards:
        run_stage(task, shards, out, executor=executor, seed=config.seed, desc=desc,
                  settings={**task.settings(), "plan": plan_hash(shards)})
        for k, shard in zip(sorted(wanted), shards):
            table = pq.read_table(out / task.folder / f"{shard.id}.parquet")
            for rid, key in zip(table.column("id").to_pylist(), table.column("pixel_key").to_pylist()):
                found[(k, rid)] = key
    is_needed = np.zeros(len(hashed), bool)
    is_needed[needed] = True
    byte_keys = hashed.bytes_key.to_pylist()
    keys = []
    for r in range(len(hashed)):
        key = found.get((int(hashed.shard_of[r]), ids[r])) if is_needed[r] else None
        if key is None:
            key = byte_keys[r]
        if key is None:
            key = hashlib.sha256(f"{task.folder}|row {r}".encode()).digest()[:DIGEST_BYTES]
        keys.append(key)
    return pa.array(keys, pa.binary(DIGEST_BYTES))


def _near_pairs(records: Hashed, refs: Hashed | None, config: DedupConfig, out: Path, executor: Any,
                threshold: int) -> tuple[Any, Any]:
    """The index written and searched as shards of queries; ``(nodes, (a, b, bits))``."""
    from curate.core.remote import push_files
    from curate.executors import run_stage
    from curate.dedup.search import INDEX_FILES, build_index, smallest_per_pair
    from curate.dedup.steps import Nodes

    nodes = Nodes.of(records, refs)
    hashes = np.concatenate([records.first_hashes(nodes.records)]
                            + ([refs.first_hashes(nodes.refs)] if refs is not None else []))
    digest = hashlib.sha256(hashes.tobytes()).hexdigest()[:16]
    folder = out / INDEX_DIR
    stamp = folder / "digest.txt"
    if not stamp.exists() or stamp.read_text() != digest:
        stamp.unlink(missing_ok=True)
        build_index(hashes.ravel(), np.repeat(np.arange(len(hashes), dtype=np.int64), hashes.shape[1]),
                    hashes[:, 0].copy(), folder)
        stamp.write_text(digest)
        push_files(out, [f"{INDEX_DIR}/{name}" for name in INDEX_FILES])  # a bucket: for workers elsewhere
    size = config.search_block
    blocks = [Shard(i, meta=QueryBlock(s, min(s + size, len(hashes))), size=min(size, len(hashes) - s))
              for i, s in enumerate(range(0, len(hashes), size))]
    task = SearchTask(config, threshold, digest)
    run_stage(task, blocks, out, executor=executor, seed=config.seed, desc="search near duplicates",
              settings={**task.settings(), "plan": plan_hash(blocks)})
    found = [pq.read_table(out / PAIRS_DIR / f"{b.id}.parquet") for b in blocks]
    a, b, bits = smallest_per_pair([t.column("a").to_numpy() for t in found], [t.column("b").to_numpy() for t in found],
                                   [t.column("bits").to_numpy() for t in found])
    return nodes, (a, b, bits)


def _run(inputs: list[Any], config: DedupConfig, out: Path, executor: Any) -> dict[str, Any]:
    from curate.dedup.steps import decide

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    task = HashTask(config)
    hash_stats, records, hash_settings = _hash_step(task, inputs, config, out, executor, config.image_root,
                                                    "hash images")
    refs = ref_stats = None
    if config.against:
        ref_task = AgainstTask(config)
        ref_stats, refs, _ = _hash_step(ref_task, [str(p) for p in config.against], config, out, executor, None,
                                        "hash reference images", per_input=True)
    timings = {"hash": time.perf_counter() - t0}

    t1 = time.perf_counter()
    first = first_occurrences(records.ids) if len(records) else np.zeros(0, bool)
    alive = first & (records.images > 0)
    nodes = near = None
    if alive.any() or refs is not None:  # near pairs; with --no-near still the candidates for the same pixels
        search_bits = max(config.near_threshold, EXACT_CANDIDATE_BITS) if config.near else EXACT_CANDIDATE_BITS
        nodes, found = _near_pairs(records, refs, config, out, executor, search_bits)
        if config.near:
            keep = found[2] <= config.near_threshold
            near = (found[0][keep], found[1][keep], found[2][keep])
        close = found[2] <= EXACT_CANDIDATE_BITS
        (ra, rb, _), (xa, xb, _) = nodes.split(found[0][close], found[1][close], found[2][close])
        need = np.unique(np.concatenate([_needed(records, ra, rb, records), _needed(records, rb, ra, records),
                                         _needed(records, xa, xb, refs) if refs is not None else ra[:0]]))
        records.pixel_key = _pixel_keys(records, need, DigestTask(config), config, out, executor,
                                        "digest candidate images")
        if refs is not None:
            need = _needed(refs, xb, xa, records)
            refs.pixel_key = _pixel_keys(refs, need, AgainstDigestTask(config), config, out, executor,
                                         "digest candidate reference images")
    else:
        records.pixel_key = _pixel_keys(records, np.zeros(0, np.int64), DigestTask(config), config, out, executor,
                                        "")
    timings["search"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    decision, pair_counts = decide(records, alive, prefer=tuple(config.prefer), near_pairs=near,
                                   threshold=config.near_threshold, refs=refs, nodes=nodes,
                                   embeddings=_here(config.embeddings, "--embeddings"),
                                   ref_embeddings=_here(config.against_embeddings, "--against-embeddings"),
                                   semantic_threshold=config.semantic_threshold, seed=config.seed)
    timings["decide"] = time.perf_counter() - t1
    stats, rejects = _accounting(records, first, decision, refs)
    total = hash_stats.then(stats)
    write_parquet(out / "rejects.parquet", _rejects(total, rejects))

    written = None
    kept = first & (decision.step < 0)
    if config.write_records:
        t1 = time.perf_counter()
        selection = pa.table({"id": records.ids.filter(pa.array(kept)),
                              "copies": pa.array(np.ones(int(kept.sum()), np.int32))})
        written = write_kept(out / RECORDS_DIR, inputs=inputs, selection=selection, image_root=config.image_root)
        timings["write_records"] = time.perf_counter() - t1
    counts = total.to_dict()
    settings = {"near": config.near, "near_threshold": config.near_threshold if config.near else None,
                "embeddings": None if config.embeddings is None else str(config.embeddings),
                "semantic_threshold": config.semantic_threshold if config.embeddings is not None else None,
                "prefer": list(config.prefer), "against": [str(p) for p in config.against],  # as given
                "against_embeddings": None if config.against_embeddings is None else str(config.against_embeddings),
                **hash_settings}
    from curate.dedup.summary import summary

    result = stage_result(
        "dedup", total, seed=config.seed, settings=settings, inputs=inputs,
        **summary(records, decision, refs, ref_stats, pair_counts),
        **({"records_written": written} if written is not None else {}),
        timings={**counts["timings"], **{k: round(v, 4) for k, v in timings.items()},
                 "wall": round(time.perf_counter() - t0, 4)},
        outputs={"rejects": "rejects.parquet", "hashes": f"{HASHES_DIR}/",
                 **({"records": f"{RECORDS_DIR}/"} if written is not None else {}),
                 **({"references": f"{AGAINST_DIR}/{HASHES_DIR}/"} if refs is not None else {})})
    return finish_stage(out, result)  # rejects.parquet is written above, with its two more columns


def _accounting(records: Hashed, first: np.ndarray, decision: Decision, refs: Hashed | None
                ) -> tuple[StageStats, pa.Table]:
    """The decide step's counts (in: every hashed record) and the rejects of the removed records."""
    stats = StageStats()
    sources = records.sources.to_pylist()
    stats.seen_many(Counter(sources))
    repeats = np.flatnonzero(~first)
    stats.reject_many("errored", "duplicate_id", [records.ids[int(r)].as_py() for r in repeats],
                      [sources[r] for r in repeats.tolist()], "id already seen in an earlier shard")
    removed = np.flatnonzero(first & (decision.step >= 0))
    ids = records.ids.to_pylist()
    rows = {"id": [], "source": [], "kind": [], "reason": [], "detail": [], "duplicate_of": [], "distance": []}
    for r in removed.tolist():
        reason, of = REASONS[decision.step[r]], int(decision.of_row[r])
        if decision.of_ref[r]:
            assert refs is not None
            of_id, bench = refs.ids[of].as_py(), refs.sources[of].as_py()
            detail = f"{decision.how[r]} copy of {of_id} in benchmark {bench}"
        else:
            of_id = ids[of]
            detail = f"{reason.replace('_', ' ')} of {of_id}: {decision.how[r]}"
            if decision.via is not None and decision.via[r] >= 0:
                detail = (f"{reason.replace('_', ' ')} of {ids[int(decision.via[r])]} ({decision.how[r]}), "
                          f"itself a copy of the kept {of_id}")
        stats.drop_unlisted(sources[r], reason, 1)
        for key, value in (("id", ids[r]), ("source", sources[r]), ("kind", "dropped"), ("reason", reason),
                           ("detail", detail[:500]), ("duplicate_of", of_id), ("distance", float(decision.distance[r]))):
            rows[key].append(value)
    for source, n in Counter(sources[r] for r in np.flatnonzero(first & (decision.step < 0)).tolist()).items():
        stats.kept(source, n)
    stats.check()
    return stats, pa.table(rows, schema=DEDUP_REJECT_SCHEMA)


def _rejects(total: StageStats, removed: pa.Table) -> pa.Table:
    """Every stage's rejects (errors of the hash step, repeated ids) with empty duplicate columns, then the removed."""
    base = total.rejects_table()
    n = base.num_rows
    base = base.append_column("duplicate_of", pa.nulls(n, pa.string())).append_column("distance",
                                                                                     pa.nulls(n, pa.float64()))
    return pa.concat_tables([base, removed]).combine_chunks()
