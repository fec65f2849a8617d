"""Record readers: every accepted layout converts to the canonical form, bad rows become BadRecord."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.errors import UserError
from curate.core.records import (BadRecord, CAPTION_PROMPT, expand_inputs, read_part, read_records, split_file,
                                 to_canonical)
from tests._fixtures.formats import write_tgz


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def test_canonical_llava_caption_and_rl_layouts(tmp_path: Path) -> None:
    rows = [
        {"id": "a", "source": "coyo", "images": ["img/a.jpg"],
         "messages": [{"role": "user", "content": "<image>\nDescribe."}, {"role": "assistant", "content": "A cat."}]},
        {"id": "b", "image": "img/b.jpg",
         "conversations": [{"from": "human", "value": "What is this?"}, {"from": "gpt", "value": "A dog."}]},
        {"id": 7, "image": "/abs/c.png", "caption": "A red car.", "source": "laion"},
        {"id": "d", "images": ["img/d.jpg"], "problem": "How many?", "answer": "3", "answer_type": "number",
         "prompt_type": "think", "source": "rl"},
    ]
    recs = list(read_records([write_jsonl(tmp_path / "in.jsonl", rows)]))
    assert [r["id"] for r in recs] == ["a", "b", "7", "d"]
    a, b, c, d = recs
    assert a["images"] == [str(tmp_path / "img/a.jpg")]
    assert a["source"] == "coyo" and a["messages"][1] == {"role": "assistant", "content": "A cat."}
    # LLaVA: roles mapped, source falls back to the file stem, image tag placed in the first user turn
    assert b["source"] == "in"
    assert b["messages"] == [{"role": "user", "content": "<image>\nWhat is this?"},
                             {"role": "assistant", "content": "A dog."}]
    assert c["images"] == ["/abs/c.png"]
    assert c["messages"][0]["content"] == f"<image>\n{CAPTION_PROMPT}"
    assert c["messages"][1]["content"] == "A red car."
    # RL fields are kept as extra fields
    assert d["answer"] == "3" and d["answer_type"] == "number" and d["prompt_type"] == "think"
    assert d["messages"][0]["content"] == "<image>\nHow many?"


def test_bad_rows_become_bad_records_with_reasons(tmp_path: Path) -> None:
    rows = [
        '{"id": "ok", "caption": "fine", "image": "ok.jpg"}',
        '{"id": "broken", "caption": ',
        '[1, 2]',
        '{"id": "nolayout", "alt": "hello"}',
        '{"id": "mismatch", "images": ["a.jpg"], "messages": [{"role": "user", "content": "<image><image>"}]}',
        '{"id": "badrole", "messages": [{"role": "wizard", "content": "x"}]}',
        '{"id": "noimage", "caption": "a caption, but no image"}',
        '{"id": "placeholder", "messages": [{"role": "user", "content": "<image> what is it?"}]}',
        '',
        '{"id": "text", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}',
        '{"id": "ok2", "messages": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}],'
        ' "images": ["x.png"]}',
    ]
    out = list(read_records([write_jsonl(tmp_path / "bad.jsonl", rows)]))
    kinds = [(type(r).__name__, r.reason if isinstance(r, BadRecord) else r["id"]) for r in out]
    assert kinds == [("dict", "ok"), ("BadRecord", "malformed_json"), ("BadRecord", "not_an_object"),
                     ("BadRecord", "unknown_layout"), ("BadRecord", "image_count_mismatch"),
                     ("BadRecord", "invalid_field"), ("BadRecord", "missing_image"),
                     ("BadRecord", "missing_image"), ("dict", "text"), ("dict", "ok2")]
    assert "without an image" in out[6].detail and "placeholder but no image" in out[7].detail
    # a malformed line is named by file and line number
    assert out[1].id == "bad:2" and "line 2" in out[1].detail
    assert out[3].id == "nolayout"
    assert out[9]["messages"][0]["content"] == "<image>hi"
    text_only = [r for part in split_file(tmp_path / "bad.jsonl", 100)  # text matching reads the caption as text
                 for r in read_part(replace(part, text_only=True))]
    assert text_only[6]["id"] == "noimage" and text_only[6]["messages"][0]["content"] == CAPTION_PROMPT


def test_parquet_and_json_array_inputs(tmp_path: Path) -> None:
    msgs = [{"role": "user", "content": "<image>\nQ"}, {"role": "assistant", "content": "A"}]
    table = pa.table({"id": ["p1", "p2", "p3"], "source": ["s", "s", "t"],
                      "images": [["i/1.jpg"], ["i/2.jpg"], ["i/3.jpg"]],
                      "messages": [msgs, msgs, msgs]})
    pq.write_table(table, tmp_path / "r.parquet", row_group_size=2)
    pq.write_table(pa.table({"id": ["s1"], "messages": [json.dumps(msgs)], "images": [["i/1.jpg"]]}),
                   tmp_path / "s.parquet")
    (tmp_path / "l.json").write_text(json.dumps([{"id": "j1", "image": "x.jpg", "conversations": [
        {"from": "human", "value": "<image>\nQ"}, {"from": "gpt", "value": "A"}]}]))
    recs = list(read_records([tmp_path / "r.parquet", tmp_path / "l.json", tmp_path / "s.parquet"]))
    assert [r["id"] for r in recs] == ["p1", "p2", "p3", "j1", "s1"]
    assert recs[4]["messages"] == msgs  # a JSON-string messages column is accepted
    assert recs[0]["images"] == [str(tmp_path / "i/1.jpg")]
    # parts split at row-group and shard boundaries read back the same rows
    parts = split_file(tmp_path / "r.parquet", 2)
    assert [(p.start, p.stop) for p in parts] == [(0, 2), (2, 3)]


def test_jsonl_parts_seek_to_their_rows(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "caption": f"caption {i} é", "image": f"{i}.jpg"} for i in range(10)]
    path = write_jsonl(tmp_path / "x.jsonl", rows)
    parts = split_file(path, 3)
    assert [(p.start, p.stop) for p in parts] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    from curate.core.records import read_part
    ids = [r["id"] for p in parts for r in read_part(p)]
    assert ids == [f"r{i}" for i in range(10)]


def test_user_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        expand_inputs([tmp_path / "missing.jsonl"])
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(UserError, match="unsupported input type .csv"):
        expand_inputs([tmp_path / "x.csv"])
    (tmp_path / "obj.json").write_text('{"id": 1}')
    with pytest.raises(UserError, match="array of records"):
        split_file(tmp_path / "obj.json", 10)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="holds no"):
        expand_inputs([tmp_path / "empty"])


def test_to_canonical_requires_string_fields() -> None:
    from curate.core.records import RecordInvalid
    with pytest.raises(RecordInvalid) as info:
        to_canonical({"id": "x", "caption": {"en": "a"}}, Path("/"), fallback_id="f", fallback_source="s")
    assert info.value.reason == "invalid_field"


def test_a_text_field_reads_rows_in_no_layout_as_captions() -> None:
    from curate.core.records import RecordInvalid

    row = {"url": "http://x/1.jpg", "alt_text": ["", "a cat", "a kitten"], "image": "img/1.jpg"}
    with pytest.raises(RecordInvalid) as info:
        to_canonical(row, Path("/d"), fallback_id="f:0", fallback_source="s")
    assert info.value.reason == "unknown_layout"
    with pytest.raises(RecordInvalid) as info:  # the field named, but not in the row: the message says so
        to_canonical({"url": "u"}, Path("/d"), fallback_id="f:0", fallback_source="s", text_field="alt_text")
    assert info.value.reason == "unknown_layout" and "alt_text" in info.value.detail
    rec = to_canonical(row, Path("/d"), fallback_id="f:0", fallback_source="s", text_field="alt_text")
    assert rec["messages"] == [{"role": "user", "content": f"<image>\n{CAPTION_PROMPT}"},
                               {"role": "assistant", "content": "a cat"}]
    assert rec["captions"] == ["", "a cat", "a kitten"] and rec["url"] == "http://x/1.jpg" and "alt_text" not in rec
    laion = to_canonical({"TEXT": "a dog", "alt_text": "x", "image": "1.jpg"}, Path("/d"), fallback_id="f:1",
                         fallback_source="s", text_field="alt_text")
    assert laion["messages"][-1]["content"] == "a dog" and laion["alt_text"] == "x"  # a known layout wins


def test_text_and_TEXT_columns_are_captions_when_no_other_layout(tmp_path: Path) -> None:
    """LAION's TEXT and COYO's / DataComp's / the Hugging Face text-to-image sets' text read as captions."""
    rows = [
        {"key": "000001", "TEXT": "A tabby cat.", "URL": "http://x/1.jpg", "image": "img/1.jpg"},
        {"id": "t", "text": "  A red car. ", "url": "http://x/2.jpg"},
        {"id": "both", "caption": "From caption.", "text": "kept as an extra field", "image": "img/3.jpg"},
        {"id": "rl", "problem": "How many?", "answer": "3", "text": "an RL row stays an RL row"},
        {"id": "chat", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}],
         "text": "extra"},
        {"id": "empty", "TEXT": ""},
        {"id": "null", "text": None},
    ]
    recs = list(read_records([write_jsonl(tmp_path / "laion.jsonl", rows)]))
    laion, coyo, both, rl, chat, empty, null = recs
    assert laion["id"] == "laion:1"  # a JSONL row's key is not an id (only img2dataset's image-column rows)
    assert laion["messages"] == [{"role": "user", "content": f"<image>\n{CAPTION_PROMPT}"},
                                 {"role": "assistant", "content": "A tabby cat."}]
    assert "TEXT" not in laion and laion["URL"] == "http://x/1.jpg"  # the column used is not an extra field
    assert isinstance(coyo, BadRecord) and coyo.reason == "missing_image"  # a URL never downloaded
    assert "http://x/2.jpg" in coyo.detail and "img2dataset" in coyo.detail
    (part,) = split_file(tmp_path / "laion.jsonl", 100)
    coyo = list(read_part(replace(part, text_only=True)))[1]  # text matching reads it as a caption
    assert coyo["messages"][1]["content"] == "A red car." and "text" not in coyo and coyo["url"] == "http://x/2.jpg"
    assert coyo["messages"][0]["content"] == CAPTION_PROMPT  # no image, no placeholder
    assert both["messages"][1]["content"] == "From caption." and both["text"] == "kept as an extra field"
    assert rl["messages"][0]["content"] == "How many?" and rl["text"] == "an RL row stays an RL row"
    assert chat["messages"][1]["content"] == "Yo" and chat["text"] == "extra"
    assert isinstance(empty, BadRecord) and empty.reason == "invalid_field" and "TEXT is empty" in empty.detail
    assert isinstance(null, BadRecord) and null.reason == "invalid_field" and "text must be a string" in null.detail


def test_a_list_of_captions_gives_its_first_non_empty_one(tmp_path: Path) -> None:
    """Flickr30k and COCO Captions on the Hugging Face hub: a list of five captions per image (a Parquet list)."""
    pq.write_table(pa.table({
        "image": ["img/1.jpg", "img/2.jpg", "img/3.jpg", "img/4.jpg"],
        "caption": [["", " A dog runs on grass. ", "A brown dog."], ["One."], [], ["", None]],
        "img_id": ["1", "2", "3", "4"],
    }), tmp_path / "flickr30k.parquet")
    (tmp_path / "coco.jsonl").write_text(json.dumps({"id": "c", "text": ["Two cats.", "Cats on a bed."],
                                                     "image": "c.jpg"}) + "\n"
                                         + json.dumps({"id": "bad", "caption": [{"en": "x"}]}) + "\n")
    first, one, empty, blank, coco, bad = read_records([tmp_path / "flickr30k.parquet", tmp_path / "coco.jsonl"])
    assert first["messages"][1] == {"role": "assistant", "content": "A dog runs on grass."}
    assert first["captions"] == ["", " A dog runs on grass. ", "A brown dog."] and first["img_id"] == "1"
    assert one["messages"][1]["content"] == "One." and one["captions"] == ["One."]
    assert coco["messages"][1]["content"] == "Two cats." and coco["captions"] == ["Two cats.", "Cats on a bed."]
    for rec in (empty, blank):
        assert isinstance(rec, BadRecord) and rec.reason == "invalid_field" and "caption is empty" in rec.detail
    assert isinstance(bad, BadRecord) and "caption[0] must be a string" in bad.detail


def test_vqa_rows_read_as_a_question_and_its_answer(tmp_path: Path) -> None:
    """VQA sets on the Hugging Face hub: POPE and GQA (``answer``), TextVQA and DocVQA (``answers``, strings),
    VQAv2 (``answers``, annotations of ``answer``); the image placeholder leads the question."""
    pq.write_table(pa.table({
        "question_id": ["1", "2", "3", "4", "5"],
        "image": [{"bytes": b"\xff\xd8\xff\xe0", "path": f"{i}.jpg"} for i in range(5)],
        "question": ["Is there a dog?", "What does the sign say?", "What color is the bus?", "Who wrote it?", "Why?"],
        "answer": ["yes", None, None, None, None],
        "answers": [None, ["STOP", "stop"], None, [], None],
        "vqa": [None, None, [{"answer": "red", "answer_confidence": "yes"}, {"answer": "orange"}], None, None],
    }).rename_columns(["question_id", "image", "question", "answer", "answers", "vqa"]), tmp_path / "pope.parquet")
    pope, textvqa, vqav2, no_answer, none = read_records([tmp_path / "pope.parquet"])
    assert pope["messages"] == [{"role": "user", "content": "<image>\nIs there a dog?"},
                                {"role": "assistant", "content": "yes"}]
    assert textvqa["messages"][1]["content"] == "STOP" and textvqa["answers"] == ["STOP", "stop"]
    assert isinstance(vqav2, BadRecord) and vqav2.reason == "invalid_field"  # answers under another name: none
    assert isinstance(no_answer, BadRecord) and "question has no answer" in no_answer.detail
    assert isinstance(none, BadRecord)
    rows = [{"id": "v2", "question": "What color?", "answers": [{"answer": "red"}, {"answer": "orange"}]},
            {"id": "num", "question": "How many?", "answer": 3},
            {"id": "both", "problem": "RL wins", "question": "ignored", "answer": "1"}]
    v2, num, both = read_records([write_jsonl(tmp_path / "vqa.jsonl", rows)])
    assert v2["messages"] == [{"role": "user", "content": "What color?"}, {"role": "assistant", "content": "red"}]
    assert num["messages"][1]["content"] == "3"
    assert both["messages"][0]["content"] == "RL wins"  # problem comes first


def test_multiple_choice_rows_read_with_their_options_lettered(tmp_path: Path) -> None:
    """ScienceQA on the Hugging Face hub: ``choices``, ``answer`` the index of the right one, ``hint`` the context;
    AI2D exports: ``options`` and the index as text; A-OKVQA: ``correct_choice_idx``."""
    pq.write_table(pa.table({
        "image": [{"bytes": b"\xff\xd8\xff\xe0", "path": None}, None, None],
        "question": ["Which animal is a mammal?", "Which is a fruit?", "What is it?"],
        "choices": [["frog", "whale", "shark"], ["carrot", "apple"], ["cat", "dog"]],
        "answer": [1, 0, 5],
        "hint": ["Animals live in many places.", "", ""],
    }), tmp_path / "train-00000-of-00001.parquet")
    sqa, no_hint, bad = read_records([tmp_path / "train-00000-of-00001.parquet"])
    assert sqa["messages"] == [
        {"role": "user", "content": "<image>\nContext: Animals live in many places.\nWhich animal is a mammal?\n"
                                    "A. frog\nB. whale\nC. shark\nAnswer with the option's letter from the given "
                                    "choices directly."},
        {"role": "assistant", "content": "B"}]
    assert sqa["answer"] == 1 and sqa["choices"] == ["frog", "whale", "shark"]  # the row's fields as they were
    assert no_hint["messages"][0]["content"].startswith("Which is a fruit?\nA. carrot\nB. apple\n")
    assert no_hint["messages"][1]["content"] == "A"
    assert isinstance(bad, BadRecord) and bad.reason == "invalid_field"
    assert "answer 5 is not the index of one of the 2 options" in bad.detail
    rows = [{"id": "ai2d", "question": "Which stage?", "options": ["egg", "larva", "adult"], "answer": "2"},
            {"id": "aok", "question": "Why?", "choices": ["rain", "sun"], "correct_choice_idx": 1,
             "direct_answers": ["sunny"]},
            {"id": "free", "question": "Which?", "choices": ["x", "y"], "answer": "neither"}]
    ai2d, aok, free = read_records([write_jsonl(tmp_path / "mc.jsonl", rows)])
    assert ai2d["messages"][1]["content"] == "C" and "C. adult" in ai2d["messages"][0]["content"]
    assert aok["messages"][1]["content"] == "B"
    assert free["messages"] == [{"role": "user", "content": "Which?"},  # no option named: read as a plain question
                                {"role": "assistant", "content": "neither"}]


def test_mmmu_rows_read_their_numbered_images_and_options(tmp_path: Path) -> None:
    """MMMU on the Hugging Face hub: ``image_1`` … ``image_7`` (structs, null when unused), ``<image k>`` in the
    question and options, ``options`` as the text of a Python list (``"[]"`` for open questions)."""
    png = {"bytes": b"\x89PNG\r\n\x1a\n" + b"\0" * 8, "path": None}
    jpg = {"bytes": b"\xff\xd8\xff\xe0" + b"\0" * 8, "path": "x.jpg"}
    table = {"id": ["validation_Art_1", "validation_Math_2", "validation_Bio_3"],
             "question": ["<image 1> Which painting is older than <image 2>?", "Solve <image 1>. x = ?",
                          "What is shown?"],
             "options": ["['The first', \"It's the second\"]", "[]", "['a', 'b']"],
             "answer": ["B", "12", "A"], "question_type": ["multiple-choice", "open", "multiple-choice"],
             "image_1": [png, jpg, None], "image_2": [jpg, None, None]}
    table.update({f"image_{k}": [None, None, None] for k in range(3, 8)})
    pq.write_table(pa.table(table), tmp_path / "validation-00000-of-00001.parquet")
    art, math, none = read_records([tmp_path / "validation-00000-of-00001.parquet"])
    assert art["images"] == [png["bytes"], jpg["bytes"]]  # in the order of their numbers
    assert art["messages"] == [
        {"role": "user", "content": "<image> Which painting is older than <image>?\nA. The first\nB. It's the second\n"
                                    "Answer with the option's letter from the given choices directly."},
        {"role": "assistant", "content": "B"}]
    assert not any(k.startswith("image_") for k in art)  # the image columns are the record's images
    assert math["images"] == [jpg["bytes"]]
    assert math["messages"] == [{"role": "user", "content": "Solve <image>. x = ?"},
                                {"role": "assistant", "content": "12"}]
    assert none["images"] == [] and none["messages"][1]["content"] == "A"
    # the images follow their placeholders: in the text's order, twice when referred to twice
    rows = dict(table, question=["<image 2> or <image 1>?", "<image 1> and <image 1>", "<image 1>?"],
                options=["[]", "[]", "[]"], image_1=[png, jpg, png], image_2=[jpg, None, None])
    pq.write_table(pa.table(rows), tmp_path / "order.parquet")
    swapped, twice, none_missing = read_records([tmp_path / "order.parquet"])
    assert swapped["images"] == [jpg["bytes"], png["bytes"]]
    assert swapped["messages"][0]["content"] == "<image> or <image>?"
    assert twice["images"] == [jpg["bytes"], jpg["bytes"]] and twice["messages"][0]["content"] == "<image> and <image>"
    assert none_missing["images"] == [png["bytes"]]
    # a placeholder with no such image, or an image no placeholder refers to: a recorded reason, never a guess
    rows = dict(table, question=["<image 3>?", "<image 1> only", "fine <image 1>"], options=["[]"] * 3,
                image_1=[png, png, png], image_2=[None, jpg, None])
    pq.write_table(pa.table(rows), tmp_path / "bad.parquet")
    no_such, unused, fine = read_records([tmp_path / "bad.parquet"])
    assert no_such.reason == unused.reason == "image_count_mismatch"
    assert "<image 3> refers to no image (the row has images 1)" in no_such.detail
    assert "image 2 is referred to by no <image k> placeholder" in unused.detail
    assert fine["messages"][0]["content"] == "fine <image>"
    # a list of images keeps its order (written back, the row keeps it too): the placeholders go first
    (listed,) = read_records([write_jsonl(tmp_path / "l.jsonl", [{"id": "l", "images": ["a.jpg", "b.jpg"],
                                                                  "question": "<image 2> vs <image 1>?", "answer": "x"}])])
    assert [Path(p).name for p in listed["images"]] == ["a.jpg", "b.jpg"]
    assert listed["messages"][0]["content"] == "<image>\n<image>\n<image 2> vs <image 1>?"
    # an image struct in a column no layout reads is errored, not dropped without a word
    pq.write_table(pa.table({"id": ["p"], "question": ["What?"], "answer": ["x"], "picture": [png]}),
                   tmp_path / "other.parquet")
    (bad,) = read_records([tmp_path / "other.parquet"])
    assert isinstance(bad, BadRecord) and bad.reason == "invalid_image_column" and "'picture'" in bad.detail


def test_mathvista_rows_read_the_embedded_copy_of_their_image(tmp_path: Path) -> None:
    """MathVista on the Hugging Face hub: ``image`` is the file's name in the dataset's archive, ``decoded_image``
    the image (a struct); the bytes are read, the path only when the row carries no bytes."""
    png = {"bytes": b"\x89PNG\r\n\x1a\n" + b"\0" * 8, "path": None}
    jpg = {"bytes": b"\xff\xd8\xff\xe0" + b"\0" * 8, "path": "1.jpg"}
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "on_disk.png").write_bytes(png["bytes"])
    table = pa.table({"pid": ["1", "2", "3", "4"],
                      "question": ["What is x?", "How many?", "Which?", "Two copies?"],
                      "image": ["images/1.jpg", "images/on_disk.png", "images/3.jpg", "images/4.jpg"],
                      "decoded_image": [jpg, None, None, png], "other": [None, None, None, jpg],
                      "answer": ["3", "2", "A", "1"]})
    pq.write_table(table, tmp_path / "testmini-00000-of-00001.parquet")
    embedded, on_disk, missing, ambiguous = read_records([tmp_path / "testmini-00000-of-00001.parquet"])
    assert embedded["images"] == [jpg["bytes"]] and "decoded_image" not in embedded
    assert embedded["messages"] == [{"role": "user", "content": "<image>\nWhat is x?"},
                                    {"role": "assistant", "content": "3"}]
    assert on_disk["images"] == [str(tmp_path / "images" / "on_disk.png")]  # no bytes in the row: its path
    assert missing["images"] == [str(tmp_path / "images" / "3.jpg")]  # a stage that opens it records missing_image
    # two image structs beside the path: which one is the image is not guessed, the path is read
    assert ambiguous["images"] == [str(tmp_path / "images" / "4.jpg")]


def test_llava_caption_files_and_gzipped_tars_are_read(tmp_path: Path) -> None:
    """LLaVA's COCO caption file (``image`` and a ``captions`` list) and a WebDataset ``.tgz`` shard."""
    row = {"id": "000000296284", "image": "000000296284.jpg", "captions": ["A donut shop.", "Donuts in a case."],
           "instances": [{"category": "donut", "bbox": [0.37, 0.58, 0.5, 0.7]}]}
    (rec,) = read_records([write_jsonl(tmp_path / "caps.jsonl", [json.dumps(row)])])
    assert rec["messages"][1]["content"] == "A donut shop." and rec["captions"] == row["captions"]
    assert rec["images"] == [str(tmp_path / "000000296284.jpg")] and rec["instances"] == row["instances"]
    tgz = write_tgz(tmp_path / "shard-000000.tar.gz", 5)
    parts = split_file(tgz, 2)
    assert [(p.start, p.stop, p.format) for p in parts] == [(0, 2, "tgz"), (2, 4, "tgz"), (4, 5, "tgz")]
    recs = [r for p in parts for r in read_part(p)]
    assert [r["id"] for r in recs] == [f"k{i}" for i in range(5)]
    assert recs[3]["images"] == [b"\xff\xd8\xff image 3"] and recs[3]["messages"][1]["content"] == "caption 3"
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(tgz.read_bytes()[:-40])
    got = list(read_records([cut]))
    assert isinstance(got[-1], BadRecord) and got[-1].reason == "truncated_tar"
