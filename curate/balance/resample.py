"""``curate resample``: concept tags → a seeded, concept-balanced selection of records.

Concept frequency ``f(c)`` = number of records tagged with concept ``c`` (each
record counts once per concept among its K tags).

Weights (``mode="inverse"``, the default): every tag of a record contributes
``f(c) ** -τ`` (``τ`` = ``temperature``; 1 = fully inverse, 0 = uniform, ½ is a
common middle ground), and the record's weight aggregates its K contributions:

* ``mean`` (default): ``w = (1/K) Σ_c f(c)^-τ`` - a record is rare when its
  concepts are rare on average; robust to one odd tag;
* ``max``: ``w = max_c f(c)^-τ`` - a record is kept for its rarest concept
  (closest to MetaCLIP's "any entry passes"); favours the tail hardest;
* ``sum``: ``w = Σ_c f(c)^-τ`` - like ``mean`` but records with more tags weigh more
  (only differs when some records have fewer than K tags).

``use_k = J`` keeps only each record's J best tags, for the frequencies and the
weights alike. With a real MetaCLIP model the K nearest concepts of an image are
usually related (cat, kitten, tabby) and all K help; when the weaker tags are
noise they dilute the signal. On the synthetic Zipf test of
``tests/curate/balance/test_pipeline.py`` (1,000 concepts, K = 3, 10% drawn), ``mean``
over K = 3 covers 1.16× the concepts of a uniform sample and cuts the share of
the 10 most frequent concepts from 0.47 to 0.37; ``use_k = 1`` covers 2× and
cuts it to about 0.09.

The target is drawn **without replacement** with probability proportional to
``w`` (Efraimidis-Spirakis: the ``N`` smallest of ``E_i / w_i`` with ``E_i ~ Exp(1)``),
or, when the target exceeds the pool, **with replacement** (a multinomial draw of
``N`` copies over ``w / Σw``), recording each record's ``copies``.

``mode="metaclip"`` applies MetaCLIP's balancing rule instead: each concept passes
with probability ``p(c) = t / max(f(c), t)`` (an independent draw per record and
concept), and a record is kept (once) when any of its concepts passes; its
``weight`` is then its keep probability ``1 - Π_c (1 - p(c))``.

Records with a repeated id keep their first occurrence (later ones are
``duplicate_id``); records without any tag are ``no_concept``; records not drawn
are counted as ``not_selected`` (they are the complement of ``selection.parquet``
and are not listed one by one in ``rejects.parquet``).

Outputs in ``OUT``: ``selection.parquet`` (``id``, ``source``, ``copies``, ``weight``,
in the order of the tags), the selected records in the layout of their input
files (``records/``, when the inputs are given), ``balance.png`` and ``stats.json``
(see :mod:`curate.balance.report`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.balance.config import MODES, WEIGHTINGS, ResampleConfig  # noqa: F401 (re-exported)
from curate.balance.report import compare, plot_balance, top_concepts
from curate.core.errors import UserError
from curate.core.io import atomic_open, write_json, write_parquet
from curate.core.stats import StageStats, run_header
from curate.core.validate import configure

SELECTION_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("copies", pa.int32()),
                              ("weight", pa.float64())])
RECORDS_DIR = "records"
_SALT = 0x5E1EC7


@dataclass
class TagArrays:
    """The tags of every record as flat arrays (record ``i`` has ``flat[offsets[i]:offsets[i+1]]``)."""

    ids: pa.Array
    sources: pa.Array
    offsets: np.ndarray
    flat: np.ndarray
    taggable: int | None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Number of tags of each record."""
        return np.diff(self.offsets)


def read_tags(path: str | os.PathLike[str]) -> TagArrays:
    """Read ``tags.parquet`` (``id``, ``source``, ``concepts``) into flat arrays.

    Raises:
        UserError: missing file or columns.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--tags {path}: no such file; make it with curate tag")
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types
        raise UserError(f"--tags {path}: not a readable Parquet file ({exc})") from None
    missing = {"id", "concepts"} - set(schema.names)
    if missing:
        raise UserError(f"--tags {path}: missing column(s) {', '.join(sorted(missing))}; expected id, concepts")
    cols = ["id", "concepts"] + (["source"] if "source" in schema.names else [])
    table = pq.read_table(path, columns=cols)
    ids = table.column("id").combine_chunks().cast(pa.string())
    sources = (table.column("source").combine_chunks().cast(pa.string()) if "source" in cols
               else pa.array(["unknown"] * table.num_rows, pa.string()))
    sources = pc.fill_null(sources, "unknown")
    concepts = table.column("concepts").combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(concepts), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = concepts.flatten().to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    if flat.size and flat.min() < 0:
        raise UserError(f"--tags {path}: negative concept indices")
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    taggable = int(meta["concepts_embedded"]) if "concepts_embedded" in meta else None
    return TagArrays(ids, sources, offsets, flat, taggable)


def keep_best(tags: TagArrays, use_k: int) -> TagArrays:
    """Keep only the ``use_k`` best tags of every record (lists are best first)."""
    if use_k < 1:
        raise UserError(f"--use-k must be at least 1, got {use_k}")
    lengths = tags.lengths
    if not lengths.size or lengths.max() <= use_k:
        return tags
    position = np.arange(tags.flat.size, dtype=np.int64) - np.repeat(tags.offsets[:-1], lengths)
    new_lengths = np.minimum(lengths, use_k)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(new_lengths, out=offsets[1:])
    return TagArrays(tags.ids, tags.sources, offsets, tags.flat[position < use_k], tags.taggable)


def concept_counts(flat: np.ndarray, n: int, per_tag: np.ndarray | None = None) -> np.ndarray:
    """Occurrences of each concept (optionally weighted per tag, e.g. by copies)."""
    if per_tag is None:
        return np.bincount(flat, minlength=n).astype(np.int64)
    return np.rint(np.bincount(flat, weights=per_tag, minlength=n)).astype(np.int64)


def _segments(values: np.ndarray, offsets: np.ndarray, ufunc: np.ufunc, empty: float) -> np.ndarray:
    """Reduce ``values`` per record with ``ufunc``; records without values get ``empty``."""
    lengths = np.diff(offsets)
    out = np.full(len(lengths), empty, dtype=np.float64)
    nonempty = lengths > 0
    if values.size:
        out[nonempty] = ufunc.reduceat(values, offsets[:-1][nonempty])
    return out


def record_weights(tags: TagArrays, counts: np.ndarray, *, weighting: str = "mean",
                   temperature: float = 1.0) -> np.ndarray:
    """Inverse-frequency weight of every record (0 for records without tags); see the module docstring."""
    if weighting not in WEIGHTINGS:
        raise UserError(f"--weighting {weighting}: use one of {', '.join(WEIGHTINGS)}")
    per_tag = np.power(counts[tags.flat].astype(np.float64), -float(temperature))
    if weighting == "max":
        return _segments(per_tag, tags.offsets, np.maximum, 0.0)
    total = _segments(per_tag, tags.offsets, np.add, 0.0)
    if weighting == "sum":
        return total
    lengths = tags.lengths
    return np.divide(total, lengths, out=np.zeros_like(total), where=lengths > 0)


def draw(weights: np.ndarray, target: int, rng: np.random.Generator) -> np.ndarray:
    """Copies per record: ``target`` records without replacement (∝ weight), or with replacement past the pool.

    Records of weight 0 are never drawn.
    """
    copies = np.zeros(len(weights), np.int32)
    pool = np.flatnonzero(weights > 0)
    if target <= 0 or pool.size == 0:
        return copies
    w = weights[pool]
    if target <= pool.size:
        keys = rng.standard_exponential(pool.size) / w
        chosen = np.argpartition(keys, target - 1)[:target] if target < pool.size else np.arange(pool.size)
        copies[pool[chosen]] = 1
    else:
        copies[pool] = rng.multinomial(target, w / w.sum()).astype(np.int32)
    return copies


def draw_metaclip(tags: TagArrays, counts: np.ndarray, t: int, rng: np.random.Generator,
                  eligible: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MetaCLIP's rule: returns ``(copies 0/1, keep probability)`` per record."""
    if t < 1:
        raise UserError(f"--t must be at least 1, got {t}")
    p = t / np.maximum(counts[tags.flat].astype(np.float64), float(t))
    passes = (rng.random(tags.flat.size) < p).astype(np.float64)
    keep = _segments(passes, tags.offsets, np.maximum, 0.0) > 0
    with np.errstate(divide="ignore"):
        miss = _segments(np.log1p(-p), tags.offsets, np.add, 0.0)  # log Π (1 - p); -inf when some p = 1
    prob = np.where(tags.lengths > 0, -np.expm1(miss), 0.0)
    keep &= eligible
    return keep.astype(np.int32), np.where(eligible, prob, 0.0)


def _first_occurrences(ids: pa.Array) -> np.ndarray:
    """Boolean mask of the first occurrence of every id."""
    encoded = ids.dictionary_encode()
    if len(encoded.dictionary) == len(ids):
        return np.ones(len(ids), dtype=bool)
    # Dictionary codes are numbered in order of first appearance: a row is a first
    # occurrence exactly when its code exceeds every code before it.
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    previous_max = np.empty_like(codes)
    previous_max[0] = -1
    np.maximum.accumulate(codes[:-1], out=previous_max[1:])
    return codes > previous_max


def _build_stats(tags: TagArrays, first: np.ndarray, has_tags: np.ndarray, copies: np.ndarray) -> StageStats:
    """Counts per source; duplicates and untagged records as rejects, not-selected as a count."""
    stats = StageStats()
    enc = tags.sources.dictionary_encode()
    names = enc.dictionary.to_pylist()
    codes = enc.indices.to_numpy(zero_copy_only=False)

    def by_source(mask: np.ndarray) -> np.ndarray:
        return np.bincount(codes[mask], minlength=len(names))

    all_rows = by_source(np.ones(len(codes), dtype=bool))
    selected = by_source(copies > 0)
    dup = ~first
    untagged = first & ~has_tags
    not_selected = by_source(first & has_tags & (copies == 0))
    for i, name in enumerate(names):
        if all_rows[i]:
            stats.seen(name, int(all_rows[i]))
        if selected[i]:
            stats.kept(name, int(selected[i]))
        if not_selected[i]:
            stats.dropped["not_selected"] += int(not_selected[i])
            stats._src(name)["dropped"]["not_selected"] += int(not_selected[i])
    id_list = tags.ids
    for i in np.flatnonzero(dup).tolist():
        stats.drop(id_list[i].as_py(), names[codes[i]], "duplicate_id", "id already seen earlier in the tags")
    for i in np.flatnonzero(untagged).tolist():
        stats.drop(id_list[i].as_py(), names[codes[i]], "no_concept", "record has no concept tag")
    stats.check()
    return stats


def resample(tags: str | os.PathLike[str], config: ResampleConfig | None = None, *, write_stats: bool = True,
             **settings: Any) -> dict[str, Any]:
    """Select a concept-balanced subset; returns the ``stats.json`` content (see :func:`run_resample`)."""
    return run_resample(tags, config, write_stats=write_stats, **settings)[0]


def run_resample(tags: str | os.PathLike[str], config: ResampleConfig | None = None, *, write_stats: bool = True,
                 **settings: Any) -> tuple[dict[str, Any], StageStats]:
    """Select a concept-balanced subset (see the module docstring).

    Args:
        tags: ``tags.parquet`` from ``curate tag``.
        config: the settings (see :class:`ResampleConfig`): ``out``, ``target`` (records or copies
            to draw, ``inverse`` mode) or ``fraction`` (of the tagged pool; > 1 draws with
            replacement), ``seed``, ``mode`` (``inverse`` or ``metaclip``), ``t`` (MetaCLIP's
            threshold), ``weighting`` and ``temperature`` (``inverse`` mode), ``use_k`` (use only
            each record's best tags), ``records`` (input record files: the selected ones are
            written to ``OUT/records/``), ``vocab`` (to name the top concepts), ``plot``.
        write_stats: write ``stats.json`` and ``rejects.parquet``.
        **settings: fields of :class:`ResampleConfig`, instead of or over ``config``.

    Returns:
        The ``stats.json`` content and the stats (with the rejects).
    """
    config = configure(ResampleConfig, config, **settings)
    target, fraction, seed, mode, t = config.target, config.fraction, config.seed, config.mode, config.t
    weighting, temperature, use_k, vocab, plot = (config.weighting, config.temperature, config.use_k,
                                                  config.vocab, config.plot)
    records = list(config.records) if config.records else None
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    arrays = read_tags(tags)
    if use_k is not None:
        arrays = keep_best(arrays, use_k)
    timings = {"read": time.perf_counter() - t0}
    n_concepts = int(arrays.flat.max()) + 1 if arrays.flat.size else 0

    t1 = time.perf_counter()
    first = _first_occurrences(arrays.ids)
    has_tags = arrays.lengths > 0
    eligible = first & has_tags
    pool = int(eligible.sum())
    pool_tags = np.repeat(eligible, arrays.lengths)
    before = concept_counts(arrays.flat[pool_tags], n_concepts)
    rng = np.random.default_rng([seed, _SALT])
    if mode == "inverse":
        n_target = target if target is not None else max(1, int(round(fraction * pool)))
        weights = np.where(eligible, record_weights(arrays, before, weighting=weighting, temperature=temperature), 0.0)
        copies = draw(weights, n_target, rng)
    else:
        n_target = None
        copies, weights = draw_metaclip(arrays, before, t, rng, eligible)
    after = concept_counts(arrays.flat, n_concepts, per_tag=np.repeat(copies, arrays.lengths).astype(np.float64))
    timings["select"] = time.perf_counter() - t1

    t1 = time.perf_counter()
    chosen = np.flatnonzero(copies > 0)
    selection = pa.table([arrays.ids.take(pa.array(chosen)), arrays.sources.take(pa.array(chosen)),
                          pa.array(copies[chosen], pa.int32()), pa.array(weights[chosen], pa.float64())],
                         schema=SELECTION_SCHEMA)
    write_parquet(out / "selection.parquet", selection)
    timings["write_selection"] = time.perf_counter() - t1

    written = None
    if records:
        t1 = time.perf_counter()
        written = write_selected_records(records, selection, out / RECORDS_DIR)
        timings["write_records"] = time.perf_counter() - t1

    taggable = arrays.taggable or max(int(np.count_nonzero(before)), 1)
    report = compare(before, after, taggable)
    names = _vocab_names(vocab)
    report["top_before"] = top_concepts(before, 10, names)
    report["top_after"] = top_concepts(after, 10, names)
    if plot:
        t1 = time.perf_counter()
        label = "inverse frequency" if mode == "inverse" else f"MetaCLIP t={t}"
        plot_balance(out / "balance.png", before, after, stats=report,
                     title=f"{pool:,} tagged records → {int(copies.sum()):,} selected ({label})")
        timings["plot"] = time.perf_counter() - t1
    stats = _build_stats(arrays, first, has_tags, copies)
    counts = stats.to_dict()
    settings = {"mode": mode, "target": n_target, "fraction": fraction, "weighting": weighting if mode == "inverse"
                else None, "temperature": temperature if mode == "inverse" else None,
                "t": t if mode == "metaclip" else None, "use_k": use_k, "tags": str(tags)}
    result: dict[str, Any] = {
        **run_header("resample", seed=seed, settings=settings),
        "records_in": counts["records_in"], "pool": pool, "records_selected": counts["records_out"],
        "copies_total": int(copies.sum()), "with_replacement": bool(n_target is not None and n_target > pool),
        "max_copies": int(copies.max()) if copies.size else 0,
        "dropped": counts["dropped"], "errored": counts["errored"], "per_source": counts["per_source"],
        "balance": report, **({"records_written": written} if written is not None else {}),
        "timings": {k: round(v, 4) for k, v in {**timings, "wall": time.perf_counter() - t0}.items()},
        "outputs": {"selection": "selection.parquet", "rejects": "rejects.parquet",
                    **({"records": f"{RECORDS_DIR}/"} if records else {}), **({"plot": "balance.png"} if plot else {})},
    }
    if write_stats:
        write_parquet(out / "rejects.parquet", stats.rejects_table())
        write_json(out / "stats.json", result)
    return result, stats


def _vocab_names(vocab: str | os.PathLike[str] | None) -> list[str] | None:
    if vocab is None:
        return None
    from curate.balance.vocab.embed import read_vocab

    return read_vocab(vocab)


# ---------------------------------------------------------------------------
# Selected records, in the layout of their input files
# ---------------------------------------------------------------------------

def _rebase(value: Any, src_dir: str, dst_dir: str) -> Any:
    """Rewrite relative image paths (str, list of str, list of {"path": str}) for a new folder.

    A path under the new folder stays relative; any other becomes absolute.
    """
    def one(p: Any) -> Any:
        if isinstance(p, str) and p and not os.path.isabs(p):
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
    from curate.core.records import RecordInvalid, expand_inputs, input_format, iter_rows, split_file, to_canonical

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
            for row, raw, problem in iter_rows(part):
                if problem is not None:
                    continue
                fallback = f"{path.stem}:{row + 1}" if fmt == "jsonl" else f"{path.stem}:{row}"
                try:
                    rid = to_canonical(raw, path.parent, fallback_id=fallback, fallback_source=path.stem)["id"]
                except RecordInvalid:
                    continue
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
    schema = pq.read_schema(source_path)
    objs = [_rebased_row(raw, rid, c, src_dir, dst_dir) for c, (rid, raw) in rows]
    if "id" not in schema.names and any(c > 1 for c, _ in rows):
        schema = schema.append(pa.field("id", pa.string()))
        for obj, (_, (rid, _)) in zip(objs, rows):
            obj.setdefault("id", rid)
    write_parquet(dest, pa.Table.from_pylist(objs, schema=schema))
    return len(objs)
