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
boundaries. Shards are split over distributed ranks, then over data-loader
workers, so each packed sequence is read exactly once per epoch.

A compute-balanced pack (``curate pack --balance-compute --dp N``) assigns every
sequence to a step and a rank, and each of its tars holds one rank's sequences.
With ``world_size`` > 1 (it must equal the pack's ``dp``), rank ``r`` reads only its
own tars and yields, in step order (then micro-batch), exactly the sequences
assigned to it, so ranks are disjoint and every step's cost stays balanced.
Data-loader workers take turns (worker ``w`` of ``W`` builds the rank's
sequences ``w, w + W, …``), which keeps that order through a ``DataLoader``; each
worker reads the rank's tars and skips the sequences of the others.
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
from packer.tokens import TokenCounter


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


def _gopen_fsspec(url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any) -> Any:
    from curate.core.io import open_input

    return open_input(url, mode)


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

    Args:
        shards: a shard folder, glob, brace pattern (``shards/{000000..000009}.tar``) or list of paths.
        processor: the processor folder or hub id the shards were packed with (or a TokenCounter).
        rank, world_size: distributed position; by default read from ``torch.distributed`` when
            initialised, else 0 and 1.
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
                 processor: str | os.PathLike[str] | TokenCounter, *, rank: int | None = None,
                 world_size: int | None = None, check: bool = True, threads: int = 1, on_error: str = "raise",
                 limits: ImageLimits = DEFAULT_LIMITS) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
        super().__init__()
        self.threads = threads
        self.shards = expand_shards(shards)
        self.processor = processor
        self.rank, self.world_size = rank, world_size
        self.check = check
        self.on_error, self.limits = on_error, limits
        self._builder: PackedSequenceBuilder | None = None
        self._firsts: dict[str, dict[str, Any] | None] = {}  # first sequence's step/rank/dp per tar

    def _dist(self) -> tuple[int, int]:
        if self.rank is not None and self.world_size is not None:
            return self.rank, self.world_size
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    def _balanced(self, rank: int, world: int) -> list[str] | None:
        """This rank's tars of a compute-balanced pack read by ``world`` > 1 ranks, else ``None``."""
        if world == 1:
            return None
        first = self._first_meta(self.shards[0])
        if first is None or first.get("step") is None:
            return None
        if int(first["dp"]) != world:
            raise ValueError(f"{self.shards[0]}: packed for --dp {first['dp']} data-parallel ranks, read with "
                             f"world_size {world}; repack with --dp {world} (or read it with world_size {first['dp']})")
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside 0..{world - 1}")
        return [path for path in self.shards if (self._first_meta(path) or {}).get("rank") == rank]

    def _first_meta(self, path: str) -> dict[str, Any] | None:
        if path not in self._firsts:
            meta = first_meta(path)
            self._firsts[path] = None if meta is None else {k: meta.get(k) for k in ("step", "rank", "dp")}
        return self._firsts[path]

    def my_shards(self) -> list[str]:
        """The shards this rank and data-loader worker reads (rank-major, then worker).

        For a compute-balanced pack read by several ranks: all of this rank's tars
        (every worker reads them and keeps its turn of the sequences).
        """
        rank, world = self._dist()
        balanced = self._balanced(rank, world)
        if balanced is not None:
            return balanced
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        mine = self.shards[rank::world]
        return mine[worker::workers]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        import webdataset as wds

        if torch.utils.data.get_worker_info() is not None:
            cap_threads(self.threads)  # a DataLoader worker: before the processor loads
        if self._builder is None:
            self._builder = PackedSequenceBuilder(self.processor, check=self.check, limits=self.limits,
                                                  on_error=self.on_error)
        rank, world = self._dist()
        balanced = self._balanced(rank, world) is not None
        mine = self.my_shards()
        if not mine:
            return
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None and balanced else (0, 1)
        from webdataset.gopen import gopen_schemes

        for url in mine:  # shards in object storage are read through fsspec
            if is_url(url):
                gopen_schemes[url.split("://", 1)[0]] = _gopen_fsspec
        dataset = wds.WebDataset(mine, shardshuffle=False, nodesplitter=None, workersplitter=None, empty_check=False)
        for i, sample in enumerate(dataset):
            if i % workers != worker:
                continue
            meta = json.loads(sample["json"])
            if balanced and meta.get("rank") != rank:
                raise ValueError(f"sequence {meta.get('key')} is assigned to rank {meta.get('rank')}, read by rank {rank}")
            images = [sample[name] for name in meta["image_members"]]
            built = self._builder.build(meta, images, shard=str(sample.get("__url__", "")))
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
    with_images = [b for b in batch if "pixel_values" in b]
    if with_images:
        out["pixel_values"] = torch.cat([b["pixel_values"] for b in with_images])
        if all("image_grid_thw" in b for b in with_images):
            out["image_grid_thw"] = torch.cat([b["image_grid_thw"] for b in with_images])
    return out
