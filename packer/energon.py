"""Megatron-Energon output: a ``curate pack`` folder read by the Megatron training stack as it is.

:func:`prepare_energon` turns a pack output folder ``OUT`` into an Energon dataset
whose root is ``OUT`` itself (the tars stay in ``OUT/shards/``):

* Energon's own preparation (``BaseWebdatasetFactory.prepare_dataset``, what
  ``energon prepare`` runs) indexes ``shards/*.tar`` and writes
  ``OUT/.nv-meta/.info.json``, ``split.yaml``, ``index.sqlite``, ``index.uuid``,
  and a ``.tar.idx`` beside each tar; the train/val/test split is whole shards in
  order, as many per split as the user's ratio gives (:func:`split_counts`);
* we add ``OUT/.nv-meta/dataset.yaml`` naming the sample type
  :class:`PackedSequenceSample` and the sample loader ``.nv-meta/sample_loader.py``
  (the source of :func:`sample_loader` and :func:`part_filter` below), which turn
  the member group of one packed sequence into ONE sample: its images (original
  bytes), per-sample messages, token counts, ``cu_seqlens``, ids and sources.
  ``decoder: null`` keeps the image bytes undecoded, whatever task encoder reads them.

:class:`PackedTaskEncoder` is the Energon counterpart of
:class:`packer.loader.PackedDataset`: ``encode_sample`` calls the same
:class:`packer.loader.PackedSequenceBuilder`, so a sequence read through Energon
gives exactly the tensors ``PackedDataset`` gives; ``batch`` concatenates packed
sequences with :func:`packer.loader.collate_packed` (one varlen batch).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from megatron.energon import Sample, TaskEncoder, stateless
from megatron.energon.edataclass import edataclass
from megatron.energon.epathlib import EPath
from megatron.energon.errors import FatalSampleError
from megatron.energon.flavors.webdataset import BaseWebdatasetFactory
from megatron.energon.flavors.webdataset.config import MAIN_FOLDER_NAME

from curate.core.errors import UserError
from curate.core.io import atomic_open, read_json
from packer.config import SPLITS, energon_here, parse_split_ratio  # noqa: F401 (parse_split_ratio re-exported)
from packer.loader import PackedSequenceBuilder, ProcessorDrift, SampleError, collate_packed
from packer.tokens import TokenCounter
from packer.verify_seed import SEED_DIR, seed_dataset_definition, seed_fields, seed_sample_loader_source

DATASET_YAML = "dataset.yaml"
SAMPLE_LOADER_FILE = "sample_loader.py"


@edataclass
class PackedSequenceSample(Sample):
    """One packed sequence of a ``curate pack`` shard, as Energon loads it.

    Per-sample lists (``ids``, ``sources``, ``messages``, ``tokens``,
    ``images_per_sample``, ``image_tokens``) have one entry per packed sample, in
    order; ``images`` holds the original bytes of all images in order (named
    ``image_members`` in the tar, with ``image_grids`` their ``[t, h, w]`` grids).
    """

    #: Sample ids, in packing order.
    ids: list[str]
    #: Source of each sample.
    sources: list[str]
    #: Canonical chat messages of each sample (``<image>`` placeholders in the text).
    messages: list[list[dict[str, Any]]]
    #: Token count of each sample (text + image tokens, chat template included).
    tokens: list[int]
    #: Sample boundaries: 0, then the running sum of ``tokens``.
    cu_seqlens: list[int]
    #: Number of images of each sample.
    images_per_sample: list[int]
    #: Tokens of each image of each sample.
    image_tokens: list[list[int]]
    #: Grid ``[t, h, w]`` of every image, in order.
    image_grids: list[list[int]]
    #: Tar member suffixes of the images (``img0.jpg``, ...), in order.
    image_members: list[str]
    #: Original bytes of every image, in order (not decoded).
    images: list[bytes]
    #: Context length the sequence was packed for.
    ctx: int
    #: Fingerprint of the processor the sequence was packed with.
    processor: str

    def to_meta(self) -> dict[str, Any]:
        """The shard JSON of this sequence, as :meth:`PackedSequenceBuilder.build` takes it."""
        return {"key": self.__key__, "ids": self.ids, "sources": self.sources, "messages": self.messages,
                "tokens": self.tokens, "cu_seqlens": self.cu_seqlens, "images_per_sample": self.images_per_sample,
                "image_tokens": self.image_tokens, "image_grids": self.image_grids,
                "image_members": self.image_members, "ctx": self.ctx, "processor": self.processor}


# --- written verbatim into OUT/.nv-meta/sample_loader.py (standard library only) -------------------

def sample_loader(raw: dict) -> dict:
    """Fields of a PackedSequenceSample from the tar members of one packed sequence."""
    meta = raw["json"]
    if isinstance(meta, (bytes, bytearray)):
        meta = json.loads(meta)
    names = list(meta["image_members"])
    missing = [name for name in names if name not in raw]
    if missing:
        raise ValueError(f"sequence {meta.get('key')}: image members {missing} are missing from the tar")
    return dict(
        ids=list(meta["ids"]),
        sources=list(meta["sources"]),
        messages=list(meta["messages"]),
        tokens=[int(t) for t in meta["tokens"]],
        cu_seqlens=[int(c) for c in meta["cu_seqlens"]],
        images_per_sample=[int(k) for k in meta["images_per_sample"]],
        image_tokens=[[int(t) for t in per] for per in meta["image_tokens"]],
        image_grids=[[int(v) for v in grid] for grid in meta["image_grids"]],
        image_members=names,
        images=[raw[name] for name in names],
        ctx=int(meta["ctx"]),
        processor=str(meta.get("processor") or ""),
    )


def part_filter(part: str) -> bool:
    """Load the sequence JSON and its images (members ``img<j>.<ext>``)."""
    return part == "json" or part.startswith("img")

# ----------------------------------------------------------------------------------------------------


def sample_loader_source() -> str:
    """The content of ``.nv-meta/sample_loader.py``: :func:`sample_loader` and :func:`part_filter`."""
    return ("# Written by `curate energon-prepare` (packer/energon.py): one packed sequence -> one\n"
            "# packer.energon.PackedSequenceSample. Standard library only.\n"
            "import json\n\n\n"
            + inspect.getsource(sample_loader) + "\n\n" + inspect.getsource(part_filter))


def dataset_definition() -> dict[str, Any]:
    """The content of ``.nv-meta/dataset.yaml``."""
    return {
        "sample_type": {"__module__": PackedSequenceSample.__module__, "__class__": PackedSequenceSample.__name__},
        "sample_loader": f"{SAMPLE_LOADER_FILE}:sample_loader",
        "part_filter": f"{SAMPLE_LOADER_FILE}:part_filter",
        # images stay original bytes: the processor decodes them (as packer.loader does)
        "decoder": None,
    }


def split_counts(shards: int, ratio: Sequence[float]) -> list[int]:
    """Shards per split for train/val/test weights ``ratio`` (largest remainder, ties to train first).

    Every split with a positive weight gets at least one shard; raises UserError when there are
    too few shards for that.
    """
    total = float(sum(ratio))
    exact = [shards * w / total for w in ratio]
    counts = [int(x) for x in exact]
    order = sorted(range(len(ratio)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:shards - sum(counts)]:
        counts[i] += 1
    for i, weight in enumerate(ratio):
        if weight > 0 and counts[i] == 0:
            j = max(range(len(ratio)), key=lambda k: (counts[k], -k))
            if counts[j] <= 1:
                wanted = [name for name, w in zip(SPLITS, ratio) if w > 0]
                raise UserError(f"--split-ratio {','.join(f'{w:g}' for w in ratio)}: {shards} shard(s) cannot be split "
                                f"into {', '.join(wanted)} (splits are whole shards); re-pack with a smaller "
                                "--sequences-per-shard, or use --split-ratio 1,0,0")
            counts[j] -= 1
            counts[i] += 1
    return counts


def _exact_pattern(names: Sequence[str]) -> str:
    """A regex (that survives Energon's brace expansion) matching exactly ``names``."""
    if not names:
        return "(?!)"
    literal = ["".join(c if c.isalnum() or c == "/" else f"[{c}]" for c in name) for name in names]
    return "^(?:" + "|".join(literal) + ")$"


def _tar_has_members(path: Path) -> bool:
    try:
        with tarfile.open(path) as tar:
            return tar.next() is not None
    except (tarfile.TarError, OSError) as exc:
        detail = " ".join(str(exc).split())
        raise UserError(f"{path}: not a readable tar ({detail}); check the folder with curate verify") from None


def prepare_energon(out: str | os.PathLike[str], *, split_ratio: str | Sequence[float] = "1,0,0",
                    workers: int = 1) -> dict[str, Any]:
    """Make the ``curate pack`` output folder ``out`` an Energon dataset (see the module docstring).

    Args:
        out: a finished ``curate pack`` output folder (with ``stats.json`` and ``shards/``).
        split_ratio: train,val,test weights (``"8,1,1"``); whole shards are assigned in shard order,
            train first (see :func:`split_counts`).
        workers: processes indexing the tars.

    Returns:
        What was prepared: ``path``, ``shards``, ``sequences``, ``splits`` (split → shard names),
        ``files`` (written into ``.nv-meta``).

    Raises:
        UserError: ``out`` is not a finished pack folder with shards, a bad split ratio, or too
            few shards for the splits asked.
    """
    energon_here("OUT", out)
    root = Path(out)
    ratio = parse_split_ratio(split_ratio)
    stats_path = root / "stats.json"
    if not stats_path.exists():
        raise UserError(f"{root}: no stats.json; run curate pack --out {root} first")
    stats = read_json(stats_path)
    if stats.get("stage") != "pack":
        raise UserError(f"{stats_path} is from stage {stats.get('stage')!r}, not pack")
    if stats.get("sequences") is None:
        raise UserError(f"{root} was packed with --plan-only: there are no shards; pack without --plan-only")
    tars = sorted((root / "shards").glob("*.tar"))
    tars = [p for p in tars if _tar_has_members(p)]
    if not tars:
        raise UserError(f"{root}/shards holds no packed sequences; nothing to prepare")
    names = [p.relative_to(root).as_posix() for p in tars]
    counts = split_counts(len(names), ratio)
    bounds = [0, counts[0], counts[0] + counts[1], len(names)]
    patterns = [(split, _exact_pattern(names[bounds[i]:bounds[i + 1]])) for i, split in enumerate(SPLITS)]
    meta_dir = root / MAIN_FOLDER_NAME
    meta_dir.mkdir(exist_ok=True)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # Energon prints its progress
            BaseWebdatasetFactory.prepare_dataset(
                EPath(root), names, split_parts_patterns=patterns, shuffle_seed=None,
                workers=max(1, min(workers, len(names))))
    except AssertionError as exc:  # Energon asserts on a shard it could not read
        raise UserError(f"{root}: Energon could not index the shards ({exc}); check them with "
                        f"curate verify {root}") from None
    with atomic_open(meta_dir / SAMPLE_LOADER_FILE, "w") as fh:
        fh.write(sample_loader_source())
    with atomic_open(meta_dir / DATASET_YAML, "w") as fh:
        fh.write("# Written by `curate energon-prepare`: one packed sequence per sample (packer/energon.py).\n")
        yaml.safe_dump(dataset_definition(), fh, sort_keys=False)
    info = read_json(meta_dir / ".info.json")
    with open(meta_dir / "split.yaml", encoding="utf-8") as fh:
        split_parts = yaml.safe_load(fh)["split_parts"]
    return {
        "path": str(root),
        "shards": len(names),
        "sequences": int(sum(info["shard_counts"].values())),
        "splits": {k: list(v) for k, v in split_parts.items()},
        "files": sorted(p.name for p in meta_dir.iterdir()),
    }


class PackedTaskEncoder(TaskEncoder[PackedSequenceSample, dict, dict, dict]):
    """Energon task encoder of ``curate pack`` datasets: the counterpart of :class:`packer.loader.PackedDataset`.

    ``encode_sample`` gives the tensors of :meth:`PackedSequenceBuilder.build`
    (``input_ids``, ``labels``, ``position_ids`` reset per sample, ``cu_seqlens``,
    ``max_seqlen``, ``pixel_values``, ``image_grid_thw``, ``mm_token_type_ids``,
    ``ids``, ``sources``) plus Energon's ``__key__`` and ``__restore_key__``;
    ``batch`` concatenates the sequences of a batch with
    :func:`packer.loader.collate_packed` (``cu_seqlens`` shifted, images concatenated),
    so ``batch_size=1`` yields one packed sequence per step unchanged.
    A processor that no longer reproduces the stored counts stops the loader
    (:class:`FatalSampleError` from :class:`ProcessorDrift`) instead of being skipped.

    Args:
        processor: the processor folder or hub id the shards were packed with (or a TokenCounter).
        min_pixels, max_pixels: the ``--min-pixels``/``--max-pixels`` given to ``curate pack``, if any.
        check: verify processor fingerprint, token counts and image grids (recommended).
    """

    #: Images reach the task encoder as their original bytes.
    decoder = None

    def __init__(self, processor: str | os.PathLike[str] | TokenCounter, *, min_pixels: int | None = None,
                 max_pixels: int | None = None, check: bool = True) -> None:
        self.processor = processor if isinstance(processor, TokenCounter) else str(processor)
        self.min_pixels, self.max_pixels = min_pixels, max_pixels
        self.check = check
        self._builder: PackedSequenceBuilder | None = None

    @classmethod
    def from_pack(cls, out: str | os.PathLike[str], *, processor: str | os.PathLike[str] | None = None,
                  check: bool = True) -> PackedTaskEncoder:
        """The task encoder of the pack folder ``out``: its processor and pixel settings from ``OUT/stats.json``.

        Args:
            out: the ``curate pack`` output folder (the Energon dataset path).
            processor: the processor to load instead of the recorded ``--processor`` (e.g. the
                same processor at another path); its fingerprint is still checked.
            check: verify processor fingerprint, token counts and image grids (recommended).
        """
        path = Path(out) / "stats.json"
        if not path.exists():
            raise UserError(f"{out}: no stats.json; pass the curate pack output folder")
        settings = read_json(path).get("settings", {})
        processor = processor or settings.get("processor_path")
        if not processor:
            raise UserError(f"{path} records no processor; pass processor=")
        return cls(processor, min_pixels=settings.get("min_pixels"), max_pixels=settings.get("max_pixels"),
                   check=check)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_builder": None}

    @property
    def builder(self) -> PackedSequenceBuilder:
        """The sequence builder, made once per process (data-loader worker)."""
        if self._builder is None:
            counter = self.processor if isinstance(self.processor, TokenCounter) else TokenCounter(
                self.processor, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
            self._builder = PackedSequenceBuilder(counter, check=self.check)
        return self._builder

    @stateless
    def encode_sample(self, sample: PackedSequenceSample) -> dict[str, Any]:
        """The training tensors of one packed sequence."""
        try:
            out = self.builder.build(sample.to_meta(), sample.images)
        except (ProcessorDrift, SampleError) as exc:
            raise FatalSampleError(f"{sample.__key__}: {exc}") from exc
        out["__key__"] = sample.__key__
        out["__restore_key__"] = sample.__restore_key__
        return out

    @stateless
    def batch(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        """One varlen batch of the packed sequences (see :func:`packer.loader.collate_packed`)."""
        out = collate_packed(samples)
        out["__key__"] = [s["__key__"] for s in samples]
        out["__restore_key__"] = ()
        return out


__all__ = ["PackedSequenceSample", "PackedTaskEncoder", "prepare_energon", "parse_split_ratio", "split_counts",
           "sample_loader", "part_filter", "sample_loader_source", "dataset_definition"]


# --- LLaVA-OneVision-1.5's own offline-packing layout (`curate pack --energon ... --energon-layout llava-ov-1.5`) ---

def write_seed_layout(out: str | os.PathLike[str], *, split_ratio: str | Sequence[float] = "1,0,0",
                      workers: int = 1) -> dict[str, Any]:
    """Write ``OUT/llava-ov/``: the packed sequences of ``OUT/shards`` in LLaVA-OneVision-1.5's offline-packing layout.

    One tar ``pretrain-NNNNNN.tar`` per pack shard, one member group per packed sequence (same key and
    order): ``KEY.json`` ``{"images", "prompts", "captions"}`` (one entry per packed sample; ``images``
    names the members) and ``KEY.img<i>.jpg`` (the original bytes of sample i's image, named ``.jpg``
    whatever their format, as the seed's conversion does). ``.nv-meta/dataset.yaml`` names the sample type
    ``aiak_training_llm.data.multimodal.PackedCaptioningSample`` and ``sample_loader.py``; Energon's
    preparation indexes the tars (train/val/test whole shards, ``split_ratio``).

    Raises:
        UserError: a sample that is not one image, one prompt and one answer (named), or no shards.
    """
    from packer.sampler import pack_index, read_members

    root = Path(out)
    tars = sorted((root / "shards").glob("*.tar"))
    if not tars:
        raise UserError(f"{root}/shards holds no tars; run curate pack --out {root} first")
    dest = root / SEED_DIR
    if dest.exists():
        import shutil
        shutil.rmtree(dest)
    (dest / MAIN_FOLDER_NAME).mkdir(parents=True)
    index = pack_index([str(t) for t in tars], scan=True)  # every member is read anyway: trust no index file
    names = []
    for t, tar in enumerate(tars):
        name = f"pretrain-{tar.stem}.tar"
        names.append(name)
        with open(tar, "rb") as fh, open(dest / name, "wb") as raw, \
                tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as sink:
            for pos in np.flatnonzero(index.tar_of == t).tolist():
                members = read_members(fh, int(index.starts[pos]), int(index.ends[pos]))
                meta = json.loads(members["json"])
                fields = seed_fields(meta)
                if isinstance(fields, str):
                    raise UserError(f"{tar}: sequence {meta['key']}: {fields}; pack only such records for this "
                                    "layout, or use --energon-layout curate")
                prompts, captions = fields
                images = [f"img{i}.jpg" for i in range(len(meta["image_members"]))]
                payload = json.dumps({"images": images, "prompts": prompts, "captions": captions},
                                     ensure_ascii=False).encode("utf-8")
                _add(sink, f"{meta['key']}.json", payload)
                for i, member in enumerate(meta["image_members"]):
                    _add(sink, f"{meta['key']}.img{i}.jpg", members[member])
    counts = split_counts(len(names), parse_split_ratio(split_ratio))
    bounds = [0, counts[0], counts[0] + counts[1], len(names)]
    patterns = [(split, _exact_pattern(names[bounds[i]:bounds[i + 1]])) for i, split in enumerate(SPLITS)]
    with contextlib.redirect_stdout(io.StringIO()):
        BaseWebdatasetFactory.prepare_dataset(EPath(dest), names, split_parts_patterns=patterns, shuffle_seed=None,
                                              workers=max(1, min(workers, len(names))))
    with atomic_open(dest / MAIN_FOLDER_NAME / SAMPLE_LOADER_FILE, "w") as fh:
        fh.write(seed_sample_loader_source())
    with atomic_open(dest / MAIN_FOLDER_NAME / DATASET_YAML, "w") as fh:
        yaml.safe_dump(seed_dataset_definition(), fh, sort_keys=False)
    return {"path": str(dest), "shards": len(names), "sequences": len(index)}


def _add(sink: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid, info.uname, info.gname = len(data), 0, 0o644, 0, 0, "", ""
    sink.addfile(info, io.BytesIO(data))
