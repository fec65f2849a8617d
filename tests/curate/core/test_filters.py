"""A filter stage is one class plus one ``StageSpec`` row: ``MinWords`` below (drop records whose caption has
fewer than N words) gets its verb, recipes, the report funnel and resume from :mod:`curate.core.filters` and
:func:`curate.executors.filters.run_filter`
(``tests/curate/executors/test_ray.py``, case ``min-words``: the same bytes on Ray)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from curate.cli import cli
from curate.core.threads import environ
from curate.core.filters import FilterConfig, FilterResult, RecordFilter, write_kept
from curate.executors.filters import run_filter
from curate.core.settings import setting
from curate.core.shards import SHARDS_DIR, plan_shards
from curate.stages import STAGES, StageSpec


# ---------------------------------------------------------------------- the whole stage: one class, one row
@dataclass
class MinWords(RecordFilter):
    """Drop records whose caption (the answer turns) has fewer than --min-words words."""

    stage = "min-words"
    min_words: int = setting(3, help="Drop records whose caption has fewer words than this.")

    def verdict(self, record: dict[str, Any]) -> Any:
        words = len(" ".join(m["content"] for m in record["messages"] if m["role"] == "assistant").split())
        return None if words >= self.min_words else ("short_caption", f"{words} words, fewer than {self.min_words}")


SPEC = StageSpec("min-words", "filters", "Drop records whose caption is shorter than N words.",
                 main_output=("records.jsonl", "records.parquet"), report=True, filter=MinWords)


# ---------------------------------------------------------------------- inputs and helpers
CAPTIONS = ["a cat", "a tabby cat asleep", "dog", "two dogs run on the beach", "ok", "red car parked",
            "one", "a b c d", "sky at dusk", "x y"]


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The row added to the table for one test (the generated verb removed after it)."""
    monkeypatch.setitem(STAGES, SPEC.name, SPEC)
    yield SPEC
    cli.commands.pop(SPEC.name, None)


def _png(i: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (i * 20 % 256, 40, 90)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """Two JSONL files (relative image paths, an extra column, one unreadable line) in one folder."""
    folder = tmp_path / "in"
    (folder / "img").mkdir(parents=True)
    for i in range(len(CAPTIONS)):
        (folder / "img" / f"{i}.png").write_bytes(_png(i))
    for name, rows in (("web", range(0, 6)), ("books", range(6, 10))):
        lines = [json.dumps({"id": f"r{i}", "images": [f"img/{i}.png"], "caption": CAPTIONS[i], "extra": i})
                 for i in rows]
        if name == "web":
            lines.insert(2, "{not json")
        (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _expected_rows(folder: Path, n: int) -> list[dict[str, Any]]:
    """The input rows a caption filter of ``n`` words keeps, in input order (books before web: sorted files),
    with their image paths resolved to the input folder."""
    out = []
    for name in ("books", "web"):
        for line in (folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if len(row["caption"].split()) >= n:
                out.append({**row, "images": [str(folder / p) for p in row["images"]]})
    return out


def _main(args: list[str]) -> None:
    cli.main(args=args, prog_name="curate", standalone_mode=False)


def _files(out: Path) -> dict[str, bytes]:
    """Every output file but the run's history, the report and work folders."""
    skip = {"history.json", "report", ".tmp", ".curate.lock"}
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not skip & set(p.relative_to(out).parts)}


# ---------------------------------------------------------------------- the verb, the report funnel
def test_the_row_makes_the_verb_and_the_report(registered: StageSpec, inputs: Path, tmp_path: Path) -> None:
    from curate.cli.group import command
    from curate.core.progress import console

    verb = command("min-words")
    assert verb is not None and verb.callback.__module__ == "curate.verbs.filters"
    flags = {opt for p in verb.params for opt in getattr(p, "opts", [])}
    assert {"--min-words", "--out", "--shard-size", "--image-root", "--executor", "--workers", "--seed"} <= flags
    out = tmp_path / "out"
    with environ({"CURATE_REPORT": "1"}), console.capture() as captured:
        _main(["min-words", str(inputs), "--min-words", "3", "--shard-size", "3", "--out", str(out)])
    said = captured.get()
    expected = _expected_rows(inputs, 3)
    assert f"kept {len(expected)} of 11 records" in said, said
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert rows == expected  # the input rows, their layout and extra column kept, paths pointing at the images
    assert all(Path(r["images"][0]).read_bytes() == _png(int(r["id"][1:])) for r in rows)
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    short = sum(len(c.split()) < 3 for c in CAPTIONS)
    assert stats["stage"] == "min-words" and stats["settings"] == {"min_words": 3}
    assert (stats["records_in"], stats["records_out"], stats["dropped"], stats["errored"]) == \
        (11, len(expected), {"short_caption": short}, {"malformed_json": 1})
    assert stats["per_source"]["books"]["records_out"] == sum(len(CAPTIONS[i].split()) >= 3 for i in range(6, 10))
    rejects = pq.read_table(out / "rejects.parquet").to_pylist()
    assert sorted(r["id"] for r in rejects if r["reason"] == "short_caption") == \
        sorted(f"r{i}" for i, c in enumerate(CAPTIONS) if len(c.split()) < 3)
    assert next(r for r in rejects if r["id"] == "r2")["detail"] == "1 words, fewer than 3"
    page = (out / "report" / "index.html").read_text(encoding="utf-8")  # written by the report hook after the verb
    assert "min-words" in page and "short_caption" in page and "malformed_json" in page


def test_image_bytes_stay_bytes(inputs: Path, tmp_path: Path) -> None:
    """Rows whose images are bytes come back as Parquet with the ``datasets`` image struct, the same bytes."""
    table = pa.table({"id": [f"p{i}" for i in range(4)], "caption": ["one two three", "no", "four five six", "x"],
                      "image": [{"bytes": _png(i), "path": None} for i in range(4)]})
    src = tmp_path / "bytes"
    src.mkdir()
    pq.write_table(table, src / "part.parquet")
    result = run_filter([src], FilterConfig(out=tmp_path / "out", shard_size=2), MinWords(min_words=3))
    assert isinstance(result, FilterResult) and result.records_file == "records.parquet"
    assert (result.records_in, result.records_out, result.dropped) == (4, 2, {"short_caption": 2})
    rows = pq.read_table(tmp_path / "out" / "records.parquet").to_pylist()
    assert [(r["id"], r["image"]["bytes"]) for r in rows] == [("p0", _png(0)), ("p2", _png(2))]
    assert not (tmp_path / "out" / "records.jsonl").exists()


# ---------------------------------------------------------------------- resume, kill-free
def test_a_rerun_skips_done_shards_and_a_lost_marker_reruns_that_shard(inputs: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = FilterConfig(out=out, shard_size=3)
    first = run_filter([inputs], config, MinWords(min_words=3))
    before = _files(out)
    markers = sorted((out / SHARDS_DIR / "min-words").glob("0*.json"))
    markers = [m for m in markers if not m.name.endswith(".rejects.parquet")]
    assert len(markers) == len(plan_shards([inputs], 3)) > 2
    stamps = {m.name: m.stat().st_mtime_ns for m in markers}
    again = run_filter([inputs], config, MinWords(min_words=3))
    assert {m.name: m.stat().st_mtime_ns for m in markers} == stamps  # no shard ran again
    assert _files(out) == before and again.stats == first.stats
    history = json.loads((out / "history.json").read_text(encoding="utf-8"))
    assert [run["shards_reused"] for run in history["min-words"]["runs"]] == [0, len(markers)]
    markers[1].unlink()
    (out / "records" / "000001.jsonl").unlink()
    run_filter([inputs], config, MinWords(min_words=3))
    rerun = {m.name: m.stat().st_mtime_ns for m in markers}
    assert [n for n in rerun if rerun[n] != stamps[n]] == [markers[1].name]  # that shard only
    assert _files(out) == before  # the same bytes
    with pytest.raises(Exception, match="other settings"):  # another threshold is another run
        run_filter([inputs], config, MinWords(min_words=4))


# ---------------------------------------------------------------------- recipes
def test_a_recipe_runs_the_filter_like_the_verb_by_hand(registered: StageSpec, inputs: Path, tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"""description: two caption filters in a row
out: {tmp_path / 'run'}
inputs:
  captions: {inputs}
steps:
  - name: loose
    verb: min-words
    input: captions
    options: {{min-words: 2, shard-size: 4}}
  - name: strict
    verb: min-words
    input: loose
    options: {{min-words: 4, shard-size: 4}}
""", encoding="utf-8")
    _main(["run", str(recipe)])
    by_hand = tmp_path / "hand"
    _main(["min-words", str(inputs), "--min-words", "2", "--shard-size", "4", "--out", str(by_hand / "01-loose")])
    _main(["min-words", str(tmp_path / "run" / "01-loose" / "records.jsonl"), "--min-words", "4", "--shard-size",
           "4", "--out", str(by_hand / "02-strict")])
    for step in ("01-loose", "02-strict"):
        ours, theirs = _files(tmp_path / "run" / step), _files(by_hand / step)
        assert ours.keys() == theirs.keys()
        for name in ours:
            if name != "stats.json":  # its command line differs
                assert ours[name] == theirs[name], (step, name)
    kept = [json.loads(line)["id"] for line in
            (tmp_path / "run" / "02-strict" / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert kept == [r["id"] for r in _expected_rows(inputs, 4)]


# ---------------------------------------------------------------------- the one writer
def test_write_kept_takes_lines_and_annotates(tmp_path: Path) -> None:
    parts = []
    for k in range(3):
        part = tmp_path / f"{k}.jsonl"
        part.write_text("".join(json.dumps({"id": f"{k}-{i}"}) + "\n" for i in range(3)), encoding="utf-8")
        parts.append(part)
    name = write_kept(tmp_path, "kept", parts, take=[[2], [], [0, 1]],
                      annotate=lambda j, row: row.update(rank=j))
    rows = [json.loads(line) for line in (tmp_path / name).read_text(encoding="utf-8").splitlines()]
    assert rows == [{"id": "0-2", "rank": 0}, {"id": "2-0", "rank": 1}, {"id": "2-1", "rank": 2}]
    assert write_kept(tmp_path, "all", parts) == "all.jsonl"
    assert (tmp_path / "all.jsonl").read_bytes() == b"".join(p.read_bytes() for p in parts)


# ---------------------------------------------------------------------- --out in a bucket
def test_out_in_a_bucket_holds_the_local_bytes(bucket: str, inputs: Path, tmp_path: Path) -> None:
    """A filter stage writes into a bucket (a real S3 server on loopback) through its staging folder: the same
    files as locally, and a rerun finds every shard done there."""
    from tests._fixtures.s3 import bucket_objects, folder_files

    patterns = ("records.jsonl", "records/*.jsonl", "rejects.parquet", f"{SHARDS_DIR}/min-words/0*")
    run_filter([inputs], FilterConfig(out=tmp_path / "local", shard_size=3), MinWords(min_words=3))
    remote = f"{bucket}/filtered"
    result = run_filter([inputs], FilterConfig(out=remote, shard_size=3), MinWords(min_words=3))
    assert result.records_out == 5
    ours, local = bucket_objects(remote, patterns), folder_files(tmp_path / "local", patterns)
    assert ours.keys() == local.keys() and len(ours) > 3
    assert all(ours[k] == local[k] for k in ours if not k.startswith(SHARDS_DIR)
               or k.endswith(".parquet"))  # markers hold timings
    again = run_filter([inputs], FilterConfig(out=remote, shard_size=3), MinWords(min_words=3))
    assert again.records_out == 5
    assert bucket_objects(remote, ("records.jsonl",)) == {"records.jsonl": local["records.jsonl"]}
