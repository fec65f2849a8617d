"""Files whose headers lie about their size: every count is checked against the file before anything is allocated
from it; a lie is one line naming the file (a whole input) or a named reason (the rows it touches: a tar group, the
rows of a Parquet row group whose page lies)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.core.errors import UserError
from curate.core.formats.containers import ParquetRows, checked_num_rows, Tar, group_row
from curate.core.io import open_input
from curate.fixtures.lying_files import lying_page, lying_parquet, lying_tar, small_rows_table
from tests._fixtures.hostile import run_limited

LIES = {  # what the footer claims → what the one line says
    "rows": ({"num_rows": 2**40}, "the footer claims 1,099,511,627,776 rows, its row groups hold 777"),
    "group": ({"group_rows": 2**40}, "row group 0 claims 1,099,511,627,776 rows; its column 'id' holds 777"),
    "chunk": ({"chunk_bytes": 2**31}, "column 'id' claims 2,147,483,648 bytes at offset 4, past the"),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_parquet_footer_that_lies_is_one_line_naming_the_file(lie: str, tmp_path: Path) -> None:
    claim, said = LIES[lie]
    path = lying_parquet(tmp_path / f"{lie}.parquet", **claim)
    assert path.stat().st_size < 30_000
    with pytest.raises(UserError) as err:
        ParquetRows().split(path, 1000)
    assert str(err.value).startswith(f"{path}: not a readable Parquet file (") and said in str(err.value)
    assert "\n" not in str(err.value)


def test_true_footers_pass(tmp_path: Path) -> None:
    """The checks hold for real files: one group or several, a page index, dictionary pages or none, and a
    column of millions of nulls in a few KB (verified by reading it)."""
    import pyarrow as pa

    table = small_rows_table(3000)
    for i, kw in enumerate([{}, {"row_group_size": 700}, {"write_page_index": True, "compression": "zstd"},
                            {"use_dictionary": False, "data_page_version": "2.0"}]):
        pq.write_table(table, tmp_path / f"{i}.parquet", **kw)
        assert [len(p) for p in ParquetRows().split(tmp_path / f"{i}.parquet", 1000)] == [1000, 1000, 1000]
    pq.write_table(pa.table({"n": pa.array([None] * 3_000_000, pa.int64())}), tmp_path / "nulls.parquet")
    with open_input(tmp_path / "nulls.parquet") as fh:
        assert checked_num_rows(pq.ParquetFile(fh), "nulls", (tmp_path / "nulls.parquet").stat().st_size, fh) == 3_000_000


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["dedup", "match"])
def test_verbs_on_a_lying_parquet_stop_with_one_line_and_bounded_memory(verb: str, tmp_path: Path) -> None:
    """Before: ``curate dedup`` on this 22 KB file built 2^40/1000 parts until the machine ran out of memory."""
    path = lying_parquet(tmp_path / "rows.parquet", group_rows=2**40)
    extra = ["--vocab", str(tmp_path / "v.txt")] if verb == "match" else []
    (tmp_path / "v.txt").write_text("cat\n")
    code, err, peak = run_limited([verb, str(path), *extra, "--out", str(tmp_path / "out")], tmp_path, seconds=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and lines == [f"error: {path}: not a readable Parquet file (row group 0 claims "
                                   "1,099,511,627,776 rows; its column 'id' holds 777)"], err[-2000:]
    assert peak < 2 << 30  # before: 21.7 GB until the OOM killer; a verb and its imports take about 1 GB


#: What a data page claiming 2**31 - 1 bytes uncompressed is told, per codec (the bound it breaks).
PAGE_LIES = {"snappy": "more than SNAPPY expands to", "gzip": "more than GZIP expands to",
             "zstd": "more than ZSTD expands to", "lz4": "more than LZ4 expands to",
             "brotli": "more than its column chunk's"}


def _read(path: Path, rows_per_part: int = 1000) -> list[tuple[int, object, str | None]]:
    reader = ParquetRows()
    return [row for part in reader.split(path, rows_per_part) for row in reader.rows(part, heads=False, views=False)]


@pytest.mark.parametrize("codec", sorted(PAGE_LIES))
def test_a_parquet_page_that_lies_errors_the_rows_of_its_row_group(codec: str, tmp_path: Path) -> None:
    """Each row of the group is errored ``corrupt_row_group``, the detail naming the file, the group, the column, the
    page and its claim (the ids read from the id column, whose pages are honest). Before: pyarrow allocated the claimed
    2 GiB, then said ``Page didn't decompress to expected size`` (or ``malloc of size 2147483648 failed`` under a
    memory limit); then one line stopped the run. The same file without the lie reads its 777 rows."""
    path = lying_page(tmp_path / f"{codec}.parquet", claimed=2**31 - 1, compression=codec)
    assert path.stat().st_size < 30_000
    rows = _read(path)
    assert [r for r, _, _ in rows] == list(range(777))
    assert [raw for _, raw, _ in rows] == [{"id": f"r{i:05d}"} for i in range(777)]
    said = {problem for _, _, problem in rows}
    assert len(said) == 1, said
    said = said.pop()
    assert said.startswith(f"corrupt_row_group:{path}: row group 0, column 'caption': the page at byte "), said
    assert "claims 2,147,483,647 bytes uncompressed" in said and PAGE_LIES[codec] in said and "\n" not in said, said
    assert said.endswith("each of the group's 777 rows is errored"), said
    honest = tmp_path / f"honest-{codec}.parquet"
    pq.write_table(small_rows_table(), honest, compression=codec, use_dictionary=False)
    assert [p for _, _, p in _read(honest)] == [None] * 777


def test_a_lying_page_in_one_of_three_row_groups_errors_that_groups_rows_only(tmp_path: Path) -> None:
    """Groups 0 and 2 are read; each row of group 1 is one errored record (parts of 700 rows cross the groups), so
    records in = out + errored. Before: the whole file, and the run, stopped with one line."""
    from curate.core.records import BadRecord, read_part, split_file

    path = lying_page(tmp_path / "three.parquet", claimed=2**20 - 1, table=small_rows_table(3000),
                      row_group_size=1000, group=1)
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    rows = _read(path, 700)
    assert [r for r, _, _ in rows] == list(range(3000))
    good = [(r, raw) for r, raw, p in rows if p is None]
    assert good == [(i, {"id": f"r{i:05d}", "caption": f"caption {i}"}) for i in [*range(1000), *range(2000, 3000)]]
    bad = [(r, raw, p) for r, raw, p in rows if p is not None]
    assert [(r, raw) for r, raw, _ in bad] == [(i, {"id": f"r{i:05d}"}) for i in range(1000, 2000)]
    said = {p for _, _, p in bad}
    assert len(said) == 1 and re.fullmatch(
        f"corrupt_row_group:{re.escape(str(path))}: row group 1, column 'caption': the page at byte [0-9,]+ claims "
        "1,048,575 bytes uncompressed from [0-9,]+ SNAPPY bytes, more than SNAPPY expands to; a corrupt or forged "
        "page: each of the group's 1,000 rows is errored", said.pop()), said
    records = [rec for part in split_file(path, 700) for rec in read_part(dataclasses.replace(part, text_only=True))]
    errored = [rec for rec in records if isinstance(rec, BadRecord)]
    assert len(records) == 3000 and len(errored) == 1000
    assert {(rec.reason, rec.source) for rec in errored} == {("corrupt_row_group", "three")}
    assert errored[0].id == "r01000" and errored[0].detail.startswith(f"three.parquet row 1000: {path}: row group 1, ")


def test_a_lying_page_in_the_column_a_dense_groups_rows_are_counted_by_is_one_line(tmp_path: Path) -> None:
    """A group of more than 256 rows a byte is counted by reading its smallest column: a page of that column that
    lies leaves the group's row count unproven, so the file is refused (a lie in another column errors the rows)."""
    import pyarrow as pa

    table = pa.table({"n": pa.array([None] * 300_000, pa.int64()),
                      "caption": [f"caption {i % 97}" for i in range(300_000)]})
    dense = lying_page(tmp_path / "dense.parquet", claimed=2**31 - 1, table=table.select(["caption", "n"]))
    with pytest.raises(UserError) as err:
        ParquetRows().split(dense, 100_000)
    assert str(err.value).startswith(f"{dense}: not a readable Parquet file (row group 0, column 'n': the page "), err
    other = lying_page(tmp_path / "other.parquet", claimed=2**31 - 1, table=table)
    rows = _read(other, 100_000)
    assert len(rows) == 300_000 and {p.split(":")[0] for _, _, p in rows} == {"corrupt_row_group"}


def _honest_big_pages(path: Path, codec: str, version: str) -> Path:
    """3,000 rows of an 11,400-character caption (a few long texts repeated): pages of about 11.7 MB that compress to
    a few hundred bytes (Brotli), far above :data:`VERIFIED_CLAIM`."""
    import pyarrow as pa

    texts = [f"caption {k}: a long caption repeated over and over " * 228 for k in range(3)]
    table = pa.table({"id": [f"r{i:05d}" for i in range(3000)], "caption": [texts[i % 3] for i in range(3000)]})
    pq.write_table(table, path, compression=codec, use_dictionary=False, data_page_version=version)
    return path


def _first_page_claim(path: Path) -> int:
    """The uncompressed size the first data page of the last column of the last row group claims."""
    from curate.fixtures.lying_files import _read_varint

    data, meta = path.read_bytes(), pq.ParquetFile(path).metadata
    col = meta.row_group(meta.num_row_groups - 1).column(meta.num_columns - 1)
    _, at = _read_varint(data, col.data_page_offset + 1)
    value, _ = _read_varint(data, at + 1)
    return (value >> 1) ^ -(value & 1)


def test_a_brotli_page_is_held_to_its_real_bytes_not_to_its_ratio_or_footer(tmp_path: Path) -> None:
    """A Brotli page of 724 bytes claiming 2 GiB (below 724 × 2^22) in a footer that agrees (its column chunk's
    uncompressed size raised by the lie) is decompressed as a stream and errored; honest pages of 11.7 MB (Brotli,
    Zstandard, gzip; data pages v1 and v2) are read, and the same pages claiming 1 byte more or the threshold
    (less than they hold) are caught, so the check ran on them. Before: pyarrow reserved the 2 GiB, then failed
    (``Page didn't decompress to expected size``)."""
    from curate.core.formats.containers import MAX_EXPANSION, VERIFIED_CLAIM

    lying = lying_page(tmp_path / "brotli.parquet", claimed=2**31 - 1, compression="brotli", footer_agrees=True)
    col = pq.ParquetFile(lying).metadata.row_group(0).column(1)
    assert col.total_uncompressed_size > 2**31 - 1 and 2**31 - 1 < col.total_compressed_size * MAX_EXPANSION["BROTLI"]
    rows = _read(lying)
    assert len(rows) == 777 and {p.split(":")[0] for _, _, p in rows} == {"corrupt_row_group"}
    assert "claims 2,147,483,647 bytes uncompressed from " in rows[0][2], rows[0][2]
    assert "BROTLI bytes, which decompress to 11,552" in rows[0][2], rows[0][2]
    for codec in ("brotli", "zstd", "gzip"):
        for version in ("1.0", "2.0"):
            honest = _honest_big_pages(tmp_path / f"honest-{codec}-{version}.parquet", codec, version)
            claim = _first_page_claim(honest)
            assert claim > VERIFIED_CLAIM, claim
            assert [p for _, _, p in _read(honest)] == [None] * 3000, (codec, version)
            for lie, said in ((claim + 1, f"which decompress to {claim:,}"),
                              (VERIFIED_CLAIM + 1, "which decompress to more than that")):
                path = lying_page(tmp_path / f"{codec}-{version}-{lie}.parquet", claimed=lie, compression=codec,
                                  table=pq.read_table(honest), footer_agrees=True, data_page_version=version)
                problems = {p for _, _, p in _read(path)}
                assert len(problems) == 1 and said in problems.pop(), (codec, version, lie, problems)


_PEAK = """
import sys
from pathlib import Path
from curate.core.formats.containers import ParquetRows
reader = ParquetRows()
try:
    parts = reader.split(Path(sys.argv[1]), 1000)
    rows = [problem for part in parts for _, _, problem in reader.rows(part, False, False)]
    print(len(rows), sum(1 for p in rows if p and p.startswith("corrupt_row_group:")))
except Exception as exc:
    print(type(exc).__name__, "-")
print(next(int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmPeak")))
"""


@pytest.mark.parametrize("codec", ["snappy", "brotli"])
def test_a_lying_page_is_refused_before_anything_is_allocated_from_it(codec: str, tmp_path: Path) -> None:
    """The peak address space of reading the lying file stays below that of reading the honest one plus 1 GiB; before,
    pyarrow reserved the 2 GiB the page claims (3.7 GB peak against 1.7 GB for the honest file). Snappy is caught by
    its ratio; Brotli (its footer agreeing with the lie, within Brotli's ratio) by decompressing the page as a stream,
    a chunk at a time."""
    import subprocess
    import sys

    lying = lying_page(tmp_path / "lying.parquet", claimed=2**31 - 1, compression=codec, footer_agrees=True)
    honest = tmp_path / "honest.parquet"
    pq.write_table(small_rows_table(), honest, compression=codec, use_dictionary=False)
    root = str(Path(__file__).resolve().parents[4])
    peaks = {}
    for name, path in (("lying", lying), ("honest", honest)):
        out = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, cwd=tmp_path,
                             env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"}, check=True).stdout.split()
        peaks[name] = (out[0], out[1], int(out[2]))
    assert peaks["lying"][:2] == ("777", "777") and peaks["honest"][:2] == ("777", "0"), peaks
    assert peaks["lying"][2] < peaks["honest"][2] + (1 << 30), peaks


def _image_rows(rows: int) -> "pa.Table":
    """``rows`` records of a distinct noise PNG (an image struct) and a caption of about 120 characters."""
    import io

    import numpy as np
    import pyarrow as pa
    from PIL import Image

    rng = np.random.default_rng(5)
    images = []
    for _ in range(rows):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).save(buf, "PNG")
        images.append({"bytes": buf.getvalue(), "path": None})
    return pa.table({"id": [f"r{i:03d}" for i in range(rows)],
                     "image": pa.array(images, pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                     "caption": [f"a photo of noise number {i}, " + "with grey and coloured dots " * 3
                                 for i in range(rows)]})


def _rl_rows(rows: int) -> "pa.Table":
    """``rows`` RL prompts (``q000``...) whose answer is ``i % 7``."""
    import pyarrow as pa

    return pa.table({"id": [f"q{i:03d}" for i in range(rows)], "answer": [str(i % 7) for i in range(rows)],
                     "answer_type": ["number"] * rows,
                     "problem": [f"What is {i % 7} plus zero? Answer with the number, nothing else. " * 2
                                 for i in range(rows)]})


#: The verbs that read Parquet records.
RECORD_VERBS = ["dedup", "match", "pack", "embed", "recaption", "rl-filter", "score"]


@pytest.mark.slow
@pytest.mark.parametrize("verb", RECORD_VERBS)
def test_verbs_on_a_lying_page_error_its_groups_rows_and_read_the_rest(verb: str, tmp_path: Path,
                                                                       request: pytest.FixtureRequest) -> None:
    """300 records in three row groups, group 1's caption (problem) page lying: the run finishes (exit 0, no
    traceback, bounded memory), the 100 records of group 1 are errored ``corrupt_row_group`` under their ids, the 200
    others go through, and records in = out + dropped + errored, per source too. ``score`` counts responses: those of
    the lost prompts are errored ``bad_record``. Before: every verb stopped at once with one line (exit 2)."""
    import json

    rl = verb in ("rl-filter", "score")
    records = lying_page(tmp_path / "rows.parquet", claimed=2**20 - 1, table=_rl_rows(300) if rl else _image_rows(300),
                         row_group_size=100, group=1)
    ids = [f"{'q' if rl else 'r'}{i:03d}" for i in range(300)]
    answers = tmp_path / "answers.jsonl"
    with open(answers, "w") as fh:
        for i, rid in enumerate(ids):
            if rl:
                fh.write("".join(json.dumps({"id": rid, "response": f"<answer>{i % 7 * k}</answer>"}) + "\n"
                                 for k in range(2)))
            else:
                fh.write(json.dumps({"id": f"{rid}#en", "response": "A picture of grey and coloured dots."}) + "\n")
    (tmp_path / "v.txt").write_text("noise\ndots\n")
    args = {"dedup": [records], "match": [records, "--vocab", tmp_path / "v.txt"],
            "pack": [records, "--processor", "{tiny_processor_dir}", "--ctx", "4096"],
            "embed": [records, "--model", "{tiny_clip_spec}"],
            "recaption": [records, "--rollouts", answers, "--langs", "en"],
            "rl-filter": [records, "--rollouts", answers, "--n", "2"],
            "score": ["--records", records, "--responses", answers]}[verb]
    args = [str(request.getfixturevalue(a[1:-1])) if str(a).startswith("{") else str(a) for a in args]
    out = tmp_path / "out"
    code, err, peak = run_limited([verb, *args, "--out", str(out)], tmp_path, seconds=150)
    assert code == 0 and "Traceback" not in err, err[-3000:]
    assert peak < 2 << 30
    stats = json.loads((out / "stats.json").read_text())
    rejects = pq.read_table(out / "rejects.parquet").to_pylist()
    lost = ids[100:200]
    if verb == "score":
        assert stats["errored"] == {"bad_record": 200} and stats["per_source"]["rows"]["scored"] == 400, stats
        assert len(rejects) == 200 and sorted({r["id"] for r in rejects}) == lost
        assert {r["reason"] for r in rejects} == {"bad_record"}
        return
    assert stats["records_in"] == 300 and stats["errored"] == {"corrupt_row_group": 100}, stats
    errored = [r for r in rejects if r["kind"] == "errored"]
    assert [r["id"] for r in errored] == lost and {r["reason"] for r in errored} == {"corrupt_row_group"}
    assert errored[0]["detail"].startswith(f"rows.parquet row 100: {records}: row group 1, column "
                                           f"'{'problem' if rl else 'caption'}': the page at byte "), errored[0]
    source = stats["per_source"]["rows"]
    out_ = source["records_out"] if "records_out" in source else source["kept"]  # rl-filter: kept prompts
    dropped = sum(source["dropped"].values())
    assert source["records_in"] == 300 and source["errored"] == {"corrupt_row_group": 100}, source
    assert out_ + dropped == 200 and out_ > 0, source
    assert {r["id"] for r in rejects if r["kind"] != "errored"} <= set(ids[:100] + ids[200:]), rejects


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["recaption", "rl-filter"])
def test_a_lying_page_in_a_rollouts_file_is_one_line_naming_it(verb: str, tmp_path: Path) -> None:
    """A rollouts file is named by a flag, not read as records: a page of it that lies is one line naming it (exit
    2). Before: ``this input file cannot be read (Page didn't decompress ...)`` after allocating the claim, or a line
    blaming ``--out`` (exit 1)."""
    import pyarrow as pa

    honest = tmp_path / "honest.parquet"
    pq.write_table(_rl_rows(3) if verb == "rl-filter" else small_rows_table(), honest)
    rollouts = lying_page(tmp_path / "answers.parquet", claimed=2**31 - 1,
                          table=pa.table({"id": ["q000"] * 50, "response": ["<answer>0</answer>"] * 50}))
    extra = ["--langs", "en"] if verb == "recaption" else ["--n", "2"]
    code, err, peak = run_limited([verb, str(honest), "--rollouts", str(rollouts), *extra,
                                   "--out", str(tmp_path / "out")], tmp_path, seconds=120)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("match", "recaption"))]
    assert code == 2 and lines == [f"error: {rollouts}: not a readable Parquet file (row group 0, column 'response': "
                                   "the page at byte 77 claims 2,147,483,647 bytes uncompressed from 77 SNAPPY bytes, "
                                   "more than SNAPPY expands to; a corrupt or forged file)"], err[-2000:]
    assert peak < 2 << 30


@pytest.mark.slow
def test_a_lying_page_in_a_responses_file_errors_its_responses(tmp_path: Path) -> None:
    """``score --responses`` reads its responses as rows: those of the lying group are errored
    ``malformed_response``, the detail naming the page; the run finishes. Before: one line stopped it (exit 2)."""
    import json

    import pyarrow as pa

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "q000", "problem": "1 + 1?", "answer": "2", "answer_type": "number"}) + "\n")
    responses = lying_page(tmp_path / "responses.parquet", claimed=2**31 - 1,
                           table=pa.table({"id": ["q000"] * 50, "response": ["<answer>2</answer>"] * 50}))
    out = tmp_path / "out"
    code, err, peak = run_limited(["score", "--records", str(prompts), "--responses", str(responses),
                                   "--out", str(out)], tmp_path, seconds=120)
    assert code == 0 and "Traceback" not in err, err[-3000:]
    assert json.loads((out / "stats.json").read_text())["errored"] == {"malformed_response": 50}
    rejects = pq.read_table(out / "rejects.parquet").to_pylist()
    assert len(rejects) == 50 and {r["id"] for r in rejects} == {"q000"}
    said = rejects[0]["detail"]
    assert said.startswith(f"responses.parquet row 1: corrupt_row_group:{responses}: row group 0, column 'response': "
                           "the page at byte 77 claims 2,147,483,647 bytes "), said
    assert peak < 2 << 30


@pytest.mark.parametrize("kind", ["member", "pax", "longname"])
def test_a_tar_header_that_lies_errors_its_group(kind: str, tmp_path: Path) -> None:
    """A member, PAX header or GNU long name claiming 2^40 bytes: the group is ``truncated_tar`` (the claim is
    past the file's end), read without allocating the claim."""
    path = lying_tar(tmp_path / f"{kind}.tar", claimed=2**40, kind=kind)
    parts = Tar().split(path, 10)
    rows = [(raw, problem) for part in parts for _, raw, problem in Tar().rows(part, heads=False, views=False)]
    said = ("the tar ends at byte 3072, inside a member" if kind == "member" else
            "an extended header at byte 1024 claims 1,099,511,627,776 bytes, past the end of the file (4,096 bytes)")
    assert [p for _, p in rows] == [f"truncated_tar:group a: " + ("" if kind == "member" else
                                                                 "unreadable tar after byte 1024: ") + said], rows
    honest = lying_tar(tmp_path / f"ok-{kind}.tar", claimed={"member": 100, "pax": 14, "longname": 5}[kind], kind=kind)
    with open(honest, "rb") as fh:
        from curate.core.formats.containers import scan_groups
        groups = list(scan_groups(fh, honest.stat().st_size))
        assert [g.key for g in groups] == ["a"] and not groups[0].truncated
        raw, problem = group_row(fh, groups[0])
    assert problem is None and len(raw["images"][0]) == 100
