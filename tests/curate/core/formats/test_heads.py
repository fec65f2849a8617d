"""Records read with ``heads``: tar members and Parquet cells known by header bytes and address only."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import webdataset as wds
from PIL import Image

from curate.core.image_headers import ImageAt
from curate.core.images import ImageError, check, decode, probe
from curate.core.records import BadRecord, read_part, split_file

STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _images() -> list[bytes]:
    rng = np.random.default_rng(3)
    out = []
    for size, fmt in (((300, 260), "PNG"), ((40, 30), "JPEG"), ((500, 200), "JPEG")):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (*size, 3), dtype=np.uint8)).save(buf, fmt)
        out.append(buf.getvalue())
    # a JPEG whose frame header lies beyond the first 16 KiB read of a tar member (a 30 KB APP2 segment)
    out.append(out[1][:2] + b"\xff\xe2" + (30_002).to_bytes(2, "big") + bytes(30_000) + out[1][2:])
    return out


def _reason(src: object) -> str:
    try:
        check(src)
    except ImageError as exc:
        return exc.reason
    return "accepted"


def _records(path: Path, heads: bool) -> list:
    return [r for part in split_file(path, 2) for r in read_part(part, heads=heads)]


def test_heads_probe_like_bytes_and_read_back(tmp_path: Path) -> None:
    blobs = _images()
    assert len(blobs[0]) > 70_000 and len(blobs[1]) < 65_536
    tar = tmp_path / "t.tar"
    with wds.TarWriter(str(tar)) as sink:
        for i, b in enumerate(blobs):
            sink.write({"__key__": f"k{i}", "png" if i == 0 else "jpg": b, "txt": f"caption {i}"})
        sink.write({"__key__": "bad", "jpg": b"\xff\xd8\xff not really", "txt": "broken"})
    parquet = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": [f"k{i}" for i in range(5)], "caption": ["c"] * 5,
                             "image": pa.array([{"bytes": b, "path": None} for b in [*blobs, b"\x00junk"]], type=STRUCT)}),
                   parquet, row_group_size=2)
    for path in (tar, parquet):
        full, heads = _records(path, False), _records(path, True)
        assert [type(r) for r in full] == [type(r) for r in heads]
        for rec, lazy in zip(full[:4], heads[:4]):
            (data,), (at,) = rec["images"], lazy["images"]
            assert isinstance(at, ImageAt) and at.file == str(path) and len(at) == len(data)
            assert at.head[:8] == data[:8] and at.tail == data[-4096:]  # byte values, whatever the view's format
            assert probe(at) == probe(data)
            assert at.read() == data and decode(at).tobytes() == decode(data).tobytes()
            assert at.detach().span() == at.span()
        if path == tar:  # read whole as the tar is walked (the gate proves it), kept as an address afterwards
            assert heads[0]["images"][0].held == blobs[0] and heads[0]["images"][0].detach().held is None
        bad = heads[4]["images"][0]
        as_file = tmp_path / "bad.img"
        as_file.write_bytes(bad.read())
        # the same bytes, the same reason, anywhere (in the tar: JPEG's signature, then no marker: corrupt)
        assert _reason(bad) == _reason(as_file) == ("unreadable_image" if path == tar else "not_an_image")
    assert not any(isinstance(r, BadRecord) for r in _records(parquet, True))
