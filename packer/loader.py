"""The training side: read packed shards as variable-length-attention batches.

:class:`PackedDataset` is a torch ``IterableDataset`` over ``curate pack`` shards
(read with the ``webdataset`` library) that yields one dict per packed sequence:

* ``input_ids`` (L,), ``labels`` (L,): loss on assistant tokens only (``-100`` on
  system and user turns, template tokens and image tokens);
* ``position_ids``: restarting at 0 at every sample boundary; shape (3, L) with
  the multimodal rotary ids for the Qwen2-VL family, else (L,);
* ``mm_token_type_ids`` (L,): 1 on image tokens, for processors that return it (Qwen2-VL in transformers 5);
* ``cu_seqlens`` (int32, samples + 1) and ``max_seqlen``: the sample boundaries
  for varlen attention (e.g. ``flash_attn_varlen_func``);
* ``pixel_values`` and ``image_grid_thw`` for all images in order (absent when
  the sequence has no image); ``ids`` and ``sources`` of the samples.

Token ids are rebuilt with the processor and must reproduce the stored counts:
a disagreement raises :class:`ProcessorDrift` instead of training on shifted
boundaries.

Work is split by sequence (:mod:`packer.sampler`: a per-tar index of byte ranges):
every rank yields the same number of sequences per epoch (``len()``; the remainder
repeated, or dropped with ``drop_last``), DataLoader workers take a rank's
sequences in turns of ``batch_size``, ``shuffle``/``seed``/``set_epoch`` give a
deterministic global permutation, and ``state_dict``/``load_state_dict`` resume
exactly, on any number of ranks and workers (docs/loader.md).

A compute-balanced pack (``curate pack --balance-compute --dp N``) assigns every
sequence to a step and a rank. Read by ``world_size`` > 1 ranks (it must equal the
pack's ``dp``), rank ``r`` yields, step by step (then micro-batch), exactly the
sequences assigned to it; with ``shuffle`` whole steps are permuted.
"""

from __future__ import annotations

import glob
import json
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from curate.core.images import DEFAULT_LIMITS, ImageError, ImageLimits, decode
from curate.core.threads import cap_threads
from curate.core.io import is_url
from packer.rope import mrope_positions, text_positions
from packer.sampler import (
    STATE_FORMAT,
    PackIndex,
    StaleIndex,
    balanced_lists,
    epoch_order,
    pack_index,
    rank_positions,
    read_members,
    restore_position,
    worker_slots,
)
from packer.tokens import TokenCounter
from packer.writer import index_path


class ProcessorDrift(RuntimeError):
    """The processor no longer reproduces what the shard recorded."""


def expand_shards(shards: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """Shard paths from a folder, a glob, a brace pattern, or a list; sorted."""
    import braceexpand

    items = [shards] if isinstance(shards, (str, os.PathLike)) else list(shards)
    out: list[str] = []
    for item in items:
        item = str(item)
        if is_url(item):  # a pack output in object storage: only shards whose marker is there
            out.extend(_remote_shards(item))
            continue
        if os.path.isdir(item):
            out.extend(sorted(glob.glob(os.path.join(item, "*.tar"))))
            continue
        for pattern in braceexpand.braceexpand(item):
            found = sorted(glob.glob(pattern))
            out.extend(found if found else [pattern])
    missing = [p for p in out if not is_url(p) and not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"no such shard: {missing[0]}")
    if not out:
        raise FileNotFoundError(f"no .tar shards found in {shards}")
    return out


def _remote_shards(item: str) -> list[str]:
    """Tars under a URL (a shard prefix, a tar or a brace pattern) that have their completion marker."""
    import braceexpand

    from curate.core.io import url_fs

    fs, inner = url_fs(item)
    scheme = item.split("://", 1)[0]
    inner = inner.rstrip("/")
    if "{" in item:
        tars = [url_fs(u)[1] for u in braceexpand.braceexpand(item)]
    elif inner.endswith(".tar"):
        tars = [inner]
    else:
        tars = sorted(fs.glob(f"{inner}/*.tar"))
    by_folder: dict[str, set[str]] = {}
    kept = []
    for tar in tars:
        folder = tar.rsplit("/", 1)[0]
        root = folder[: -len("/shards")] if folder.endswith("/shards") else folder
        if root not in by_folder:
            by_folder[root] = {p.rsplit("/", 1)[-1][:-5] for p in fs.glob(f"{root}/_shards/write/*.json")}
        stem = tar.rsplit("/", 1)[-1][:-4]
        if stem in by_folder[root]:
            kept.append(f"{scheme}://{tar}")
    return kept


class SampleError(RuntimeError):
    """A packed sample whose image does not decode (a pack that ``curate verify`` would have failed)."""


#: What :class:`PackedDataset` does with a sample whose image does not decode: ``raise`` (naming the shard,
#: the sequence and the sample) or ``skip`` (the sequence is rebuilt without it; counted and logged).
ON_ERROR = ("raise", "skip")
_log = logging.getLogger("packer.loader")


class PackedSequenceBuilder:
    """Turns one packed sequence (its JSON and image bytes) into training tensors.

    Shared by :class:`PackedDataset` and the Energon task encoder. Images are decoded by the image
    gate (:func:`curate.core.images.decode`, within ``limits``), as ``curate pack`` and ``curate verify``
    proved them. ``on_error`` (:data:`ON_ERROR`) is what happens to a sample whose image does not decode
    anyway; ``skipped`` counts the samples skipped by this builder.
    """

    def __init__(self, processor: str | os.PathLike[str] | TokenCounter, *, check: bool = True,
                 limits: ImageLimits = DEFAULT_LIMITS, on_error: str = "raise") -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
        self.counter = processor if isinstance(processor, TokenCounter) else TokenCounter(processor)
        self.check, self.limits, self.on_error = check, limits, on_error
        self.skipped = 0
        rule = self.counter.image_rule
        self.mrope = rule is not None and "qwen" in type(self.counter.processor).__name__.lower()
        self.merge_size = rule.merge_size if rule is not None else 1

    def build(self, meta: dict[str, Any], images: Sequence[bytes], shard: str = "") -> dict[str, Any] | None:
        """Tensors of one packed sequence; ``images`` are the bytes of ``meta['image_members']`` in order.

        Returns None when every sample of the sequence was skipped (``on_error="skip"``).

        Raises:
            ProcessorDrift: the processor no longer gives the stored token counts or image grids.
            SampleError: a sample's image does not decode (``on_error="raise"``).
        """
        if self.check and meta.get("processor") and meta["processor"] != self.counter.fingerprint:
            raise ProcessorDrift(f"sequence {meta.get('key')}: packed with processor {meta['processor']}, "
                                 f"loading with {self.counter.fingerprint}")
        where = f"{shard}: sequence {meta.get('key')}" if shard else f"sequence {meta.get('key')}"
        samples = self._samples(meta, images, where)
        if not samples:
            return None
        cu = np.concatenate([[0], np.cumsum([len(ids) for _, ids, _, _, _ in samples])]).astype(np.int32)
        if len(samples) == len(meta["ids"]) and cu.tolist() != list(meta["cu_seqlens"]):
            raise ProcessorDrift(f"{where}: cu_seqlens {meta['cu_seqlens']}, tokens rebuilt {cu.tolist()}")
        out: dict[str, Any] = {
            "input_ids": torch.from_numpy(np.concatenate([s[1] for s in samples])),
            "labels": torch.from_numpy(np.concatenate([s[2] for s in samples])),
            "position_ids": torch.from_numpy(np.concatenate([s[3] for s in samples], axis=-1)),
            "cu_seqlens": torch.from_numpy(cu),
            "max_seqlen": int(np.diff(cu).max()) if cu.size > 1 else 0,
            "ids": [meta["ids"][s[0]] for s in samples],
            "sources": [meta["sources"][s[0]] for s in samples],
        }
        if self.counter.image_token_id is not None and "mm_token_type_ids" in getattr(
                self.counter.processor, "model_input_names", []):
            out["mm_token_type_ids"] = (out["input_ids"] == self.counter.image_token_id).to(torch.int32)
        pixels = [img for s in samples for img in s[4][0]]
        if pixels:
            stored = [list(g) for s in samples for g in s[4][1]]
            vision = self.counter.processor.image_processor(images=pixels, return_tensors="pt")
            out["pixel_values"] = vision["pixel_values"]
            if "image_grid_thw" in vision:
                grid = vision["image_grid_thw"]
                if grid.tolist() != stored:
                    raise ProcessorDrift(f"{where}: stored image grids {stored}, the image processor now gives "
                                         f"{grid.tolist()}")
                out["image_grid_thw"] = grid
        return out

    def _samples(self, meta: dict[str, Any], images: Sequence[bytes], where: str) -> list[tuple[Any, ...]]:
        """``(index, ids, labels, positions, (pixels, grids))`` of every sample kept."""
        kept = []
        first = 0
        for i, (messages, image_tokens) in enumerate(zip(meta["messages"], meta["image_tokens"])):
            k = meta["images_per_sample"][i]
            names, grids = meta["image_members"][first:first + k], meta["image_grids"][first:first + k]
            data = images[first:first + k]
            first += k
            try:
                pixels = [decode(b, self.limits, label=f"{where}, sample {meta['ids'][i]!r}, image {name}")
                          for b, name in zip(data, names)]
            except ImageError as exc:
                message = f"{where}, sample {meta['ids'][i]!r}: {exc.reason}: {exc.detail}"
                if self.on_error == "raise":
                    raise SampleError(message + "; run curate verify on the pack, or load with "
                                                "on_error='skip'") from None
                self.skipped += 1
                _log.warning("skipped %s", message)
                continue
            ids, labels = self.counter.encode(messages, list(image_tokens))
            if len(ids) != meta["tokens"][i]:
                raise ProcessorDrift(f"{where}, sample {meta['ids'][i]!r}: stored {meta['tokens'][i]} tokens, "
                                     f"the processor now gives {len(ids)}")
            if self.mrope:
                positions = mrope_positions(ids, self.counter.image_token_id, grids, self.merge_size)
            else:
                positions = text_positions(len(ids))
            kept.append((i, np.asarray(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64), positions,
                         (pixels, grids)))
        return kept


class PackedDataset(torch.utils.data.IterableDataset):
    """Packed sequences from ``curate pack`` shards, one dict per sequence (see module docstring).

    Work is split at sequence granularity (:mod:`packer.sampler`): every rank yields the same number of
    sequences per epoch (:meth:`__len__`), whatever the number of tars, and a rank's DataLoader workers
    take its sequences in turns of ``batch_size``. Docs: docs/loader.md.

    Args:
        shards: a shard folder, glob, brace pattern (``shards/{000000..000009}.tar``) or list of paths.
        processor: the processor folder or hub id the shards were packed with (or a TokenCounter); ``None``
            yields the raw sequence (``meta``: its JSON, ``images``: the image bytes, ``key``, ``shard``).
        rank, world_size: distributed position; by default read from ``torch.distributed`` when
            initialised, else 0 and 1.
        shuffle, seed: a permutation of the epoch's sequences seeded by ``(seed, epoch)``
            (:meth:`set_epoch`); a compute-balanced pack permutes whole steps.
        drop_last: each rank yields ``rest // world_size`` sequences (the last few of the epoch order are
            dropped); by default ``ceil(rest / world_size)``, the remainder filled by repeating the first
            sequences of the epoch order (how many: :attr:`repeated`).
        batch_size: the ``DataLoader``'s batch size (workers take turns by whole batches, which keeps
            what a loader has delivered a prefix of the rank's sequences: needed for an exact resume).
        check: verify processor fingerprint, token counts and image grids (recommended).
        on_error: a sample whose image does not decode (a pack ``curate verify`` fails): ``"raise"`` (the
            default: :class:`SampleError` naming the shard, sequence and sample) or ``"skip"`` (the sequence is
            built without it; each skip is logged on the ``packer.loader`` logger and counted in ``skipped``,
            per process: a DataLoader worker counts its own).
        limits: the image limits (bytes, pixels) the pack was made with (``stats.json`` ``settings.image_limits``).
        threads: torch/OpenMP threads of each DataLoader worker (set when the worker starts
            iterating; 1 by default: W workers × all cores each oversubscribe the machine).
            The main process is left as it is.
    """

    def __init__(self, shards: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                 processor: str | os.PathLike[str] | TokenCounter | None, *, rank: int | None = None,
                 world_size: int | None = None, shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 batch_size: int = 1, check: bool = True, threads: int = 1, on_error: str = "raise",
                 limits: ImageLimits = DEFAULT_LIMITS) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        super().__init__()
        self.threads = threads
        self.shards = expand_shards(shards)
        self.processor = processor
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.drop_last, self.batch_size = shuffle, int(seed), drop_last, batch_size
        self.check = check
        self.on_error, self.limits = on_error, limits
        self.epoch = 0
        self._start = 0  # position of the epoch where this pass begins (restored by load_state_dict)
        self._skip: int | None = None  # a worker's own resume: slots already yielded (same config only)
        self._saved: dict[str, Any] | None = None  # that worker state, to check the config it came from
        self._yielded = 0  # sequences yielded by this process in this pass (counted from the pass's start)
        self._builder: PackedSequenceBuilder | None = None
        self._index: PackIndex | None = None
        self._dp: int | None = None  # data-parallel ranks of a compute-balanced pack
        _ = self.index  # read here, once: DataLoader workers get it with their copy of the dataset

    # --- the split --------------------------------------------------------------------------------------

    @property
    def index(self) -> PackIndex:
        """The sequence index of the shards (index files, or tar headers scanned), loaded once."""
        if self._index is None:
            self._index = pack_index(self.shards)
            if len(self._index) == 0:
                raise ValueError(f"{self.shards[0]}: the shards hold no packed sequence")
        return self._index

    def _dist(self) -> tuple[int, int]:
        if self.rank is not None and self.world_size is not None:
            rank, world = self.rank, self.world_size
        elif torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
            self.rank, self.world_size = rank, world  # kept: DataLoader workers get a copy
        else:
            rank, world = 0, 1
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside 0..{world - 1}")
        return rank, world

    def _balanced(self, world: int) -> bool:
        """Whether the pack is compute-balanced and read by ``world`` > 1 ranks (which must equal its dp)."""
        index = self.index
        if world == 1 or not index.balanced:
            return False
        if self._dp is None:
            meta = first_meta(self.shards[int(index.tar_of[0])])
            self._dp = max(int(index.ranks.max()) + 1, int((meta or {}).get("dp") or 1))  # type: ignore[union-attr]
        dp = self._dp
        if dp != world:
            raise ValueError(f"{self.shards[0]}: packed for --dp {dp} data-parallel ranks, read with "
                             f"world_size {world}; repack with --dp {world} (or read it with world_size {dp})")
        return True

    def _rank_list(self) -> tuple[np.ndarray, int]:
        """Pack positions of this rank's sequences in this pass, and how many of them are repeats."""
        rank, world = self._dist()
        n = len(self.index)
        if self._balanced(world):
            lists = balanced_lists(self.index, world=world, shuffle=self.shuffle, seed=self.seed,
                                   epoch=self.epoch, drop_last=self.drop_last)
            own = int((self.index.ranks == rank).sum())
            return lists[rank][self._start:], max(0, lists[rank].size - max(own, self._start))
        if self.drop_last and self._start == 0 and n < world:
            raise ValueError(f"{self.shards[0]}: {n} packed sequences cannot give each of {world} ranks one with "
                             "drop_last; load with drop_last=False (sequences repeated to fill) or pack smaller")
        positions = rank_positions(n, self._start, rank, world, self.drop_last)
        order = epoch_order(n, shuffle=self.shuffle, seed=self.seed, epoch=self.epoch)
        return order[positions % n], int((positions >= n).sum())

    def __len__(self) -> int:
        """Sequences this rank yields in this pass: the epoch's share, or its rest after a mid-epoch restore."""
        return int(self._rank_list()[0].size)

    @property
    def repeated(self) -> int:
        """Sequences of this rank's pass that repeat an earlier one of the epoch (filling, without drop_last)."""
        return self._rank_list()[1]

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch (its permutation with ``shuffle``); another epoch than the current starts at its beginning.

        Call it on the dataset before iterating the DataLoader (not with ``persistent_workers``).
        Setting the epoch a restored state is in keeps its position.
        """
        if int(epoch) != self.epoch:
            self.epoch, self._start, self._skip, self._saved = int(epoch), 0, None, None
            self._yielded = 0

    # --- state --------------------------------------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        rank, world = self._dist()
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return {"format": STATE_FORMAT, "epoch": self.epoch, "seed": self.seed, "shuffle": self.shuffle,
                "drop_last": self.drop_last, "n": len(self.index), "balanced": self._balanced(world),
                "start": self._start, "world": world, "rank": rank, "workers": workers, "worker": worker,
                "batch_size": self.batch_size}

    def state_dict(self) -> dict[str, Any]:
        """This process's position in the epoch (called by torchdata's ``StatefulDataLoader`` in each worker).

        Save the loader's ``state_dict()`` (or, with a plain loop, :meth:`state_at`); restore with
        :meth:`load_state_dict`.
        """
        return self._config() | {"yielded": self._yielded}

    def state_at(self, sequences: int) -> dict[str, Any]:
        """The state after this rank has consumed ``sequences`` sequences of this pass (for a plain training loop)."""
        return self._config() | {"workers": 1, "worker": 0, "yielded": int(sequences)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch of ``state`` with exactly the sequences not yet yielded.

        ``state`` is one of ours (:meth:`state_dict`, :meth:`state_at`) or the ``state_dict()`` of the
        ``StatefulDataLoader`` that read this dataset, saved by any rank (all ranks agree on the position).
        Called on the dataset before building the loader, it works for any world size and number of
        workers (the rest of the epoch is split again); ``StatefulDataLoader.load_state_dict`` (same
        world size and workers) also works.
        """
        info = torch.utils.data.get_worker_info()
        own = state.get("format") == STATE_FORMAT and info is not None and int(state["workers"]) > 1
        if own:  # torchdata hands each worker its own state: same workers, so continue its own slots
            self._check_same(state, {"epoch", "seed", "shuffle", "drop_last", "n"})
            mine = self._config()
            if any(mine[k] != state[k] for k in ("world", "rank", "workers", "worker", "batch_size")):
                raise ValueError("this worker state was saved with another world size, rank, workers or batch size; "
                                 "load the whole loader state on the dataset (dataset.load_state_dict(state)) "
                                 "before building the loader")
            self.epoch, self._start = int(state["epoch"]), int(state["start"])
            self._skip, self._yielded = int(state["yielded"]), int(state["yielded"])
            return
        position = restore_position(state)
        self._check_same(position, {"seed", "shuffle", "drop_last", "n"})
        self.epoch, self._start, self._skip, self._yielded = int(position["epoch"]), int(position["consumed"]), None, 0

    def _check_same(self, state: dict[str, Any], keys: set[str]) -> None:
        mine = {"seed": self.seed, "shuffle": self.shuffle, "drop_last": self.drop_last, "n": len(self.index),
                "epoch": self.epoch}
        bad = sorted(k for k in keys if k != "epoch" and state[k] != mine[k])
        if bad:
            raise ValueError("the state was saved by another loader: " + ", ".join(
                f"{k} {state[k]!r} (here {mine[k]!r})" for k in bad) + "; load it with the same shards and settings")

    # --- reading ------------------------------------------------------------------------------------------

    def _my_slots(self) -> np.ndarray:
        """Pack positions this process yields in this pass (after a worker's own resume)."""
        mine, _ = self._rank_list()
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        slots = mine[worker_slots(mine.size, worker, workers, self.batch_size)]
        return slots[self._skip or 0:]

    def raw(self) -> Iterator[dict[str, Any]]:
        """This process's sequences as stored: ``meta`` (the JSON), ``images`` (bytes), ``key``, ``shard``."""
        index = self.index
        slots = self._my_slots()
        opened: dict[int, Any] = {}
        from curate.core.io import open_input

        try:
            for pos in slots.tolist():
                t = int(index.tar_of[pos])
                if t not in opened:
                    if len(opened) >= 8:
                        opened.pop(next(iter(opened))).close()
                    opened[t] = open_input(index.tars[t])
                try:
                    members = read_members(opened[t], int(index.starts[pos]), int(index.ends[pos]))
                except StaleIndex as exc:
                    raise StaleIndex(f"{index.tars[t]}: {exc}") from None
                expected = index.keys[pos] if index.keys is not None else None
                if "json" not in members or (expected is not None and members["__key__"].decode() != expected):
                    raise StaleIndex(f"{index.tars[t]}: sequence {expected or '?'} is not at byte "
                                     f"{int(index.starts[pos])}; the tar changed after its index was written: delete "
                                     f"{index_path(index.tars[t])} (it is rebuilt from the tar headers)")
                meta = json.loads(members["json"])
                images = [members[name] for name in meta["image_members"]]
                yield {"meta": meta, "images": images, "key": meta.get("key"), "shard": index.tars[t]}
        finally:
            for fh in opened.values():
                fh.close()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if torch.utils.data.get_worker_info() is not None:
            cap_threads(self.threads)  # a DataLoader worker: before the processor loads
        if self._builder is None and self.processor is not None:
            self._builder = PackedSequenceBuilder(self.processor, check=self.check, limits=self.limits,
                                                  on_error=self.on_error)
        rank, world = self._dist()
        balanced = self._balanced(world)
        self._yielded = self._skip or 0
        for item in self.raw():
            meta = item["meta"]
            if balanced and meta.get("rank") != rank:
                raise ValueError(f"sequence {meta.get('key')} is assigned to rank {meta.get('rank')}, read by rank {rank}")
            if self._builder is None:
                self._yielded += 1
                yield item
                continue
            built = self._builder.build(meta, item["images"], shard=item["shard"])
            self._yielded += 1  # counted even when every sample was skipped: positions, not items
            if built is not None:
                yield built

    @property
    def skipped(self) -> int:
        """Samples skipped so far in this process (``on_error="skip"``)."""
        return self._builder.skipped if self._builder is not None else 0


def worker_init(worker_id: int) -> None:  # noqa: ARG001 - DataLoader's worker_init_fn signature
    """``DataLoader(worker_init_fn=worker_init)``: one torch/OpenMP thread per data-loader worker."""
    cap_threads(1)


def first_meta(shard: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The JSON of the first packed sequence of a tar (read without reading the rest), or ``None``."""
    import tarfile

    from curate.core.io import open_input

    with open_input(shard) as fh, tarfile.open(fileobj=fh, mode="r|") as tar:
        for member in tar:
            if member.name.endswith(".json"):
                fh = tar.extractfile(member)
                return json.loads(fh.read()) if fh is not None else None
    return None


def block_causal_mask(cu_seqlens: torch.Tensor, *, dtype: torch.dtype = torch.bool) -> torch.Tensor:
    """A (1, 1, L, L) attention mask restricting each token to earlier tokens of its own sample.

    For attention implementations without a varlen kernel (e.g. PyTorch SDPA on
    the CPU): ``True`` (or 0.0 for float dtypes) where attention is allowed,
    ``False`` (or the dtype's minimum) elsewhere. Equivalent to varlen attention
    with ``cu_seqlens``.
    """
    total = int(cu_seqlens[-1])
    segment = torch.repeat_interleave(torch.arange(cu_seqlens.numel() - 1), torch.diff(cu_seqlens.long()))
    same = segment[:, None] == segment[None, :]
    causal = torch.ones(total, total, dtype=torch.bool).tril()
    allowed = (same & causal)[None, None]
    if dtype == torch.bool:
        return allowed
    return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)


def collate_packed(batch: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate packed sequences into one varlen batch (cu_seqlens shifted, images concatenated)."""
    cu = [torch.zeros(1, dtype=torch.int32)]
    offset = 0
    for item in batch:
        cu.append(item["cu_seqlens"][1:] + offset)
        offset += int(item["cu_seqlens"][-1])
    out: dict[str, Any] = {
        "input_ids": torch.cat([b["input_ids"] for b in batch]),
        "labels": torch.cat([b["labels"] for b in batch]),
        **({"mm_token_type_ids": torch.cat([b["mm_token_type_ids"] for b in batch])}
           if all("mm_token_type_ids" in b for b in batch) else {}),
        "position_ids": torch.cat([b["position_ids"] for b in batch], dim=-1),
        "cu_seqlens": torch.cat(cu).to(torch.int32),
        "max_seqlen": max(b["max_seqlen"] for b in batch),
        "ids": [i for b in batch for i in b["ids"]],
        "sources": [s for b in batch for s in b["sources"]],
    }
    return _with_images(out, batch)


def _with_images(out: dict[str, Any], batch: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``out`` with the batch's images concatenated in row order (``pixel_values``, ``image_grid_thw``)."""
    with_images = [b for b in batch if "pixel_values" in b]
    if with_images:
        out["pixel_values"] = torch.cat([b["pixel_values"] for b in with_images])
        if all("image_grid_thw" in b for b in with_images):
            out["image_grid_thw"] = torch.cat([b["image_grid_thw"] for b in with_images])
    return out


def collate_padded(batch: Sequence[dict[str, Any]], *, pad_id: int = 0) -> dict[str, Any]:
    """Stack packed sequences into a padded ``(B, L)`` batch, ``L`` the longest of the batch.

    ``input_ids`` padded with ``pad_id``, ``labels`` with -100, ``position_ids`` with 0 (``(3, B, L)``
    for multimodal rotary ids, else ``(B, L)``), ``attention_mask`` (B, L) 1 on real tokens,
    ``mm_token_type_ids`` with 0; ``cu_seqlens`` stays a list of each row's own boundaries (for a block
    mask per row: :func:`block_causal_mask`); images are concatenated in row order, as in
    :func:`collate_packed`.
    """
    from packer.tokens import IGNORE_INDEX

    lengths = [int(b["input_ids"].numel()) for b in batch]
    width = max(lengths)

    def pad(key: str, value: int) -> torch.Tensor:
        rows = [torch.nn.functional.pad(b[key], (0, width - n), value=value) for b, n in zip(batch, lengths)]
        return torch.stack(rows, dim=-2)

    out: dict[str, Any] = {
        "input_ids": pad("input_ids", pad_id),
        "labels": pad("labels", IGNORE_INDEX),
        "position_ids": pad("position_ids", 0),
        "attention_mask": torch.stack([(torch.arange(width) < n).to(torch.int64) for n in lengths]),
        "cu_seqlens": [b["cu_seqlens"] for b in batch],
        "max_seqlen": max(b["max_seqlen"] for b in batch),
        "ids": [b["ids"] for b in batch],
        "sources": [b["sources"] for b in batch],
    }
    if all("mm_token_type_ids" in b for b in batch):
        out["mm_token_type_ids"] = pad("mm_token_type_ids", 0)
    return _with_images(out, batch)
