"""curate rl-filter: selection computed by hand on a rollouts file, and the transformers backend end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.rl.config import RlFilterConfig
from curate.core.errors import UserError
from curate.rl.filter import rl_filter
from curate.rl.selection import pass_at_k


def test_pass_at_k_values() -> None:
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    assert pass_at_k(16, 4, 16) == 1.0 and pass_at_k(16, 0, 16) == 0.0
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(8, 8, 1) == 1.0


def tagged(answer: str, style: str) -> str:
    return f"<think>look</think><answer>{answer}</answer>" if style == "think" else f"<answer>{answer}</answer>"


def iou(a: list[float], b: list[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    return inter / (area(a) + area(b) - inter)


@pytest.fixture(scope="module")
def designed(sample_data, tmp_path_factory) -> tuple[Path, Path, dict[str, str], list[dict]]:
    """4 answers per prompt with a chosen number of right ones; box answers shifted for known IoUs."""
    prompts = [json.loads(l) for l in (sample_data / "rl" / "prompts.jsonl").read_text().splitlines()]
    tmp = tmp_path_factory.mktemp("rl")
    rows, expected = [], {}
    exact = [p for p in prompts if p["answer_type"] in ("number", "multiple-choice", "boolean")][:12]
    for i, p in enumerate(exact):
        right = i % 5  # 0..4 right answers out of 4 (4 counts as 4)
        right = min(right, 4)
        wrong = "Z" if p["answer_type"] == "multiple-choice" else ("no" if p["answer"] == "yes" else
                                                                    "yes" if p["answer_type"] == "boolean" else "99999")
        for j in range(4):
            rows.append({"id": p["id"], "response": tagged(p["answer"] if j < right else wrong, p["prompt_type"])})
        mean = right / 4
        expected[p["id"]] = "too_hard" if mean <= 0.0 else ("too_easy" if mean >= 0.6 else "kept")
    boxes = [p for p in prompts if p["source"] == "shapes_ground"][:4]
    for k, p in enumerate(boxes):
        gold = json.loads(p["answer"])
        w = gold[2] - gold[0]
        shifts = [[0, 0.1, 0.5, 2.0], [0, 0, 0, 0.2], [0.5, 2.0, 2.0, 2.0], [0.3, 0.3, 2.0, 2.0]][k]
        total = 0.0
        for s in shifts:
            pred = [gold[0] + s * w, gold[1], gold[2] + s * w, gold[3]]
            total += iou(gold, pred)
            rows.append({"id": p["id"], "response": tagged(json.dumps([round(x, 3) for x in pred]), p["prompt_type"])})
        # V-Triune-style rule for this source: sum of IoU over the samples within [1.5, 3.5], inclusive
        expected[p["id"]] = "kept" if 1.5 <= total <= 3.5 else ("too_hard" if total < 1.5 else "too_easy")
    chosen = {p["id"] for p in exact + boxes}
    src = tmp / "prompts.jsonl"
    src.write_text("".join(json.dumps(p) + "\n" for p in prompts if p["id"] in chosen))
    # images are relative to the original folder: point them there
    fixed = []
    for line in src.read_text().splitlines():
        rec = json.loads(line)
        rec["images"] = [str(sample_data / "rl" / im) for im in (rec.pop("images", None) or [rec.pop("image")])]
        fixed.append(json.dumps(rec))
    src.write_text("\n".join(fixed) + "\n")
    rollouts = tmp / "answers.jsonl"
    rollouts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    thresholds = tmp / "th.yaml"
    thresholds.write_text("sources:\n  shapes_ground: {metric: reward_sum, band: [1.5, 3.5], inclusive: true, "
                          "pass_threshold: 0.5}\n")
    return src, rollouts, expected, thresholds


def test_kept_set_equals_the_hand_computed_one(designed, tmp_path) -> None:
    src, rollouts, expected, thresholds = designed
    stats = rl_filter([str(src)], RlFilterConfig(out=tmp_path / "o", backend={"rollouts": str(rollouts)}, n=4,
                                                 thresholds=thresholds))
    kept = [json.loads(l) for l in (tmp_path / "o" / "kept.jsonl").read_text().splitlines()]
    assert {r["id"] for r in kept} == {i for i, d in expected.items() if d == "kept"}
    assert stats["kept"] == sum(d == "kept" for d in expected.values())
    prompts = {r["id"]: r for r in pq.read_table(tmp_path / "o" / "prompts.parquet").to_pylist()}
    for rid, decision in expected.items():
        got = prompts[rid]["decision"] if prompts[rid]["decision"] != "dropped" else prompts[rid]["reason"]
        assert got == decision, (rid, prompts[rid])
    # kept records keep their RL layout and gain their metrics
    assert all({"problem", "answer", "answer_type", "pass_at_1", "pass_at_n", "mean_reward"} <= r.keys() for r in kept)
    assert stats["records_in"] == stats["kept"] + sum(stats["dropped"].values()) + sum(stats["errored"].values())
    rollouts_table = pq.read_table(tmp_path / "o" / "rollouts.parquet")
    assert rollouts_table.num_rows == 4 * len(expected)
    assert (tmp_path / "o" / "rl_filter.png").stat().st_size > 5000
    assert set(stats["per_source"]) == {r["source"] for r in prompts.values()}


def test_cli_band_and_gap_flags_change_the_selection(designed, tmp_path) -> None:
    src, rollouts, expected, _ = designed
    wide = rl_filter([str(src)], RlFilterConfig(out=tmp_path / "wide", backend={"rollouts": str(rollouts)}, n=4,
                                                band=(-0.1, 1.1)))
    gap = rl_filter([str(src)], RlFilterConfig(out=tmp_path / "gap", backend={"rollouts": str(rollouts)}, n=4,
                                               band=(-0.1, 1.1), min_gap=0.5))
    prompts = pq.read_table(tmp_path / "gap" / "prompts.parquet").to_pylist()
    # with pass@N - pass@1 = 1 - c/n for 0 < c < n (else 0), min_gap 0.5 keeps exactly 1 <= c <= n/2
    assert {p["id"] for p in prompts if p["decision"] == "kept"} == \
        {p["id"] for p in prompts if 1 <= p["passes"] <= 2}
    assert gap["kept"] < wide["kept"] == wide["records_in"]
    with pytest.raises(UserError, match="band"):
        rl_filter([str(src)], RlFilterConfig(out=tmp_path / "bad", backend={"rollouts": str(rollouts)}, n=4,
                                             band=(0.5, 0.2)))


def test_transformers_backend_end_to_end(tiny_vlm_dir, sample_data, tmp_path) -> None:
    prompts = [json.loads(l) for l in (sample_data / "rl" / "prompts.jsonl").read_text().splitlines()]
    chosen = prompts[::12]
    src = tmp_path / "p.jsonl"
    def absolute(p: dict) -> dict:
        images = p.get("images") or [p["image"]]
        return {**{k: v for k, v in p.items() if k != "image"}, "images": [str(sample_data / "rl" / i) for i in images]}

    src.write_text("".join(json.dumps(absolute(p)) + "\n" for p in chosen))
    stats = rl_filter([str(src)], RlFilterConfig(out=tmp_path / "o",
                                                 backend={"model": str(tiny_vlm_dir), "device": "cpu"}, n=3,
                                                 max_new_tokens=8, band=(-1.0, 2.0)))
    rollouts = pq.read_table(tmp_path / "o" / "rollouts.parquet").to_pylist()
    assert len(rollouts) == 3 * len(chosen)
    assert {r["id"] for r in rollouts} == {p["id"] for p in chosen}
    assert any(r["truncated"] for r in rollouts)  # 8 new tokens cut most answers of the tiny model
    assert stats["kept"] == len(chosen)  # the band admits every prompt
    o = stats["overall"]
    assert o["responses"] == 3 * len(chosen) and 0.0 < o["truncation_rate"] <= 1.0
    # a rerun reads the journal: nothing is generated again and the outputs are identical
    first = (tmp_path / "o" / "rollouts.parquet").read_bytes()
    journal = list((tmp_path / "o" / "_journal" / "rl-filter").glob("*.jsonl"))
    assert journal and sum(len(p.read_text().splitlines()) for p in journal) == len(chosen)
    for marker in (tmp_path / "o" / "_shards" / "rl-filter").glob("0*.json"):
        marker.unlink()  # as if killed before the shard finished
    rl_filter([str(src)], RlFilterConfig(out=tmp_path / "o", backend={"model": str(tiny_vlm_dir), "device": "cpu"}, n=3,
                                         max_new_tokens=8, band=(-1.0, 2.0)))
    assert (tmp_path / "o" / "rollouts.parquet").read_bytes() == first
    assert sum(len(p.read_text().splitlines()) for p in journal) == len(chosen)  # nothing regenerated


@pytest.mark.server
@pytest.mark.slow
def test_endpoint_backend_against_transformers_serve(tiny_vlm_server, sample_data, tmp_path) -> None:
    """rl-filter through a real OpenAI-compatible server (transformers serve) of the tiny model."""
    prompts = [json.loads(l) for l in (sample_data / "rl" / "prompts.jsonl").read_text().splitlines()][::24]
    src = tmp_path / "p.jsonl"
    src.write_text("".join(json.dumps({**{k: v for k, v in p.items() if k != "image"},
                                       "images": [str(sample_data / "rl" / i) for i in (p.get("images") or [p["image"]])]})
                           + "\n" for p in prompts))
    backend = {"endpoint": tiny_vlm_server.url, "served_model": tiny_vlm_server.model, "concurrency": 2}
    stats = rl_filter([str(src)], RlFilterConfig(out=tmp_path / "o", backend=backend, n=3, max_new_tokens=8,
                                                 band=(-1.0, 2.0)))
    rollouts = pq.read_table(tmp_path / "o" / "rollouts.parquet").to_pylist()
    # the server answers one choice per call: the backend asked again until each prompt had 3
    assert len(rollouts) == 3 * len(prompts) and stats["errored"] == {}
    assert stats["kept"] == len(prompts)


def test_kept_rows_point_at_their_images(sample_data, tmp_path) -> None:
    """kept.jsonl lies in OUT, not beside the input: its rows carry the image paths as they were read (here through
    --image-root), so the next step (pack, a trainer) finds every image."""
    from curate.core.records import read_records

    prompts = [json.loads(line) for line in (sample_data / "rl" / "prompts.jsonl").read_text().splitlines()]
    chosen = [p for p in prompts if p["answer_type"] == "number" and "images" in p][:4]
    assert all(not Path(im).is_absolute() for p in chosen for im in p["images"])
    src = tmp_path / "annotations" / "prompts.jsonl"
    src.parent.mkdir()
    src.write_text("".join(json.dumps(p) + "\n" for p in chosen))
    rollouts = tmp_path / "answers.jsonl"
    rollouts.write_text("".join(json.dumps({"id": p["id"], "response": tagged(answer, p["prompt_type"])}) + "\n"
                                for p in chosen for answer in (p["answer"], "99999")))  # one right of two
    stats = rl_filter([str(src)], RlFilterConfig(out=tmp_path / "o", backend={"rollouts": str(rollouts)}, n=2,
                                                 image_root=sample_data / "rl", plot=False))
    assert stats["kept"] == len(chosen)
    kept = [json.loads(line) for line in (tmp_path / "o" / "kept.jsonl").read_text().splitlines()]
    assert [r["images"] for r in kept] == [[str(sample_data / "rl" / im) for im in p["images"]] for p in chosen]
    again = list(read_records([tmp_path / "o" / "kept.jsonl"]))
    assert all(isinstance(r, dict) and Path(r["images"][0]).is_file() for r in again)
