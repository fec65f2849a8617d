"""``curate verify`` of the LLaVA-OneVision-1.5 layout (``OUT/llava-ov/``, written by ``--energon-layout llava-ov-1.5``).

The layout is that of the seed's offline packing (``examples/llava_ov_1_5/sample_packing`` of
EvolvingLMMs-Lab/LLaVA-OneVision-1.5, ``caption_pack`` mode): per packed sample a JSON ``{"images",
"prompts", "captions"}`` and ``img<i>.jpg`` members, ``.nv-meta/dataset.yaml`` naming
``aiak_training_llm.data.multimodal.PackedCaptioningSample`` and ``sample_loader.py``.
:func:`check_seed_layout` proves that it holds exactly the packed sequences of ``OUT/shards``: same
keys in the same order, prompts and captions from each sample's turns, image bytes unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

#: Folder of OUT holding the seed layout (its own Energon dataset root).
SEED_DIR = "llava-ov"
#: The sample type the seed's trainer reads offline-packed data as (aiak_training_llm/data/multimodal/flavors).
SEED_SAMPLE_TYPE = {"__module__": "aiak_training_llm.data.multimodal", "__class__": "PackedCaptioningSample"}


def seed_sample_loader_source() -> str:
    """``llava-ov/.nv-meta/sample_loader.py``: the loader the seed's ``caption_pack`` conversion writes, same fields."""
    return "\n".join([
        "# Written by `curate pack --energon-layout llava-ov-1.5` (packer/energon.py): one packed sequence ->",
        "# one PackedCaptioningSample (images, prompts, captions), as LLaVA-OneVision-1.5's offline packing.",
        "def sample_loader(sample: dict) -> dict:",
        "    data = sample['json']",
        "    images = [sample.get(f'img{i}.jpg') for i in range(len(data['images']))]",
        "    return dict(",
        "        __key__=sample['__key__'],",
        "        __restore_key__=sample['__restore_key__'],",
        "        captions=data['captions'],",
        "        prompts=data['prompts'],",
        "        images=images,",
        "    )",
        "",
        "",
        "def part_filter(part: str) -> bool:",
        "    return True",
        "",
    ])


def seed_fields(meta: dict[str, Any]) -> tuple[list[str], list[str]] | str:
    """``(prompts, captions)`` of a packed sequence in the seed layout, or why a sample does not fit it.

    The layout holds one image, one prompt and one caption per sample: every sample must be one user turn
    with one ``<image>`` and one assistant answer. The prompt is the user text without the placeholder.
    """
    prompts, captions = [], []
    for rid, messages, k in zip(meta["ids"], meta["messages"], meta["images_per_sample"]):
        roles = [m.get("role") for m in messages]
        if k != 1 or roles != ["user", "assistant"] or not isinstance(messages[0].get("content"), str) \
                or messages[0]["content"].count("<image>") != 1:
            return (f"sample {rid!r} has {k} image(s) and turns {roles}; the LLaVA-OneVision-1.5 layout holds one "
                    "image, one prompt and one caption per sample")
        prompt = messages[0]["content"].replace("<image>\n", "", 1).replace("<image>", "", 1)
        prompts.append(prompt)
        captions.append(str(messages[1]["content"]))
    return prompts, captions


def seed_dataset_definition() -> dict[str, Any]:
    """``llava-ov/.nv-meta/dataset.yaml``: the seed's sample type, sample loader and part filter."""
    return {"sample_type": dict(SEED_SAMPLE_TYPE), "part_filter": "sample_loader.py:part_filter",
            "sample_loader": "sample_loader.py:sample_loader"}



def check_seed_layout(out: str | Path, *, limit: int = 20) -> list[str]:
    """Problems of ``OUT/llava-ov`` against ``OUT/shards`` (empty: the layout holds exactly the pack)."""
    from packer.sampler import read_members, scan_tar

    root, problems = Path(out), []
    dest = root / SEED_DIR
    meta_dir = dest / ".nv-meta"
    try:
        definition = yaml.safe_load((meta_dir / "dataset.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return [f"{meta_dir / 'dataset.yaml'}: unreadable ({exc}); rerun curate pack --energon-layout llava-ov-1.5"]
    if definition != seed_dataset_definition():
        problems.append(f"{meta_dir / 'dataset.yaml'} is not the seed's definition {seed_dataset_definition()}")
    loader = meta_dir / "sample_loader.py"
    if not loader.exists() or loader.read_text(encoding="utf-8") != seed_sample_loader_source():
        problems.append(f"{loader} is missing or changed")
    for tar in sorted((root / "shards").glob("*.tar")):
        seed_tar = dest / f"pretrain-{tar.stem}.tar"
        if not seed_tar.exists():
            problems.append(f"{seed_tar} is missing (for {tar.name})")
            continue
        ours, theirs = scan_tar(str(tar)), scan_tar(str(seed_tar))
        if len(ours) != len(theirs):
            problems.append(f"{seed_tar.name}: {len(theirs)} packed samples, {tar.name} holds {len(ours)}")
            continue
        with open(tar, "rb") as a, open(seed_tar, "rb") as b:
            for i in range(len(ours)):
                mine = read_members(a, int(ours.starts[i]), int(ours.ends[i]))
                got = read_members(b, int(theirs.starts[i]), int(theirs.ends[i]))
                problem = _compare(json.loads(mine["json"]), mine, got)
                if problem:
                    problems.append(f"{seed_tar.name}: {problem}")
                if len(problems) >= limit:
                    return problems
    return problems


def _compare(meta: dict[str, Any], mine: dict[str, bytes], got: dict[str, bytes]) -> str | None:
    key = meta["key"]
    if got["__key__"].decode() != key:
        return f"sample {got['__key__'].decode()!r} where the pack has sequence {key}"
    try:
        data = json.loads(got["json"])
    except (KeyError, ValueError):
        return f"sequence {key}: no readable JSON"
    fields = seed_fields(meta)
    if isinstance(fields, str):
        return f"sequence {key}: {fields}"
    images = [f"img{i}.jpg" for i in range(len(meta["image_members"]))]
    if data != {"images": images, "prompts": fields[0], "captions": fields[1]}:
        return f"sequence {key}: JSON {sorted(data)} differs from the packed samples (images, prompts, captions)"
    for i, member in enumerate(meta["image_members"]):
        if got.get(f"img{i}.jpg") != mine.get(member):
            return f"sequence {key}: img{i}.jpg is not the bytes of its packed image {member}"
    return None
