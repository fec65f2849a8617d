"""Files whose headers lie about their size: every count is checked against the file before anything is allocated
from it; a lie is one line naming the file (a whole input) or a named reason (one row of it)."""

from __future__ import annotations

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


#: What the one line says of a data page claiming 2**31 - 1 bytes uncompressed, per codec (the bound it breaks).
PAGE_LIES = {"snappy": "more than SNAPPY expands to", "gzip": "more than GZIP expands to",
             "zstd": "more than ZSTD expands to", "lz4": "more than LZ4 expands to",
             "brotli": "more than its column chunk's"}


@pytest.mark.parametrize("codec", sorted(PAGE_LIES))
def test_a_parquet_page_that_lies_is_one_line_naming_the_file(codec: str, tmp_path: Path) -> None:
    """Before: pyarrow allocated the claimed 2 GiB, then said ``Page didn't decompress to expected size`` (or
    ``malloc of size 2147483648 failed`` under a memory limit); the same file without the lie reads its 777 rows."""
    path = lying_page(tmp_path / f"{codec}.parquet", claimed=2**31 - 1, compression=codec)
    assert path.stat().st_size < 30_000
    reader = ParquetRows()
    with pytest.raises(UserError) as err:
        [row for part in reader.split(path, 1000) for row in reader.rows(part, heads=False, views=False)]
    said = str(err.value)
    assert said.startswith(f"{path}: not a readable Parquet file (row group 0, column 'caption': the page at byte "), said
    assert "claims 2,147,483,647 bytes uncompressed" in said and PAGE_LIES[codec] in said and "\n" not in said, said
    honest = tmp_path / f"honest-{codec}.parquet"
    pq.write_table(small_rows_table(), honest, compression=codec, use_dictionary=False)
    assert sum(len(list(reader.rows(p, heads=False, views=False))) for p in reader.split(honest, 1000)) == 777


_PEAK = """
import sys
from pathlib import Path
from curate.core.formats.containers import ParquetRows
reader = ParquetRows()
try:
    print(sum(1 for part in reader.split(Path(sys.argv[1]), 1000) for _ in reader.rows(part, False, False)))
except Exception as exc:
    print(type(exc).__name__)
print(next(int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmPeak")))
"""


def test_a_lying_page_is_refused_before_anything_is_allocated_from_it(tmp_path: Path) -> None:
    """The peak address space of reading the lying file stays below that of reading the honest one plus 1 GiB; before,
    pyarrow reserved the 2 GiB the page claims (3.7 GB peak against 1.7 GB for the honest file)."""
    import subprocess
    import sys

    lying = lying_page(tmp_path / "lying.parquet", claimed=2**31 - 1)
    honest = tmp_path / "honest.parquet"
    pq.write_table(small_rows_table(), honest, use_dictionary=False)
    root = str(Path(__file__).resolve().parents[4])
    peaks = {}
    for name, path in (("lying", lying), ("honest", honest)):
        out = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True, text=True, cwd=tmp_path,
                             env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"}, check=True).stdout.split()
        peaks[name] = (out[0], int(out[1]))
    assert peaks["lying"][0] == "FooterLie" and peaks["honest"][0] == "777", peaks
    assert peaks["lying"][1] < peaks["honest"][1] + (1 << 30), peaks


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["dedup", "score", "responses", "recaption"])
def test_verbs_on_a_lying_page_stop_with_one_line_naming_the_file(verb: str, tmp_path: Path) -> None:
    """Records (``dedup``; ``score --records``, which read them in the driver), responses (``score --responses``)
    and rollouts (``recaption --rollouts``). Before: ``this input file cannot be read (Page didn't decompress ...)``
    after allocating the claim, and for ``score`` and ``recaption`` a line blaming ``--out`` (exit 1)."""
    import pyarrow as pa

    records = lying_page(tmp_path / "rows.parquet", claimed=2**31 - 1)
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"id": "r00000", "response": "a cat"}\n')
    if verb == "recaption":
        honest = tmp_path / "honest.parquet"
        pq.write_table(small_rows_table(), honest)
        rollouts = lying_page(tmp_path / "answers.parquet", claimed=2**31 - 1,
                              table=pa.table({"id": ["r00000#en"], "response": ["a cat on a mat"]}))
        args, bad, column = [str(honest), "--rollouts", str(rollouts), "--langs", "en"], rollouts, "response"
    elif verb == "responses":
        prompts = tmp_path / "prompts.jsonl"
        prompts.write_text('{"id": "r00000", "problem": "1 + 1?", "answer": "2", "answer_type": "number"}\n')
        responses = lying_page(tmp_path / "responses.parquet", claimed=2**31 - 1,
                               table=pa.table({"id": ["r00000"] * 50, "response": ["<answer>2</answer>"] * 50}))
        verb, args, bad, column = "score", ["--records", str(prompts), "--responses", str(responses)], responses, \
            "response"
    else:
        args = [str(records)] if verb == "dedup" else ["--records", str(records), "--responses", str(answers)]
        bad, column = records, "caption"
    code, err, peak = run_limited([verb, *args, "--out", str(tmp_path / "out")], tmp_path, seconds=120)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("match", "recaption"))]
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert lines[0].startswith(f"error: {bad}: not a readable Parquet file (row group 0, column '{column}': the page "
                               "at byte "), lines
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
