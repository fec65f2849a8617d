"""Failures are blamed on what failed: a damaged input file is named, never ``--out`` (issue 46, item 6)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.cli import main
from curate.core.errors import InputError, UserError, reading_input


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def lying_parquet(path: Path, image: bytes, claim: int = 2 << 30) -> Path:
    """A Parquet file of 6 records whose first image column chunk claims ``claim`` compressed bytes in the footer
    (thrift compact protocol: ``total_compressed_size``, field 7 of ``ColumnMetaData``, follows field 6)."""
    rows = [{"id": f"r{i}", "source": "s", "caption": f"caption {i}", "image": {"bytes": image, "path": "a.jpg"}}
            for i in range(6)]
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=3)
    data = path.read_bytes()
    size = struct.unpack("<i", data[-8:-4])[0]
    footer = data[-8 - size:-8]
    column = pq.ParquetFile(path).metadata.row_group(0).column(3)
    assert column.path_in_schema == "image.bytes"
    needle = b"\x16" + _varint(column.total_compressed_size << 1)  # zigzag of a positive i64
    at = footer.index(needle)
    footer = footer[:at] + b"\x16" + _varint(claim << 1) + footer[at + len(needle):]
    path.write_bytes(data[:-8 - size] + footer + struct.pack("<i", len(footer)) + b"PAR1")
    return path


@pytest.fixture
def lying(sample_data: Path, tmp_path: Path) -> Path:
    return lying_parquet(tmp_path / "rows.parquet", (sample_data / "images" / "astronaut.jpg").read_bytes())


def test_reading_input_names_the_file(lying: Path) -> None:
    with pytest.raises(InputError, match=f"^{lying}: this input file cannot be read .*column metadata") as exc:
        with reading_input(str(lying)):
            pq.read_table(lying)
    assert isinstance(exc.value, UserError)
    with pytest.raises(FileNotFoundError):  # an error naming another file is left to name that one
        with reading_input(str(lying)):
            open(lying.parent / "other.txt", "rb")
    with pytest.raises(ZeroDivisionError):  # a bug stays a bug
        with reading_input(str(lying)):
            1 / 0  # noqa: B018


def test_a_parquet_file_whose_chunks_lie_is_named_not_out(lying: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "out"
    try:
        main(["dedup", str(lying), "--out", str(out)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    if code == 0:  # the lie found before reading (the formats' size checks): every row is an errored record
        stats = json.loads((out / "stats.json").read_text())
        assert stats["records_in"] == 6 and sum(stats["errored"].values()) >= 3, stats
    else:
        assert len(err) == 1 and str(lying) in err[0] and "--out" not in err[0] and str(out) not in err[0], err
