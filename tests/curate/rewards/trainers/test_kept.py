"""kept.jsonl of a real rl-filter run -> datasets.Dataset -> TRL reward functions agree with the filter."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

datasets = pytest.importorskip("datasets", reason="datasets is not installed (pip install 'curate[trl]')")

from curate.rl.config import RlFilterConfig
from curate.core.records import IMAGE_TOKEN  # noqa: E402
from curate.rewards.trainers.trl import accuracy_reward, format_reward, kept_dataset  # noqa: E402
from curate.rewards.prompts import DEFAULT_TEMPLATES  # noqa: E402
from curate.rl.filter import rl_filter  # noqa: E402


def _answer(p: dict, right: bool) -> str:
    gold = p["answer"] if right else ("Z" if p["answer_type"] == "multiple-choice" else "99999")
    if p["prompt_type"] == "think":
        return "<think>" + "Let me count them one by one. " * 4 + f"</think><answer>{gold}</answer>"
    return f"<answer>{gold}</answer>"


@pytest.fixture(scope="module")
def filtered(sample_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    tmp = tmp_path_factory.mktemp("kept")
    prompts = [json.loads(x) for x in (sample_data / "rl" / "prompts.jsonl").read_text().splitlines()]
    chosen = [p for p in prompts if p["answer_type"] in ("number", "multiple-choice")][:6]
    src = sample_data / "rl" / "prompts.jsonl"
    picked = tmp / "prompts.jsonl"
    picked.write_text("".join(json.dumps(p) + "\n" for p in chosen))
    rows = [{"id": p["id"], "response": _answer(p, right=j < (2 if i % 3 else 4))}
            for i, p in enumerate(chosen) for j in range(4)]
    (tmp / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # images are relative to the input's folder: rl-filter reads them there, the dataset is told where
    for p in chosen:
        for im in p.get("images") or [p.get("image")]:
            (tmp / im).parent.mkdir(parents=True, exist_ok=True)
            (tmp / im).write_bytes((src.parent / im).read_bytes())
    rl_filter([str(picked)], RlFilterConfig(out=tmp / "out", backend={"rollouts": str(tmp / "answers.jsonl")}, n=4,
                                            plot=False))
    return tmp, chosen


def test_kept_rows_become_the_prompts_rl_filter_sampled(filtered: tuple[Path, list[dict]]) -> None:
    tmp, chosen = filtered
    kept = [json.loads(x) for x in (tmp / "out" / "kept.jsonl").read_text().splitlines()]
    assert 0 < len(kept) < len(chosen)  # the always-right prompts are too easy
    ds = kept_dataset(tmp / "out" / "kept.jsonl", image_root=tmp)
    assert len(ds) == len(kept)
    assert set(ds.column_names) >= {"prompt", "images", "answer", "answer_type", "prompt_type", "reward", "id"}
    for row, raw in zip(ds, kept):
        assert row["id"] == raw["id"] and row["answer"] == raw["answer"] and row["answer_type"] == raw["answer_type"]
        paths = raw.get("images") or [raw["image"]]
        assert len(row["images"]) == len(paths)
        for img, rel in zip(row["images"], paths):
            from PIL import Image

            assert img.size == Image.open(tmp / rel).size
        parts = row["prompt"][0]["content"]
        assert sum(1 for p in parts if p["type"] == "image") == len(paths)
        text = "".join(IMAGE_TOKEN if p["type"] == "image" else p["text"] for p in parts)
        assert text == DEFAULT_TEMPLATES[raw["prompt_type"]].replace("{problem}", raw["problem"])


def test_training_rewards_equal_the_filter_scores(filtered: tuple[Path, list[dict]]) -> None:
    tmp, _ = filtered
    ds = kept_dataset(tmp / "out" / "kept.jsonl", image_root=tmp)
    rollouts = pq.read_table(tmp / "out" / "rollouts.parquet").to_pylist()
    by_id = {r["id"]: r for r in ds}
    mine = [r for r in rollouts if r["id"] in by_id]
    cols = {k: [by_id[r["id"]][k] for r in mine] for k in ("answer", "answer_type", "prompt_type", "reward")}
    completions = [[{"role": "assistant", "content": r["response"]}] for r in mine]
    assert accuracy_reward(prompts=[None] * len(mine), completions=completions, **cols) == [r["accuracy"] for r in mine]
    assert format_reward(prompts=[None] * len(mine), completions=completions, **cols) == [r["format"] for r in mine]
    assert {r["accuracy"] for r in mine} == {0.0, 1.0}


def test_bad_rows_are_left_out_with_a_reason(filtered: tuple[Path, list[dict]], tmp_path: Path) -> None:
    tmp, chosen = filtered
    good = (tmp / "out" / "kept.jsonl").read_text()
    bad = [
        "{not json",
        json.dumps({**chosen[0], "id": "gone", "images": ["images/missing.png"]}),
        json.dumps({**chosen[0], "id": "typo", "answer_type": "numbr"}),
        json.dumps({"id": "nothing"}),
    ]
    path = tmp_path / "kept.jsonl"
    path.write_text(good + "\n".join(bad) + "\n")
    skipped: list = []
    ds = kept_dataset(path, image_root=tmp, skipped=skipped)
    assert len(ds) == len(good.splitlines())
    assert [r for _, r, _ in skipped] == ["malformed_json", "missing_image", "record_error", "unknown_layout"]


def test_text_only_rows_have_no_images_column(tmp_path: Path) -> None:
    path = tmp_path / "kept.jsonl"
    path.write_text(json.dumps({"id": "t", "problem": "2+2?", "answer": ["4", "four"], "answer_type": "number",
                                "prompt_type": "normal", "reward": {"accuracy_ratio": 1}}) + "\n")
    ds = kept_dataset(path)
    assert "images" not in ds.column_names
    assert ds[0]["prompt"] == [{"role": "user", "content": DEFAULT_TEMPLATES["normal"].replace("{problem}", "2+2?")}]
    assert ds[0]["answer"] == ["4", "four"] and ds[0]["reward"] == {"accuracy_ratio": 1}
