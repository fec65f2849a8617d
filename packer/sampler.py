"""Where each packed sequence is, and which rank and data-loader worker reads it when.

The training loader (:class:`packer.loader.PackedDataset`) works at sequence granularity:

* **The index.** ``curate pack`` writes ``shards/NNNNNN.index.json`` beside every tar: the byte range
  (``start`` .. ``end``: the tar headers and data of one sequence's member group) of each packed
  sequence, and for a compute-balanced pack its ``step``, ``rank`` and ``micro``. A pack without it (an
  older one, or an index whose recorded tar size no longer matches) is indexed by reading the tar headers
  only (:func:`scan_tar`); one sequence is then read with one seek and one read.
* **The epoch order.** :func:`epoch_order`: the identity, or with ``shuffle`` a global permutation of
  all sequences drawn from ``numpy.random.Generator(PCG64(SeedSequence([seed, epoch])))``. A global
  permutation (rather than shard order plus a shuffle window) because the index gives random access:
  each sequence is one contiguous read of a whole training step's worth of data, so reading in any order
  costs a seek per sequence, every order is equally likely, and the position in the epoch is one number
  (what :func:`restore_position` needs to resume on any number of ranks). A compute-balanced pack
  permutes whole steps (:func:`balanced_lists`), each rank keeping its sequences of a step together.
* **The split.** Rank ``r`` of ``W`` takes positions ``p = start + r, start + r + W, ...`` of the epoch
  order (:func:`rank_positions`); every rank gets the same count: ``ceil(rest / W)`` with the
  remainder filled by repeating the first sequences of the epoch order (counted: ``repeated``), or
  ``rest // W`` with ``drop_last``. Worker ``w`` of ``K`` takes the rank's chunks of ``batch_size``
  sequences ``w, w + K, ...`` (:func:`worker_slots`): the chunks a ``DataLoader`` delivers, in its
  round-robin order, are a prefix of the rank's list.
* **The position.** After every rank has yielded ``k`` sequences of a pass that began at ``start``,
  positions ``start .. start + k*W`` of the epoch order are consumed, whatever the ranks and workers:
  that number is all a resumed job needs (:func:`restore_position`), on any world size and workers.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from packer.writer import INDEX_FORMAT, TarIndex, build_index, index_path

STATE_FORMAT = "curate-loader-state/1"
_BLOCK = 512


def _padded(size: int) -> int:
    return (size + _BLOCK - 1) // _BLOCK * _BLOCK


def scan_tar(tar: str) -> TarIndex:
    """Index a tar by reading its headers only (the JSON members too when it is compute-balanced).

    Member groups are consecutive members sharing the key before the first dot (the WebDataset rule).
    Plain ustar headers are parsed directly (one seek and 512-byte read per member); a tar with
    extended headers (pax, GNU long names) is read with ``tarfile``.
    """
    from curate.core.io import open_input

    starts: list[int] = []
    ends: list[int] = []
    keys: list[str] = []
    metas: list[dict[str, Any]] = []
    balanced: bool | None = None
    last: tuple[str, str] | None = None
    with open_input(tar) as fh:
        for name, offset, data_at, size in _headers(fh, tar):
            folder, _, base = name.rpartition("/")
            key = base.split(".", 1)[0]
            end = data_at + _padded(size)
            if (folder, key) != last:
                starts.append(offset)
                ends.append(end)
                keys.append(key)
                last = (folder, key)
            else:
                ends[-1] = end
            if name.endswith(".json") and balanced is not False:
                fh.seek(data_at)
                meta = json.loads(fh.read(size))
                balanced = meta.get("step") is not None
                if balanced:
                    metas.append(meta)
    return build_index(starts, ends, metas if balanced else None, keys)


def _headers(fh: Any, tar: str) -> Any:
    """``(name, header offset, data offset, size)`` of every regular file of a tar."""
    offset = 0
    while True:
        fh.seek(offset)
        block = fh.read(_BLOCK)
        if len(block) < _BLOCK or block == bytes(_BLOCK):
            return
        kind = block[156:157]
        if kind not in (b"0", b"\0", b"5", b"1", b"2"):  # pax or GNU extensions: let tarfile read them
            yield from _tarfile_headers(fh, tar, offset)
            return
        try:
            size = int(block[124:136].rstrip(b"\0 ").decode() or "0", 8)
        except ValueError:
            raise ValueError(f"{tar}: not a tar (bad header at byte {offset})") from None
        name = block[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
        if block[257:262] == b"ustar" and block[345:500].strip(b"\0"):
            name = block[345:500].split(b"\0", 1)[0].decode("utf-8", "replace") + "/" + name
        if kind in (b"0", b"\0"):
            yield name, offset, offset + _BLOCK, size
        offset += _BLOCK + _padded(size)


def _tarfile_headers(fh: Any, tar: str, offset: int) -> Any:
    fh.seek(0)
    with tarfile.open(fileobj=fh, mode="r:") as tf:
        members = [m for m in tf if m.isfile()]
    for m in members:
        if m.offset >= offset:
            yield m.name, m.offset, m.offset_data, m.size


def load_index(tar: str) -> TarIndex:
    """The tar's index file when it matches the tar's size, else :func:`scan_tar`."""
    from curate.core.io import is_url, open_input

    path = index_path(tar)
    try:
        with open_input(path) as fh:
            data = json.loads(fh.read())
        size = _size(tar) if not is_url(tar) else data["tar_size"]
    except (OSError, ValueError, KeyError):
        return scan_tar(tar)
    if data.get("format") != INDEX_FORMAT or data.get("tar_size") != size:
        return scan_tar(tar)
    idx = TarIndex(np.asarray(data["start"], dtype=np.int64), np.asarray(data["end"], dtype=np.int64),
                   keys=data.get("key"))
    if "step" in data:
        idx.steps, idx.ranks, idx.micros = (np.asarray(data[k], dtype=np.int64) for k in ("step", "rank", "micro"))
    return idx


def _size(path: str) -> int:
    return os.path.getsize(path)


@dataclass
class PackIndex:
    """All sequences of a pack, in shard order: tar number and byte range of each."""

    tars: list[str]
    tar_of: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    steps: np.ndarray | None = None
    ranks: np.ndarray | None = None
    micros: np.ndarray | None = None
    keys: list[str | None] | None = None

    def __len__(self) -> int:
        return int(self.starts.size)

    @property
    def balanced(self) -> bool:
        """Whether the pack is compute-balanced (every sequence has a step and a rank)."""
        return self.steps is not None


def pack_index(tars: Sequence[str], *, scan: bool = False) -> PackIndex:
    """The :class:`PackIndex` of the tars, in the order given (each by :func:`load_index`, or :func:`scan_tar`)."""
    parts = [scan_tar(t) if scan else load_index(t) for t in tars]
    sizes = [len(p) for p in parts]
    tar_of = np.repeat(np.arange(len(tars), dtype=np.int32), sizes)
    cat = (lambda arrays: np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64))
    out = PackIndex(list(tars), tar_of, cat([p.starts for p in parts]), cat([p.ends for p in parts]),
                    keys=[k for p in parts for k in (p.keys or [None] * len(p))])
    with_steps = [p.steps is not None for p in parts if len(p)]
    if with_steps and all(with_steps):
        out.steps = cat([p.steps for p in parts if len(p)])
        out.ranks = cat([p.ranks for p in parts if len(p)])
        out.micros = cat([p.micros for p in parts if len(p)])
    return out


def read_members(fh: Any, start: int, end: int) -> dict[str, bytes]:
    """The members of one sequence (``suffix -> bytes``: ``json``, ``img0.jpg``, ...) read at ``start..end``."""
    fh.seek(start)
    data = fh.read(end - start)
    out: dict[str, bytes] = {"__key__": b""}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            for member in tf:
                if not member.isfile():
                    continue
                name = member.name.split("/")[-1]
                key, _, suffix = name.partition(".")
                if out["__key__"] and key.encode() != out["__key__"]:
                    raise tarfile.ReadError(f"two keys ({out['__key__'].decode()}, {key}) in one sequence's range")
                out["__key__"] = key.encode()
                out[suffix] = tf.extractfile(member).read()  # type: ignore[union-attr]
    except tarfile.TarError as exc:
        raise StaleIndex(f"no packed sequence at bytes {start}..{end} ({exc}); the tar changed after its index "
                         "was written: delete its .index.json (it is rebuilt from the tar headers)") from None
    return out


class StaleIndex(ValueError):
    """A sequence index that no longer matches its tar."""


# --- the epoch: order, split, position -----------------------------------------------------------------


def epoch_order(n: int, *, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """The epoch's order of ``n`` items: ``arange(n)``, or a permutation seeded by ``(seed, epoch)``."""
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(epoch)]))).permutation(n)


def per_rank(rest: int, world: int, drop_last: bool) -> int:
    """Sequences each of ``world`` ranks yields from ``rest`` remaining ones."""
    return rest // world if drop_last else -(-rest // world)


def rank_positions(n: int, start: int, rank: int, world: int, drop_last: bool) -> np.ndarray:
    """Positions (in the epoch order, wrapped modulo ``n`` for repeats) of rank ``rank``'s sequences."""
    count = per_rank(max(n - start, 0), world, drop_last)
    return start + rank + world * np.arange(count, dtype=np.int64)


def balanced_lists(index: PackIndex, *, world: int, shuffle: bool, seed: int, epoch: int,
                   drop_last: bool) -> list[np.ndarray]:
    """Each rank's sequences (pack positions) of a compute-balanced pack: steps in epoch order, micro-batches in order.

    Whole steps are permuted, so a step's sequences stay together on every rank. Ranks with fewer
    sequences (a bin left empty) are filled by repeating their first ones, or all are cut to the shortest
    with ``drop_last``.
    """
    assert index.steps is not None and index.ranks is not None and index.micros is not None
    steps = np.unique(index.steps)
    order = epoch_order(steps.size, shuffle=shuffle, seed=seed, epoch=epoch)
    place = np.empty(steps.size, dtype=np.int64)
    place[order] = np.arange(steps.size)
    step_place = place[np.searchsorted(steps, index.steps)]
    lists = []
    for r in range(world):
        mine = np.flatnonzero(index.ranks == r)
        lists.append(mine[np.lexsort((index.micros[mine], step_place[mine]))])
    lengths = [x.size for x in lists]
    target = min(lengths) if drop_last else max(lengths)
    if target == 0:
        raise ValueError("a rank of this compute-balanced pack has no sequence; repack with fewer --dp ranks")
    return [np.resize(x, target) if x.size else x for x in lists]


def worker_slots(count: int, worker: int, workers: int, batch_size: int) -> np.ndarray:
    """Indices (into the rank's list of ``count``) that data-loader worker ``worker`` of ``workers`` yields.

    Chunks of ``batch_size`` go to workers in turn, as a ``DataLoader`` takes batches from them.
    """
    j = np.arange(count, dtype=np.int64)
    return j[(j // max(batch_size, 1)) % max(workers, 1) == worker]


# --- state ---------------------------------------------------------------------------------------------


def _dataset_states(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Our dataset states inside a loader's ``state_dict`` (torchdata's StatefulDataLoader) or our own."""
    if state.get("format") == STATE_FORMAT:
        return [state]
    snapshot = state.get("_snapshot")
    if isinstance(snapshot, dict) and "_worker_snapshots" in snapshot:
        found = [w.get("dataset_state") for w in snapshot["_worker_snapshots"].values()]
        states = [s for s in found if s]
    else:
        states = [state["dataset_state"]] if state.get("dataset_state") else []
    if not states or any(s.get("format") != STATE_FORMAT for s in states):
        raise ValueError("not a packer.loader state: pass PackedDataset.state_dict() or the state_dict() of the "
                         "StatefulDataLoader that read it")
    return states


def restore_position(state: dict[str, Any]) -> dict[str, Any]:
    """The epoch position recorded in ``state`` (ours, or a StatefulDataLoader's), whatever its ranks and workers.

    Returns ``epoch``, ``seed``, ``shuffle``, ``drop_last``, ``n``, ``balanced`` and ``consumed``: for a
    plain pack the number of positions of the epoch order already yielded over all ranks; for a
    compute-balanced pack the number of sequences each rank has yielded of its list.
    """
    states = _dataset_states(state)
    first = states[0]
    keys = ("epoch", "seed", "shuffle", "drop_last", "n", "balanced", "start", "world", "workers", "batch_size")
    for other in states[1:]:
        if any(other[k] != first[k] for k in keys):
            raise ValueError("the workers of this state disagree on the epoch; it was not saved by one loader")
    items = sum(int(s["yielded"]) for s in states)
    if len(states) != int(first["workers"]):
        raise ValueError(f"the state holds {len(states)} worker states for {first['workers']} workers")
    # batches delivered after the workers' last snapshot (StatefulDataLoader's snapshot_every_n_steps > 1)
    items += int(state.get("_steps_since_snapshot") or 0) * int(first["batch_size"])
    if first["balanced"]:
        consumed = min(int(first["start"]) + items, int(first["n"]))
    else:
        rest = max(int(first["n"]) - int(first["start"]), 0)
        items = min(items, per_rank(rest, int(first["world"]), bool(first["drop_last"])))
        consumed = min(int(first["start"]) + items * int(first["world"]), int(first["n"]))
    return {k: first[k] for k in ("epoch", "seed", "shuffle", "drop_last", "n", "balanced")} | {"consumed": consumed}

