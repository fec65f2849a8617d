"""curate recaption: known captions from a rollouts file, --mix, resume; the tiny Qwen2-VL locally and served."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from curate.recaption.config import RecaptionConfig
from curate.recaption.checks import REASONS, check_caption
from curate.core.errors import UserError
from curate.recaption.config import DEFAULT_PROMPTS, parse_langs, parse_mix
from curate.recaption.stage import recaption
from curate.core.records import BadRecord, read_records

CAT_EN = "A tabby cat sleeps on a red sofa next to a window with white curtains."
CAT_ZH = "一只虎斑猫趴在红色沙发上睡觉，旁边是一扇挂着白色窗帘的窗户。"
CUP_EN = "A white cup of espresso on a red saucer stands on a wooden table."
CUP_ZH = "木桌上放着一个红色碟子，碟子上是一杯白色杯子装的浓缩咖啡。"
ROCKET_EN = "A rocket stands on its launch pad at dusk under a deep blue sky."


def write_images(folder: Path, count: int, size: int = 56) -> list[Path]:
    """Small distinct RGB images (random noise, seeded)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = folder / f"img{i}.png"
        Image.fromarray(rng.integers(0, 256, (size, size + 8 * i, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")
    return path


def generation(out: Path) -> dict:
    """The backend counters of a run, from history.json (how the run went, not what it gave)."""
    return json.loads((out / "history.json").read_text())["recaption"]["generation"]


def caption_rows(out: Path) -> dict[tuple[str, str], dict]:
    """Rows by (id, lang); the n-th image of a record (n from 2) as (id#n, lang)."""
    return {(r["id"] + (f"#{r['image_index'] + 1}" if r["image_index"] else ""), r["lang"]): r
            for r in pq.read_table(out / "captions.parquet").to_pylist()}


# ---------------------------------------------------------------------------
# Known answers through the rollouts backend
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def designed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Records in several layouts and a rollouts file whose answers exercise every outcome."""
    tmp = tmp_path_factory.mktemp("recaption-designed")
    img = write_images(tmp / "images", 3)
    records = [
        {"id": "r1", "source": "coyo", "images": ["images/img0.png"],
         "messages": [{"role": "user", "content": "<image>\nWhat is this?"}, {"role": "assistant", "content": "cat"}]},
        {"id": "r2", "source": "llava", "image": "images/img1.png",
         "conversations": [{"from": "human", "value": "<image>\nDescribe."}, {"from": "gpt", "value": "a cup"}]},
        {"id": "r3", "source": "coyo", "image": "images/img2.png", "caption": "rocket launch"},
        {"id": "r4", "source": "coyo", "messages": [{"role": "user", "content": "Hi."},
                                                    {"role": "assistant", "content": "A text-only chat."}]},
        {"id": "r5", "source": "llava", "images": ["images/img0.png", "images/img1.png"],
         "messages": [{"role": "user", "content": "<image><image>\nCompare."}, {"role": "assistant", "content": "two"}]},
        {"id": "r6", "source": "llava", "image": "images/img1.png", "caption": "no stored answers for this one"},
        '{"id": "r7", "caption": ',  # a torn line
    ]
    src = jsonl(tmp / "records.jsonl", records)
    answers = [
        # r1: chat artefacts around good captions -> both kept, first try
        ("r1#en", f"Sure! Here is a detailed caption of the image:\n\n**{CAT_EN}**"),
        ("r1#zh", f"<think>用户需要中文描述。</think>好的，以下是图片的描述：\n「{CAT_ZH}」"),
        # r2: en refused, retry good -> kept after retry; zh in English twice -> language, 2 attempts
        ("r2#en", "I'm sorry, but I can't help with that image."),
        ("r2#en#retry", f"```\n{CUP_EN}\n```"),
        ("r2#zh", CUP_EN),
        ("r2#zh#retry", "A cup of coffee on a table, seen from above with a spoon beside it."),
        # r3: en loops twice -> repetition; zh refused and no retry stored -> refusal (the retry failed: no_rollouts)
        ("r3#en", "A rocket. A rocket. A rocket. A rocket. A rocket."),
        ("r3#en#retry", "Rocket rocket rocket rocket on the pad."),
        ("r3#zh", "抱歉，我无法查看这张图片。"),
        # r5: every image is captioned (its second under the key r5#2#LANG); the second's zh answer is English
        ("r5#en", ROCKET_EN),
        ("r5#zh", CUP_ZH),
        ("r5#2#en", CAT_EN),
        ("r5#2#zh", CAT_EN),
        ("r5#2#zh#retry", CAT_ZH),
    ]
    rollouts = jsonl(tmp / "answers.jsonl", [{"id": k, "response": v} for k, v in answers])
    expected = {  # (id, lang) -> (caption or None, error or None, attempts)
        ("r1", "en"): (CAT_EN, None, 1), ("r1", "zh"): (CAT_ZH, None, 1),
        ("r2", "en"): (CUP_EN, None, 2), ("r2", "zh"): (None, "language", 2),
        ("r3", "en"): (None, "repetition", 2), ("r3", "zh"): (None, "refusal", 2),
        ("r5", "en"): (ROCKET_EN, None, 1), ("r5", "zh"): (CUP_ZH, None, 1),
        ("r5#2", "en"): (CAT_EN, None, 1), ("r5#2", "zh"): (CAT_ZH, None, 2),
        ("r6", "en"): (None, "no_rollouts", 1), ("r6", "zh"): (None, "no_rollouts", 1),
    }
    return {"src": src, "rollouts": rollouts, "expected": expected, "images": img, "tmp": tmp}


def test_known_captions_records_and_accounting(designed: dict, tmp_path: Path) -> None:
    out = tmp_path / "o"
    stats = recaption([str(designed["src"])], RecaptionConfig(out=out, backend={"rollouts": str(designed["rollouts"])}))
    rows = caption_rows(out)
    expected = designed["expected"]
    assert set(rows) == set(expected)  # every image x language of a record with an image, nothing else
    for key, (caption, error, attempts) in expected.items():
        row = rows[key]
        assert (row["caption"], row["error"], row["attempts"]) == (caption, error, attempts), (key, row)
    assert rows[("r5", "en")]["image"] == str(designed["images"][0])
    assert rows[("r5#2", "en")]["image"] == str(designed["images"][1]) and rows[("r5#2", "en")]["image_index"] == 1
    assert "retry failed: no_rollouts" in rows[("r3", "zh")]["detail"]
    assert all(r["model"] == "rollouts:answers.jsonl" for r in rows.values())

    # records.jsonl: one canonical conversation per kept caption, readable by curate's own reader
    recs = list(read_records([out / "records.jsonl"]))
    assert not any(isinstance(r, BadRecord) for r in recs)
    kept = {k: v for k, v in expected.items() if v[1] is None}
    # input order, images in record order, languages in --langs order; the second image's ids are r5#2#LANG
    assert [r["id"] for r in recs] == [f"{i}#{lang}" for i, lang in kept]
    source_of = {"r1": "coyo", "r2": "llava", "r3": "coyo", "r5": "llava", "r5#2": "llava", "r6": "llava"}
    for rec in recs:
        rid, lang = rec["id"].rsplit("#", 1)
        assert rec["source"] == source_of[rid] and rec["lang"] == lang and rec["recaption_of"] == rid.split("#")[0]
        assert rec["messages"] == [{"role": "user", "content": "<image>\n" + DEFAULT_PROMPTS[lang]},
                                   {"role": "assistant", "content": kept[(rid, lang)][0]}]
        assert len(rec["images"]) == 1 and Path(rec["images"][0]).is_file()

    # records: in = out + dropped + errored; out = at least one caption kept
    assert stats["records_in"] == 7
    assert stats["records_out"] == 3  # r1, r2, r5
    assert stats["dropped"] == {"no_image": 1, "repetition": 1}  # r4; r3 by the reason of its first language
    assert stats["errored"] == {"malformed_json": 1, "no_rollouts": 1}  # r7, r6
    rejects = {r["id"]: r for r in pq.read_table(out / "rejects.parquet").to_pylist()}
    assert {i: (r["kind"], r["reason"]) for i, r in rejects.items()} == {
        "r3": ("dropped", "repetition"), "r4": ("dropped", "no_image"),
        "r6": ("errored", "no_rollouts"), "records:7": ("errored", "malformed_json")}

    # stats.json: per source and language, from the rows above
    on_disk = json.loads((out / "stats.json").read_text())
    assert on_disk["captions"] == stats["captions"]
    for source in ("coyo", "llava"):
        for lang in ("en", "zh"):
            mine = [(k, v) for k, v in expected.items() if source_of[k[0]] == source and k[1] == lang]
            got = on_disk["per_source"][source]["captions"][lang]
            assert got["images"] == len(mine)
            assert got["kept"] == sum(v[1] is None for _, v in mine)
            assert got["failed"] == dict(Counter(v[1] for _, v in mine if v[1] is not None))
            lengths = [len(v[0]) for _, v in mine if v[0] is not None]
            assert got["mean_chars"] == (round(sum(lengths) / len(lengths), 1) if lengths else None)
            assert got["attempts"] == sum(v[2] for _, v in mine)
    assert on_disk["per_source"]["coyo"]["records_in"] == 3 and on_disk["per_source"]["coyo"]["records_out"] == 1
    assert on_disk["images_captioned"] == 6  # r1, r2, r3, r5 (two), r6
    # generation: 12 first requests + 5 retries (r2 en/zh, r3 en/zh, r5#2 zh); the rollouts backend errs on 3
    history = json.loads((out / "history.json").read_text())["recaption"]
    assert "generation" not in on_disk and "timings" not in on_disk  # how the run went: history.json
    assert history["generation"]["requests"] == 17
    assert history["generation"]["errors"] == 3
    assert on_disk["captions"]["retried"] == 5 and on_disk["captions"]["kept_after_retry"] == 2


def test_resume_never_regenerates(designed: dict, tmp_path: Path) -> None:
    out = tmp_path / "o"
    args = dict(backend={"rollouts": str(designed["rollouts"])}, shard_size=3)
    recaption([str(designed["src"])], RecaptionConfig(out=out, **args))
    first = {"generation": generation(out)}
    files = {name: (out / name).read_bytes() for name in ("captions.parquet", "records.jsonl", "rejects.parquet")}
    journals = sorted((out / "_journal" / "recaption").glob("*.jsonl"))
    lines = {p: p.read_text(encoding="utf-8").splitlines() for p in journals}
    assert sum(len(v) for v in lines.values()) == first["generation"]["requests"] - first["generation"]["errors"]

    # as if killed: no markers, and the last answer of each journal torn in half
    for marker in (out / "_shards" / "recaption").glob("0*.json"):
        marker.unlink()
    torn = 0
    for p, content in lines.items():
        if content:
            p.write_text("\n".join(content[:-1] + [content[-1][: len(content[-1]) // 2]]), encoding="utf-8")
            torn += 1
    recaption([str(designed["src"])], RecaptionConfig(out=out, **args))
    again = {"generation": generation(out)}
    # only the torn answers and the backend failures (never journaled) are asked again
    assert again["generation"]["requests"] == torn + first["generation"]["errors"]
    for name, data in files.items():
        assert (out / name).read_bytes() == data, name

    # a third run after deleting the markers again asks for nothing but the failures
    for marker in (out / "_shards" / "recaption").glob("0*.json"):
        marker.unlink()
    recaption([str(designed["src"])], RecaptionConfig(out=out, **args))
    third = {"generation": generation(out)}
    assert third["generation"]["requests"] == first["generation"]["errors"]
    assert (out / "captions.parquet").read_bytes() == files["captions.parquet"]

    with pytest.raises(UserError, match="other settings"):
        recaption([str(designed["src"])], RecaptionConfig(out=out, prompt_en="Caption this.", **args))


def test_greedy_skips_the_retry_and_duplicates_are_errored(designed: dict, tmp_path: Path) -> None:
    recs = [json.loads(line) for line in designed["src"].read_text(encoding="utf-8").splitlines()[:2]]
    for rec in recs:  # images relative to the original folder
        rec.pop("image", None)
        rec["images"] = [str(designed["images"][0])]
    src = jsonl(tmp_path / "dup.jsonl", [recs[0], recs[1], {**recs[1], "source": "other"}])
    stats = recaption([str(src)], RecaptionConfig(out=tmp_path / "o", backend={"rollouts": str(designed["rollouts"])},
                                                  temperature=0.0))
    rows = caption_rows(tmp_path / "o")
    assert (rows[("r2", "en")]["error"], rows[("r2", "en")]["attempts"]) == ("refusal", 1)  # greedy: no retry
    assert generation(tmp_path / "o")["requests"] == 4
    assert stats["errored"] == {"duplicate_id": 1} and stats["per_source"]["other"]["errored"] == {"duplicate_id": 1}
    # r1 is out; r2 has no caption left (en refused, zh in English): dropped by its first language's reason
    assert stats["records_out"] == 1 and stats["dropped"] == {"refusal": 1}


def test_mix_proportions_sharding_and_order(tmp_path: Path) -> None:
    img = write_images(tmp_path / "images", 1)[0]
    n = 400
    recs = [{"id": f"m{i:04d}", "source": "web" if i % 3 else "book", "image": str(img), "caption": "x"}
            for i in range(n)]
    src = jsonl(tmp_path / "mix.jsonl", recs)
    rev = jsonl(tmp_path / "rev.jsonl", recs[::-1])
    answers = [{"id": f"{r['id']}#en", "response": f"Photo {i} shows a small square of noise on a plain background."}
               for i, r in enumerate(recs)]
    answers += [{"id": f"{r['id']}#zh", "response": f"第{i}张照片展示了一小块随机噪声图案。"} for i, r in enumerate(recs)]
    rollouts = jsonl(tmp_path / "answers.jsonl", answers)
    backend = {"rollouts": str(rollouts)}

    stats = recaption([str(src)], RecaptionConfig(out=tmp_path / "a", backend=backend, mix="en=0.76,zh=0.24", seed=3))
    rows = pq.read_table(tmp_path / "a" / "captions.parquet").to_pylist()
    assert len(rows) == n and len({r["id"] for r in rows}) == n  # exactly one caption per image
    share = sum(r["lang"] == "en" for r in rows) / n
    # binomial sd at n=400, p=0.76 is 0.0214: accept within 3 sd
    assert abs(share - 0.76) <= 0.065, share
    assert stats["records_out"] == n and all(r["error"] is None for r in rows)
    assert stats["settings"]["mix"] == {"en": 0.76, "zh": 0.24}

    # the draw is keyed on the record id: other shards and reversed input give the same languages
    recaption([str(rev)], RecaptionConfig(out=tmp_path / "b", backend=backend, mix={"en": 76, "zh": 24}, seed=3,
                                          shard_size=37))
    langs_a = {r["id"]: r["lang"] for r in rows}
    langs_b = {r["id"]: r["lang"] for r in pq.read_table(tmp_path / "b" / "captions.parquet").to_pylist()}
    assert langs_a == langs_b
    # another seed draws differently; the language-only mix gives one language
    recaption([str(src)], RecaptionConfig(out=tmp_path / "c", backend=backend, mix="en=0.76,zh=0.24", seed=4))
    langs_c = {r["id"]: r["lang"] for r in pq.read_table(tmp_path / "c" / "captions.parquet").to_pylist()}
    assert 0 < sum(langs_a[k] != langs_c[k] for k in langs_a) < n
    recaption([str(src)], RecaptionConfig(out=tmp_path / "d", backend=backend, mix="zh=1", seed=3, shard_size=150))
    assert {r["lang"] for r in pq.read_table(tmp_path / "d" / "captions.parquet").to_pylist()} == {"zh"}


def test_flags_are_checked() -> None:
    assert parse_langs(None) == ["en", "zh"] and parse_langs(" zh ") == ["zh"]
    assert parse_mix("en=3,zh=1") == {"en": 0.75, "zh": 0.25}
    assert parse_langs("en,fr,ja") == ["en", "fr", "ja"]  # any language py3langid identifies
    for bad in ("en,xx", "en,en", ""):
        with pytest.raises(UserError, match="langs"):
            parse_langs(bad)
    assert parse_mix("en=1,fr=1") == {"en": 0.5, "fr": 0.5}
    for bad in ("en=0.7,zh", "en=x", "qq=1", "en=-1,zh=2", "en=0,zh=0", "en=1,en=2"):
        with pytest.raises(UserError, match="mix"):
            parse_mix(bad)


def test_any_language_with_a_language_check(designed: dict, tmp_path: Path) -> None:
    """--langs takes any code py3langid identifies: a French caption is kept, an English one asked in German is
    dropped as 'language'; the prompt names the language (issue 49)."""
    fr = "Un chat tigré dort sur un canapé rouge près d'une fenêtre aux rideaux blancs."
    rollouts = jsonl(tmp_path / "answers.jsonl", [{"id": k, "response": v} for k, v in [
        ("r1#fr", fr), ("r1#de", CAT_EN), ("r1#de#retry", CAT_EN)]])
    out = tmp_path / "o"
    recaption([str(designed["src"])], RecaptionConfig(out=out, backend={"rollouts": str(rollouts)}, langs="fr,de"))
    rows = caption_rows(out)
    assert rows[("r1", "fr")]["caption"] == fr and rows[("r1", "fr")]["error"] is None
    assert rows[("r1", "de")]["error"] == "language" and "identified as en, not de" in rows[("r1", "de")]["detail"]
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in recs] == ["r1#fr"]
    assert "in French" in recs[0]["messages"][0]["content"]


def test_cli_verb(designed: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from curate.cli import main

    out = tmp_path / "cli"
    main(["recaption", str(designed["src"]), "--rollouts", str(designed["rollouts"]), "--langs", "en",
          "--prompt-en", "Caption the picture in one sentence.", "--out", str(out)])
    text = capsys.readouterr().err
    assert "captioned 3 of 7 records" in text.replace("\n", " ")
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in recs] == ["r1#en", "r2#en", "r5#en", "r5#2#en"]
    assert recs[0]["messages"][0]["content"] == "<image>\nCaption the picture in one sentence."
    for argv, message in ((["--mix", "en=1", "--langs", "zh"], "--mix names en"),
                          (["--langs", "en,xx"], "--langs 'en,xx': unknown language code 'xx'"),
                          (["--model", str(tmp_path / "nope")], "no such checkpoint folder"),
                          (["--prompt-zh", "<image><image>请描述。"], "at most one <image>")):
        with pytest.raises(SystemExit) as exc:
            main(["recaption", str(designed["src"]), "--out", str(tmp_path / "bad"),
                  *(["--rollouts", str(designed["rollouts"])] if "--model" not in argv else []), *argv])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and message in err and "\n" not in err


# ---------------------------------------------------------------------------
# The tiny Qwen2-VL: random multilingual text, so most captions fail and get retried
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_records(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    tmp = tmp_path_factory.mktemp("recaption-tiny")
    imgs = write_images(tmp / "images", 4)
    recs = [{"id": f"t{i}", "source": "web" if i % 2 else "book", "image": str(p), "caption": "old"}
            for i, p in enumerate(imgs)]
    recs.append({"id": "t-missing", "source": "web", "image": str(tmp / "images" / "gone.png"), "caption": "old"})
    recs.append({"id": "t-noimage", "source": "web", "caption": "old"})
    return jsonl(tmp / "records.jsonl", recs), [r["id"] for r in recs]


def check_accounting(out: Path, stats: dict, ids: list[str], model: str) -> list[dict]:
    """Every image x language has a row with a caption that passes the checks or a reason; retries happened."""
    rows = pq.read_table(out / "captions.parquet").to_pylist()
    with_image = [i for i in ids if i not in ("t-noimage", "t-missing")]  # both errored before any request
    assert sorted((r["id"], r["lang"]) for r in rows) == sorted((i, lang) for i in with_image for lang in ("en", "zh"))
    for r in rows:
        assert r["model"] == model
        if r["error"] is None:
            assert check_caption(r["raw"], r["lang"], truncated=r["truncated"]).caption == r["caption"]
        else:
            assert r["error"] in REASONS, r
            # the checks fail on the answer that was kept as raw
            assert check_caption(r["raw"], r["lang"], truncated=r["truncated"]).reason == r["error"]
            assert r["attempts"] == 2  # a failed check is always retried once
    retried = sum(r["attempts"] == 2 for r in rows)
    assert retried >= 4  # random text: most first answers fail
    assert generation(out)["requests"] == len(rows) + retried
    assert stats["captions"]["attempts"] == len(rows) + retried
    assert stats["records_in"] == len(ids)
    assert stats["records_in"] == stats["records_out"] + sum(stats["dropped"].values()) + sum(stats["errored"].values())
    # a caption without an image is errored as it is read (missing_image, as in every stage); so is a missing file
    assert not stats["dropped"].get("no_image") and stats["errored"].get("missing_image") == 2
    kept_ids = {r["id"] for r in rows if r["error"] is None}
    assert stats["records_out"] == len(kept_ids)
    return rows


def test_tiny_vlm_transformers(tiny_vlm_dir: Path, small_records: tuple[Path, list[str]], tmp_path: Path) -> None:
    src, ids = small_records
    backend = {"model": str(tiny_vlm_dir), "device": "cpu"}
    sampling = {"max_new_tokens": 12, "temperature": 1.0, "top_p": 1.0}
    stats = recaption([str(src)], RecaptionConfig(out=tmp_path / "a", backend=backend, **sampling, seed=1))
    rows = check_accounting(tmp_path / "a", stats, ids, model=tiny_vlm_dir.name)
    # journal: every answer obtained, first and retry, keyed <id>#<lang>[#retry]
    entries = [json.loads(line) for p in (tmp_path / "a" / "_journal" / "recaption").glob("*.jsonl")
               for line in p.read_text(encoding="utf-8").splitlines()]
    answered = [r for r in rows if r["raw"] is not None]
    assert len(entries) == len(answered) + sum(r["attempts"] == 2 for r in answered)
    assert {e["key"] for e in entries} >= {f"{r['id']}#{r['lang']}" for r in answered}
    # deterministic for a seed, whatever the sharding
    recaption([str(src)], RecaptionConfig(out=tmp_path / "b", backend=backend, **sampling, seed=1, shard_size=2))
    assert pq.read_table(tmp_path / "b" / "captions.parquet").to_pylist() == rows


def test_tiny_vlm_served(tiny_vlm_server, small_records: tuple[Path, list[str]], tmp_path: Path) -> None:
    src, ids = small_records
    backend = {"endpoint": tiny_vlm_server.url + "/v1", "served_model": tiny_vlm_server.model, "concurrency": 2,
               "max_retries": 1}
    stats = recaption([str(src)], RecaptionConfig(out=tmp_path / "s", backend=backend, max_new_tokens=12,
                                                  temperature=1.0, top_p=1.0))
    check_accounting(tmp_path / "s", stats, ids, model=tiny_vlm_server.model)
    assert stats["settings"]["backend"]["backend"] == "openai"
    # the missing image is refused by the image gate before any request: nothing asked, nothing failed
    assert generation(tmp_path / "s")["errors"] == 0, generation(tmp_path / "s")
