"""Reasons decided by what the decoder found, the same in every container: small files made here reproduce the
cases of the public decoder test suites (PngSuite, jpeg-decoder, libjpeg-turbo, image-tiff, libwebp); the suites
themselves run when ``CURATE_IMAGE_CORPUS`` names a folder holding them (docs/images.md records the results)."""

from __future__ import annotations

import collections
import io
import json
import os
import re
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.formats.rows import IMAGE_EXTS
from curate.core.images import ImageError, check, decode, file_extension
from curate.core.records import BadRecord, read_records
from curate.fixtures.odd_images import MEMBER_FORMATS, decoder_cases, member_format_bytes


def _reason(src: object) -> tuple[str, str]:
    try:
        check(src)
    except ImageError as exc:
        return exc.reason, exc.detail
    return "accepted", ""


def _decode_reason(src: object) -> str:
    try:
        decode(src)
    except ImageError as exc:
        return exc.reason
    return "accepted"


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_each_case_gets_its_reason_as_a_file_as_bytes_and_in_a_tar(tmp_path: Path, capfd) -> None:
    cases = decoder_cases()
    members: dict[str, bytes] = {}
    for name, (data, expected) in cases.items():
        (tmp_path / name).write_bytes(data)
        assert _reason(data)[0] == _reason(tmp_path / name)[0] == _decode_reason(data) == expected, \
            (name, _reason(data))
        key, ext = name.rsplit(".", 1)
        members[f"{key}.{ext}"] = data
        members[f"{key}.json"] = json.dumps({"id": key, "caption": "a case"}).encode()
    rows = {r["id"]: r for r in read_records([_tar(tmp_path / "cases.tar", members)]) if not isinstance(r, BadRecord)}
    assert sorted(rows) == sorted(n.rsplit(".", 1)[0] for n in cases)
    for name, (_, expected) in cases.items():
        (image,) = rows[name.rsplit(".", 1)[0]]["images"]
        assert _reason(image)[0] == expected, name
    assert capfd.readouterr().err == ""  # libtiff's "WEBP compression support is not configured." is in the detail
    webp_tiff = _reason(cases["tiff_webp.tif"][0])[1]
    assert "WEBP compression support is not configured" in webp_tiff or "decoder error" not in webp_tiff


def test_every_documented_format_is_an_image_in_every_container(tmp_path: Path) -> None:
    """A tar member or a Parquet column named by any of the formats is an image (before: .avif .jp2 .tga .ico .qoi
    .sgi .pcx .dds .im members made their group ``incomplete_group``)."""
    images = member_format_bytes()
    assert {"avif", "jp2", "tga", "ico", "qoi", "sgi", "pcx", "dds", "im"} <= set(images) <= IMAGE_EXTS
    members = {}
    for ext, data in images.items():
        members[f"s-{ext}.{ext}"] = data
        members[f"s-{ext}.txt"] = f"a {ext} image".encode()
    tar = _tar(tmp_path / "formats.tar", members)
    pq.write_table(pa.table({"id": [f"s-{e}" for e in images], "caption": ["c"] * len(images),
                             **{ext: pa.array([images[ext] if e == ext else None for e in images], pa.binary())
                                for ext in ["qoi"]}}).filter(pa.array([e == "qoi" for e in images])),
                   tmp_path / "qoi.parquet")
    for src in (tar, tmp_path / "qoi.parquet"):
        records = list(read_records([src]))
        assert not [r for r in records if isinstance(r, BadRecord)], records
        for rec in records:
            (image,) = rec["images"]
            assert _reason(image)[0] == "accepted", rec["id"]
    for ext, (fmt, _) in MEMBER_FORMATS.items():  # pack stores each under its own extension, one the readers list
        assert file_extension(fmt) == ext, fmt


def test_the_extension_list_is_pillows(tmp_path: Path) -> None:
    """Every extension Pillow registers for a format it reads is in the one list, but for its non-image stubs."""
    from PIL import Image

    Image.init()
    readable = {ext.lstrip(".") for ext, fmt in Image.registered_extensions().items() if fmt in Image.OPEN}
    stubs = {"bufr", "grib", "h5", "hdf", "mpg", "mpeg", "ps"}
    assert readable - stubs <= IMAGE_EXTS
    assert not (stubs & IMAGE_EXTS)


CORPUS = os.environ.get("CURATE_IMAGE_CORPUS")
#: Files of the public suites and the reason each must get (the cases issue 46 named, and one per kind).
KNOWN = {
    "pngsuite/xdtn0g01.png": "unreadable_image", "pngsuite/xs1n0g01.png": "not_an_image",
    "pngsuite/xc1n0g08.png": "unreadable_image", "pngsuite/xhdn0g08.png": "unreadable_image",
    "pngsuite/basn2c08.png": "accepted", "crashtest/images/missing-sos.jpg": "unreadable_image",
    "crashtest/images/missing-sof.jpg": "unreadable_image", "testimages/monkey12.jpg": "unsupported_format",
    "testimages/testorig.jpg": "accepted", "geotiff/usda_naip_256_webp_z3.tif": "unsupported_format",
    "images/int8_rgb.tif": "unsupported_format", "test.webp": "accepted",
}
SKIP = {".md", ".txt", ".md5", ".json", ".rs", ".toml", ".yml", ".c", ".h", ".py", ".sh", ".list"}


@pytest.mark.skipif(not CORPUS, reason="CURATE_IMAGE_CORPUS names no folder of decoder test suites")
def test_public_decoder_suites(capfd) -> None:
    """Every file of the suites: the named files get their reason, nothing reaches stderr, and a decoder message
    gives one reason (for a file that ends early, and for one that is whole)."""
    root = Path(CORPUS)
    found: dict[str, str] = {}
    by_message: dict[tuple[str, bool], set[str]] = collections.defaultdict(set)
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() not in SKIP
                       and not p.name.startswith(".")):
        reason, detail = _reason(path)
        rel = path.relative_to(root).as_posix()
        found[rel] = reason
        if reason != "accepted":
            message = re.sub(r"\d[\d,]*", "N", detail.split(": ", 1)[-1])
            by_message[(re.sub(r" \(the file .*\)$", "", message), "(the file" in message)].add(reason)
    for suffix, reason in KNOWN.items():
        hits = [found[rel] for rel in found if rel.endswith(suffix)]
        assert hits == [reason], (suffix, hits)
    assert capfd.readouterr().err == ""
    assert {m: r for m, r in by_message.items() if len(r) > 1} == {}
    counts = collections.Counter(found.values())
    print(json.dumps(dict(sorted(counts.items())), indent=1))
