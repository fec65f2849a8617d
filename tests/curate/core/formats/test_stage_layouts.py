"""Images as bytes through balance, recaption and rl-filter: the same outputs as the same images as files,
and records written back keep their image bytes (Parquet with the datasets image struct)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.rl.config import RlFilterConfig
from curate.recaption.config import RecaptionConfig
from curate.balance.pipeline import balance
from curate.core.records import read_records
from curate.recaption.stage import recaption
from curate.rl.filter import rl_filter
from tests._fixtures.formats import IMAGE_STRUCT, Layouts
from tests.curate.generate.test_openai_backend import ScriptedServer


def _vocab(layouts: Layouts, path: Path) -> Path:
    words = sorted({w.lower().strip(".") for it in layouts.items for w in it["caption"].split()})
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
    return path


@pytest.mark.slow
def test_balance_from_bytes_equals_files(layouts: Layouts, tiny_clip_spec: str, tmp_path: Path) -> None:
    vocab = _vocab(layouts, tmp_path / "vocab.txt")
    common = dict(vocab=vocab, model=tiny_clip_spec, top_k=2, fraction=0.5, shard_size=5, seed=3,
                  cache_dir=tmp_path / "cache")
    outs = {}
    for name in ("files", "hf", "wds"):
        outs[name] = tmp_path / name
        balance([str(getattr(layouts, name))], out=outs[name], **common)
    def embeddings(out: Path) -> np.ndarray:  # shards may cut differently (two tars): compare in record order
        return np.concatenate([np.load(p) for p in sorted((out / "embeddings").glob("*.npy"))])

    for name in ("hf", "wds"):
        assert np.array_equal(embeddings(outs["files"]), embeddings(outs[name])), name
        assert pq.read_table(outs[name] / "selection.parquet").equals(pq.read_table(outs["files"] / "selection.parquet"))
    by_id = {it["id"]: it["bytes"] for it in layouts.items}
    selected = set(pq.read_table(outs["files"] / "selection.parquet").column("id").to_pylist())
    for name, file in (("hf", "hf.parquet"), ("wds", "00000.parquet")):
        path = next((outs[name] / "records").rglob(file))  # 00000.tar: under its dataset's folder
        table = pq.read_table(path)
        field = "image" if name == "hf" else "images"
        assert table.schema.field(field).type in (IMAGE_STRUCT, pa.list_(IMAGE_STRUCT)), table.schema
        for rec in read_records([path]):
            assert rec["id"] in selected and rec["images"] == [by_id[rec["id"]]]


def _rl_rows(layouts: Layouts) -> list[dict]:
    return [{"id": it["id"], "source": it["source"], "problem": "<image>Is there a picture? Answer yes or no.",
             "answer": "yes", "answer_type": "boolean", "problem_type": "judge", "prompt_type": "normal"}
            for it in layouts.items]


def test_rl_filter_from_bytes_equals_files_and_keeps_bytes(layouts: Layouts, tmp_path: Path) -> None:
    rows = _rl_rows(layouts)
    by_id = {it["id"]: it for it in layouts.items}
    files = tmp_path / "rl.jsonl"
    files.write_text("".join(json.dumps({**r, "images": [str(layouts.files.parent / "images" / f"{r['id']}-{by_id[r['id']]['name']}")]}) + "\n"
                             for r in rows))
    table = pa.Table.from_pylist(rows).append_column(
        "image", pa.array([{"bytes": by_id[r["id"]]["bytes"], "path": None} for r in rows], type=IMAGE_STRUCT))
    pq.write_table(table, tmp_path / "rl.parquet")
    answers = tmp_path / "answers.jsonl"
    with open(answers, "w") as fh:
        for i, r in enumerate(rows):
            for j in range(4):
                fh.write(json.dumps({"id": r["id"], "response": f"<answer>{'yes' if j < i % 4 else 'no'}</answer>"}) + "\n")
    a = rl_filter([str(files)], RlFilterConfig(out=tmp_path / "a", backend={"rollouts": str(answers)}, n=4, plot=False))
    b = rl_filter([str(tmp_path / "rl.parquet")], RlFilterConfig(out=tmp_path / "b", backend={"rollouts": str(answers)},
                                                                 n=4, plot=False))
    assert a["kept"] == b["kept"] > 0 and a["kept_file"] == "kept.jsonl" and b["kept_file"] == "kept.parquet"
    assert pq.read_table(tmp_path / "a" / "prompts.parquet").equals(pq.read_table(tmp_path / "b" / "prompts.parquet"))
    kept = pq.read_table(tmp_path / "b" / "kept.parquet")
    assert kept.schema.field("image").type == IMAGE_STRUCT
    for rec in read_records([tmp_path / "b" / "kept.parquet"]):
        assert rec["images"] == [by_id[rec["id"]]["bytes"]] and "pass_at_1" in rec


def test_recaption_sends_bytes_as_data_urls_and_keeps_them(layouts: Layouts, tmp_path: Path) -> None:
    calls = {}
    for name in ("files", "cauldron"):
        server = ScriptedServer()
        try:
            recaption([str(getattr(layouts, name))], RecaptionConfig(out=tmp_path / f"srv-{name}",
                                                                     backend={"endpoint": server.url}, langs="en",
                                                                     shard_size=5))
        finally:
            server.close()
        calls[name] = sorted(json.dumps(body, sort_keys=True) for _, body in server.calls)
    assert calls["files"] == calls["cauldron"] and len(calls["files"]) >= len(layouts.items)
    first = json.loads(calls["cauldron"][0])
    url = next(p["image_url"]["url"] for m in first["messages"] if isinstance(m["content"], list)
               for p in m["content"] if p.get("type") == "image_url")
    assert base64.b64decode(url.split(",", 1)[1]) in {it["bytes"] for it in layouts.items}

    answers = tmp_path / "captions.jsonl"
    answers.write_text("".join(json.dumps({"id": f"{it['id']}#en", "response": f"A photograph of item number {i} "
                                           "standing on a plain table in soft daylight."}) + "\n"
                               for i, it in enumerate(layouts.items)))
    a = recaption([str(layouts.files)], RecaptionConfig(out=tmp_path / "a", backend={"rollouts": str(answers)},
                                                        langs="en"))
    b = recaption([str(layouts.hf)], RecaptionConfig(out=tmp_path / "b", backend={"rollouts": str(answers)},
                                                     langs="en"))
    assert a["records_out"] == b["records_out"] == len(layouts.items)
    assert b["outputs"]["records"] == "records.parquet" and a["outputs"]["records"] == "records.jsonl"
    by_id = {it["id"]: it["bytes"] for it in layouts.items}
    for rec in read_records([tmp_path / "b" / "records.parquet"]):
        assert rec["images"] == [by_id[rec["recaption_of"]]]
    cap_a = pq.read_table(tmp_path / "a" / "captions.parquet").drop_columns(["image"])
    cap_b = pq.read_table(tmp_path / "b" / "captions.parquet").drop_columns(["image"])
    assert cap_a.equals(cap_b)
