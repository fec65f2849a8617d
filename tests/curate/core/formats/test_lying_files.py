"""Files whose headers lie about their size: every count is checked against the file before anything is allocated
from it; a lie is one line naming the file (a whole input) or a named reason (one row of it)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.core.errors import UserError
from curate.core.formats.containers import ParquetRows, checked_num_rows, Tar, group_row
from curate.core.io import open_input
from curate.fixtures.lying_files import lying_parquet, lying_tar, small_rows_table
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
        assert checked_num_rows(pq.ParquetFile(fh), "nulls", (tmp_path / "nulls.parquet").stat().st_size) == 3_000_000


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
