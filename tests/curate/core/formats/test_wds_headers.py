"""The tar header walker finds the same members, offsets and sizes as :mod:`tarfile`, in every tar format."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
import webdataset as wds

from curate.core.formats.containers import scan_groups


def _tarfile_view(path: Path) -> list[tuple[str, int, int, int]]:
    with tarfile.open(path) as tar:
        return [(m.name, m.offset, m.offset_data, m.size) for m in tar.getmembers() if m.isfile()]


def _walker_view(path: Path) -> list[tuple[str, int, int, int]]:
    with open(path, "rb") as fh:
        groups = list(scan_groups(fh, path.stat().st_size))
    assert not any(g.truncated for g in groups)
    return [(f"{g.key}.{ext}", g.offset if i == 0 else -1, at, size)
            for g in groups for i, (ext, at, size) in enumerate(g.members)]


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, "webdataset"])
def test_walker_matches_tarfile(tmp_path: Path, fmt: object) -> None:
    path = tmp_path / "t.tar"
    names = ["dir/" + "long" * 30 + "/k1.jpg", "dir/" + "long" * 30 + "/k1.txt", "k2.png", "k2.json",
             "k3.seg.png", "k3.seg.txt", "ünï/k4.jpg", "k4.txt"]
    if fmt == "webdataset":
        with wds.TarWriter(str(path)) as sink:
            for i in range(0, len(names), 2):
                key, ext1 = names[i].split(".", 1)
                sink.write({"__key__": key, ext1: b"x" * (700 * i + 1), names[i + 1].split(".", 1)[1]: b"caption"})
    else:
        if fmt == tarfile.USTAR_FORMAT:
            names = [n.replace("ünï", "uni") for n in names]
        with tarfile.open(path, "w", format=fmt) as tar:
            folder = tarfile.TarInfo("dir")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
            for i, name in enumerate(names):
                info = tarfile.TarInfo(name)
                info.size = 513 * i
                tar.addfile(info, io.BytesIO(b"y" * info.size))
    expected = _tarfile_view(path)
    got = _walker_view(path)
    assert [g[0] for g in got] == [e[0] for e in expected]
    assert [(g[2], g[3]) for g in got] == [(e[2], e[3]) for e in expected]
    starts = {g[0]: g[1] for g in got if g[1] >= 0}
    assert all(starts[name] == offset for name, offset, _, _ in expected if name in starts)


def test_header_checksums_are_checked_exactly(tmp_path: Path) -> None:
    """A header whose bytes no longer add up to its checksum ends the walk there (its group is truncated)."""
    import os

    from curate.core.formats.containers import _byte_sum

    for block in (bytes(512), b"\xff" * 512, os.urandom(512), bytes(range(256)) * 2):
        assert _byte_sum(block) == sum(block)
    path = tmp_path / "t.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for key in ("a", "b", "c"):
            for ext in ("jpg", "txt"):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = 10
                tar.addfile(info, io.BytesIO(b"z" * 10))
    data = bytearray(path.read_bytes())
    with tarfile.open(path) as tar:
        third = [m for m in tar.getmembers() if m.name == "b.jpg"][0].offset
    data[third + 5] ^= 0x01  # one bit of b.jpg's name: the sum is off by one
    path.write_bytes(bytes(data))
    with open(path, "rb") as fh:
        groups = list(scan_groups(fh, len(data)))
    assert [g.key for g in groups] == ["a"] and "bad header checksum" in groups[-1].truncated
