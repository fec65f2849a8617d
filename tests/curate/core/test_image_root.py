"""``--image-root``: relative image paths read from a folder apart from the annotations (LLaVA's layout).

LLaVA-style instruction sets ship one JSON of annotations whose ``image`` fields
(``coco/train2017/000000033471.jpg``) are relative to an image folder given separately.
The root travels to the workers on every part, is part of the plan's hash (so a run or
cache made with another root is not reused), and leaves absolute paths and bytes alone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from curate.core.errors import UserError
from curate.core.records import BadRecord
from curate.core.shards import plan_hash, plan_shards


def llava_tree(tmp_path: Path, images: Path) -> tuple[Path, Path, list[str]]:
    """``ann/mix.json`` (three relative image paths and one absolute) and ``imgs/coco/train2017/``."""
    root = tmp_path / "imgs"
    (root / "coco" / "train2017").mkdir(parents=True)
    names = sorted(p.name for p in images.glob("*.jpg"))[:3]
    for name in names:
        shutil.copy(images / name, root / "coco" / "train2017" / name)
    rows = [{"id": f"q{i}", "image": f"coco/train2017/{name}",
             "conversations": [{"from": "human", "value": "<image>\nWhat is shown?"}, {"from": "gpt", "value": "A."}]}
            for i, name in enumerate(names)]
    rows.append({"id": "abs", "image": str(images / names[0]),
                 "conversations": [{"from": "human", "value": "<image>\nAnd here?"}, {"from": "gpt", "value": "B."}]})
    (tmp_path / "ann").mkdir()
    ann = tmp_path / "ann" / "mix.json"
    ann.write_text(json.dumps(rows))
    return ann, root, names


def records_of(shards: list) -> dict[str, list]:
    out = {}
    for shard in shards:
        for rec in shard.read():
            assert not isinstance(rec, BadRecord), rec
            out[rec["id"]] = rec["images"]
    return out


def test_relative_image_paths_start_at_the_root(tmp_path: Path, sample_data: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ann, root, names = llava_tree(tmp_path, sample_data / "images")
    beside = records_of(plan_shards([ann]))
    assert beside["q0"] == [str(ann.parent / "coco" / "train2017" / names[0])]  # the file's folder: not there
    monkeypatch.chdir(tmp_path)
    shards = plan_shards([ann], image_root="imgs")  # a relative root is made absolute for the workers
    assert all(part.image_root == str(root) for shard in shards for part in shard.parts)
    rooted = records_of(shards)
    for i, name in enumerate(names):
        assert rooted[f"q{i}"] == [str(root / "coco" / "train2017" / name)] and Path(rooted[f"q{i}"][0]).is_file()
    assert rooted["abs"] == beside["abs"] == [str(sample_data / "images" / names[0])]
    assert plan_hash(shards) != plan_hash(plan_shards([ann]))  # runs and caches keyed by it
    assert plan_hash(shards) == plan_hash(plan_shards([ann], image_root=root))


def test_a_missing_root_is_one_line_and_a_bucket_root_stays_a_url(tmp_path: Path, sample_data: Path) -> None:
    ann, root, names = llava_tree(tmp_path, sample_data / "images")
    with pytest.raises(UserError, match="image_root .*nope: no such folder"):
        plan_shards([ann], image_root=tmp_path / "nope")
    with pytest.raises(UserError, match="image_root"):
        plan_shards([ann], image_root=ann)  # a file, not a folder
    rooted = records_of(plan_shards([ann], image_root="s3://bucket/llava/images/"))
    assert rooted["q1"] == [f"s3://bucket/llava/images/coco/train2017/{names[1]}"]
