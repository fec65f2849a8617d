"""The RL seeds' own files through ``rl-filter`` (rollouts backend) and ``score``, the kept (rl-filter) and scored
(score) rows written back in the seed's layout and read back by the same reader.

Rows are shaped as each seed's loader reads them: VLM-R1's JSONL with the image folder beside the data file
(``grpo_jsonl.py`` lines 963-991 at 90052f4), verl's Parquet as its geo3k example and V-Triune write it
(``examples/data_preprocess/geo3k.py`` lines 57-80; V-Triune's ``reward_model.verifier``), and
LLaVA-OneVision-1.5-RL's released Parquet (``dataset/create/dump_engine.py`` lines 10-21).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from curate.core.records import BadRecord, read_records
from curate.rl.config import RlFilterConfig, ScoreConfig
from curate.rl.filter import rl_filter
from curate.rl.score import RECORD_COLUMNS, score


def _png(shade: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (56, 56), (shade, 40, 90)).save(buf, "PNG")
    return buf.getvalue()


def _answers(path: Path, responses: dict[str, list[str]]) -> Path:
    path.write_text("".join(json.dumps({"id": k, "sample": j, "response": t}) + "\n"
                            for k, texts in responses.items() for j, t in enumerate(texts)))
    return path


def _run(tmp_path: Path, inputs: Path, answers: Path, **settings) -> tuple[dict, dict, list]:
    """rl-filter and score of the same answers; the kept file's rows, the scores."""
    stats = rl_filter([str(inputs)], RlFilterConfig(out=tmp_path / "rl", backend={"rollouts": str(answers)}, n=2,
                                                    plot=False, band="-0.1,1.1", **settings))
    scored = score([str(inputs)], ScoreConfig(responses=answers, out=tmp_path / "score",
                                              **{k: v for k, v in settings.items()
                                                 if k in ("layout", "reward_method", "preset", "image_root")}))
    rollouts = pq.read_table(tmp_path / "rl" / "rollouts.parquet").to_pylist()
    scores = pq.read_table(tmp_path / "score" / "scores.parquet").to_pylist()
    assert [(r["id"], r["reward"], r["accuracy"]) for r in rollouts] == \
        [(s["id"], s["reward"], s["accuracy"]) for s in scores]  # both verbs score alike
    return stats, scored, rollouts


def _same_golds(original: Path, kept: Path, layout: str | None = None,
                added: tuple[str, ...] = ("pass_at_1", "pass_at_n", "mean_reward")) -> None:
    """The kept file read back by the reader: the same records' answers and rewards as the input's."""
    before = {r["id"]: r for r in read_records([original], layout=layout) if not isinstance(r, BadRecord)}
    after = [r for r in read_records([kept], layout=layout)]
    assert after and not any(isinstance(r, BadRecord) for r in after)
    for rec in after:
        twin = before.get(rec["id"]) or next(b for b in before.values() if b.get("answer") == rec["answer"])
        assert (rec["answer"], rec.get("reward"), rec.get("prompt_type")) == \
            (twin["answer"], twin.get("reward"), twin.get("prompt_type"))
        assert set(added) <= rec.keys()


def _scored_back(original: Path, out: Path, scored: dict, rollouts: list, layout: str | None = None) -> list[dict]:
    """``score``'s records file read back by the reader: the input's answers and rewards, and per record its
    responses' rewards in sample order with their means; returns the file's raw rows."""
    path = out / scored["scored_file"]
    _same_golds(original, path, layout, added=RECORD_COLUMNS)
    rewards: dict[str, list[float]] = {}
    for r in rollouts:  # rl-filter's rollouts: id and sample order
        rewards.setdefault(r["id"], []).append(r["reward"])
    back = list(read_records([path], layout=layout))  # row for row (verl's ids follow the file's name)
    assert scored["scored_records"] == len(back) == len(rewards)
    for rec, want in zip(back, rewards.values()):
        assert rec["rewards"] == want and rec["responses"] == len(want)
        assert abs(rec["mean_reward"] - sum(want) / len(want)) < 1e-12
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_vlm_r1_jsonl_with_its_image_folder(tmp_path: Path) -> None:
    images, data = tmp_path / "images", tmp_path / "data"
    images.mkdir()
    data.mkdir()
    for i in range(3):
        (images / f"{i}.png").write_bytes(_png(i * 60))
    rows = [{"id": "count", "image": "0.png", "accu_reward_method": "default",
             "conversations": [{"from": "human", "value": "<image>How many cats?"}, {"from": "gpt", "value": "<answer>3</answer>"}]},
            {"id": "choice", "image": ["1.png"], "accu_reward_method": "mcq",
             "conversations": [{"from": "human", "value": "<image>Which? A. cat B. dog"}, {"from": "gpt", "value": "<answer>B</answer>"}]},
            {"id": "yes", "image": "2.png",  # no accu_reward_method: the run's --reward-method, as VLM-R1's own flag
             "conversations": [{"from": "human", "value": "<image>Is it red?"}, {"from": "gpt", "value": "<answer>Yes</answer>"}]}]
    inputs = data / "train.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answers = _answers(tmp_path / "answers.jsonl", {
        "count": ["<think>three</think><answer>3</answer>", "<answer>4</answer>"],
        "choice": ["<answer>B</answer>", "<answer>C</answer>"], "yes": ["<answer>yes</answer>", "<answer>no</answer>"]})
    stats, scored, rollouts = _run(tmp_path, inputs, answers, layout="vlm-r1", reward_method="yes_no",
                                   image_root=images)
    assert stats["kept"] == 3 and scored["scored"] == 6 and scored["per_verifier"].keys() == {"vlm-r1"}
    assert [r["reward"] for r in rollouts] == [1.0, 0.0, 0.5, 0.0, 0.5, 0.0]  # (accuracy + VLM-R1's format) / 2
    kept = [json.loads(line) for line in (tmp_path / "rl" / stats["kept_file"]).read_text().splitlines()]
    for row, out in zip(rows, kept):  # the same row, its image at the path VLM-R1 joins to its image folder
        assert {k: v for k, v in out.items() if k not in ("image", "pass_at_1", "pass_at_n", "mean_reward")} == \
            {k: v for k, v in row.items() if k != "image"}
        paths = out["image"] if isinstance(out["image"], list) else [out["image"]]
        assert all(Path(images / p).read_bytes() == (images / Path(p).name).read_bytes() for p in paths)
    _same_golds(inputs, tmp_path / "rl" / stats["kept_file"], layout="vlm-r1:yes_no")
    back = _scored_back(inputs, tmp_path / "score", scored, rollouts, layout="vlm-r1:yes_no")
    assert scored["scored_file"] == "scored.jsonl"
    for row, out in zip(rows, back, strict=True):  # score writes the same rows, the image where VLM-R1 finds it
        assert {k: v for k, v in out.items() if k not in ("image", *RECORD_COLUMNS)} == \
            {k: v for k, v in row.items() if k != "image"}
        paths = out["image"] if isinstance(out["image"], list) else [out["image"]]
        given = row["image"] if isinstance(row["image"], list) else [row["image"]]
        assert [(tmp_path / "score" / p).read_bytes() for p in paths] == [(images / p).read_bytes() for p in given]


def test_verl_parquet_as_v_triune_writes_it(tmp_path: Path) -> None:
    rows = []
    for i, (source, model) in enumerate([
            ("virl", {"style": "rule", "ground_truth": "12", "verifier": "mathverify", "accuracy_ratio": 1.0,
                      "format_ratio": 0.1}),
            ("virl", {"style": "rule", "ground_truth": "\\frac{1}{2}", "verifier": "mathverify", "accuracy_ratio": 1.0,
                      "format_ratio": 0.1}),
            ("hiyouga/geometry3k", {"style": "rule", "ground_truth": "7", "verifier": None, "accuracy_ratio": None,
                                    "format_ratio": None})]):
        rows.append({"data_source": source, "prompt": [{"role": "user", "content": "<image>Solve it."}],
                     "images": [{"bytes": _png(i * 70), "path": f"{i}.png"}], "ability": "math",
                     "reward_model": model, "extra_info": {"split": "train", "index": i}})
    inputs = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), inputs)
    answers = _answers(tmp_path / "answers.jsonl", {
        "train:0": ["<think>\nx\n</think>\n<answer>\n\\boxed{12}\n</answer>", "<answer>12</answer>"],
        "train:1": ["\\boxed{0.5}", "\\boxed{2}"], "train:2": ["<think>a</think> \\boxed{7}", "7"]})
    stats, scored, rollouts = _run(tmp_path, inputs, answers, layout="verl")
    assert stats["kept"] == 3 and set(stats["per_source"]) == {"virl", "hiyouga/geometry3k"}
    # V-Triune: a bare 12 is no answer (no LaTeX anchor); geo3k: 0.9 accuracy + 0.1 format, no box no answer
    assert [round(r["reward"], 6) for r in rollouts] == [1.0, 0.0, round(1 / 1.1, 6), 0.0, 1.0, 0.0]
    kept = pq.read_table(tmp_path / "rl" / stats["kept_file"])
    assert set(kept.column_names) == {*rows[0], "pass_at_1", "pass_at_n", "mean_reward"}
    for row, out in zip(rows, kept.to_pylist()):  # row for row, the image bytes as they were
        assert out["prompt"] == row["prompt"] and out["extra_info"] == row["extra_info"]
        assert out["images"][0]["bytes"] == row["images"][0]["bytes"]
        assert out["reward_model"]["ground_truth"] == row["reward_model"]["ground_truth"]
    _same_golds(inputs, tmp_path / "rl" / stats["kept_file"])
    back = _scored_back(inputs, tmp_path / "score", scored, rollouts)
    assert scored["scored_file"] == "scored.parquet"  # image bytes: Parquet, as verl reads it
    assert set(pq.read_schema(tmp_path / "score" / "scored.parquet").names) == {*rows[0], *RECORD_COLUMNS}
    for row, out in zip(rows, back, strict=True):  # the same columns, row for row
        assert {k: out[k] for k in row} == row


def test_llava_ov_rl_parquet_as_released(tmp_path: Path) -> None:
    rows = [{"id": f"refspatial_{i:04d}", "images": [{"bytes": _png(i * 50), "path": None}], "problem": "<image>" + q,
             "answer": [a], "problem_type": pt, "answer_type": at, "source": src, "prompt_type": "default"}
            for i, (q, a, pt, at, src) in enumerate([
                ("Which side is the cup on? A. left B. right", "B", "spatial-reasoning", "multiple-choice", "refspatial"),
                ("How many birds?", "4", "counting", "number", "pixmo_count"),
                ("Read the sign.", "STOP", "ocr", "ocrtext", "ocrbench")])]
    inputs = tmp_path / "00000.parquet"
    pq.write_table(pa.Table.from_pylist(rows), inputs)
    answers = _answers(tmp_path / "answers.jsonl", {
        "refspatial_0000": ["<think>cup at [10, 20, 30, 40]</think><answer>B</answer>", "<think>left</think><answer>A</answer>"],
        "refspatial_0001": ["<answer>4 birds</answer>", "<answer>4.0</answer>"],
        "refspatial_0002": ["<answer>stop</answer>", "<answer>stp</answer>"]})
    stats, scored, rollouts = _run(tmp_path, inputs, answers, preset="llava-ov-1.5-rl")
    # the box in the thinking earns 0.5 more (spatial reasoning); "4.0" is not "4"; "stp" is 1 edit of 4 from "stop"
    assert [r["reward"] for r in rollouts] == [1.5, 0.0, 1.0, 0.0, 1.0, 0.75]
    assert stats["settings"]["n"] == 2 and stats["settings"]["sampling"]["max_new_tokens"] == 4096  # the seed's
    # the seed's per-source band, strictly inside (0, 0.6), over the flag's: mean rewards 0.75, 0.5 and 0.875
    assert stats["kept"] == 1 and stats["dropped"] == {"too_easy": 2}
    kept = pq.read_table(tmp_path / "rl" / stats["kept_file"])  # images are bytes: Parquet, as released
    assert kept.column("id").to_pylist() == ["refspatial_0001"]
    assert set(kept.column_names) == {*rows[0], "pass_at_1", "pass_at_n", "mean_reward"}
    assert kept.to_pylist()[0]["images"][0]["bytes"] == rows[1]["images"][0]["bytes"]
    _same_golds(inputs, tmp_path / "rl" / stats["kept_file"])
    # score --preset llava-ov-1.5-rl: the same rewards (box bonus included, _run), every row back as released
    assert scored["settings"]["layout"] == "llava-ov-rl" and scored["settings"]["preset"] == "llava-ov-1.5-rl"
    back = _scored_back(inputs, tmp_path / "score", scored, rollouts)
    assert set(pq.read_schema(tmp_path / "score" / "scored.parquet").names) == {*rows[0], *RECORD_COLUMNS}
    for row, out in zip(rows, back, strict=True):
        assert {k: out[k] for k in row} == row
    assert [r["mean_reward"] for r in back] == [0.75, 0.5, 0.875]


def test_rec_preset_monitors_boxes_per_source(tmp_path: Path) -> None:
    """``--preset vlm-r1-rec``: VLM-R1's REC reward on rows without ``accu_reward_method``; stats.json and the report
    page carry the figures V-Triune logs for box answers (IoU, precision and recall at 0.5/0.75/0.95)."""
    from curate.report.pages import monitoring_html

    rows = [{"id": f"r{i}", "conversations": [{"from": "human", "value": "Find the cat."},
                                               {"from": "gpt", "value": "<answer>[10, 10, 50, 50]</answer>"}]}
            for i in range(2)]
    inputs = tmp_path / "rec.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    texts = ["<think>wait, check</think><answer>[10,10,50,50]</answer>", "<answer>[30,10,70,50]</answer>",
             "<answer>[10,10,48,50]</answer>"]
    answers = tmp_path / "a.jsonl"
    answers.write_text("".join(json.dumps({"id": r["id"], "response": t, "sample": j, "truncated": j == 2}) + "\n"
                               for r in rows for j, t in enumerate(texts)))
    stats = rl_filter([str(inputs)], RlFilterConfig(out=tmp_path / "out", backend={"rollouts": str(answers)}, n=3,
                                                    preset="vlm-r1-rec", plot=False))
    assert stats["settings"]["sampling"]["temperature"] == 0.9 and stats["settings"]["sampling"]["max_new_tokens"] == 2048
    fig = stats["per_source"]["rec"]
    # IoUs 1, 1/3 (VLM-R1's IoU: 800 of 2400) and 38 x 40 / 1600 = 0.95 (continuous: the figures' matching)
    assert fig["truncated"] == 2 and fig["reflection_rate"] == 1 / 3
    assert fig["accuracy_with_reflection"] == 1.0 and abs(fig["accuracy_without_reflection"] - (1 / 3 + 0.95) / 2) < 1e-9
    box = fig["box"]
    assert abs(box["iou"] - (1.0 + 0.0 + 0.95) / 3) < 1e-9  # the 1/3 answer matches nothing at 0.5
    assert box["precision@0.5"] == box["recall@0.95"] == 2 / 3
    html = monitoring_html(stats)
    assert "Box answers" in html and "precision@0.75" in html and ">rec<" in html


def test_rec_boxes_are_scaled_from_the_model_input_as_vlm_r1_does(tmp_path: Path) -> None:
    """VLM-R1's ``iou_reward`` scales the answer's box from the model input (``image_grid_thw`` x 14: Qwen2-VL's
    resize within 3,136 and 12,845,056 pixels) to the image (``qwen_module.py`` lines 138-156): a 640 x 480 image
    is seen as 644 x 476, so [0, 0, 322, 238] is the image's [0, 0, 320, 240]. The image is in its own folder
    (VLM-R1's image root): both verbs find its size there (``--image-root``)."""
    (tmp_path / "images").mkdir()
    Image.new("RGB", (640, 480), (200, 30, 30)).save(tmp_path / "images" / "cat.png")
    rows = [{"id": "rec0", "image": "cat.png", "conversations": [
        {"from": "human", "value": "<image>Where is the cat?"}, {"from": "gpt", "value": "<answer>[0, 0, 320, 240]</answer>"}]}]
    inputs = tmp_path / "rec.jsonl"
    inputs.write_text(json.dumps(rows[0]) + "\n")
    answers = _answers(tmp_path / "answers.jsonl", {"rec0": ["<answer>[0, 0, 322, 238]</answer>",
                                                            "<answer>[0, 0, 320, 240]</answer>"]})
    _, scored, rollouts = _run(tmp_path, inputs, answers, preset="vlm-r1-rec",
                               image_root=tmp_path / "images")  # score --preset vlm-r1-rec scores alike (_run)
    unscaled = (320 * 238) / (322 * 238 + 320 * 240 - 320 * 238)  # what the box would score taken as it is
    assert rollouts[0]["accuracy"] == 1.0 and rollouts[1]["accuracy"] < 1.0 and unscaled < 1.0
    assert scored["settings"]["layout"] == "vlm-r1:rec" and scored["settings"]["preset"] == "vlm-r1-rec"
    back = _scored_back(inputs, tmp_path / "score", scored, rollouts, layout="vlm-r1:rec")
    # the image where VLM-R1 finds it; (IoU 1 + no <think> format) / 2, then the scaled box's IoU below 1
    assert back[0]["image"] == str(tmp_path / "images" / "cat.png") and back[0]["rewards"][0] == 0.5 > back[0]["rewards"][1]
