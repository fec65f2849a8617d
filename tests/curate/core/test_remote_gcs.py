"""Inputs and ``--out`` in Google Cloud Storage (``gs://``), against a real GCS JSON-API server on 127.0.0.1.

The server is ``gcp-storage-emulator`` (in memory), reached through gcsfs exactly as a real bucket
is, with the emulator's endpoint in ``STORAGE_EMULATOR_HOST`` (tests/_fixtures/gcs.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from curate.core.errors import UserError
from curate.core.records import read_records
from packer.pack import pack
from packer.verify import verify_pack
from tests._fixtures.formats import Layouts

#: Outputs equal to a local run's, byte for byte (the ``_records`` store names each input: bucket vs disk).
SAME = ("shards/*.tar", "lengths/*.parquet", "plan.parquet", "lengths.parquet")


def _fs():
    import gcsfs

    return gcsfs.core.GCSFileSystem(token="anon", skip_instance_cache=True)


def _objects(url: str) -> dict[str, bytes]:
    fs, inner = _fs(), url[len("gs://"):]
    return {p[len(inner) + 1:]: fs.cat_file(p) for pat in SAME for p in sorted(fs.glob(f"{inner}/{pat}"))}


def _local(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for pat in SAME for p in sorted(folder.glob(pat))}


@pytest.mark.slow
def test_pack_and_verify_in_a_gcs_bucket(gs_bucket: str, layouts: Layouts, tiny_processor_dir: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fs = _fs()
    fs.put_file(str(layouts.hf), f"{gs_bucket[5:]}/in/hf.parquet")
    kw = dict(ctx=1024, processor=str(tiny_processor_dir), seed=2, shard_size=5, sequences_per_shard=3,
              verify_fraction=0.0, plot=False)
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "machine-a"))
    remote = pack([f"{gs_bucket}/in/hf.parquet"], out=f"{gs_bucket}/packed", **kw)
    local = pack([layouts.hf], out=tmp_path / "local", **kw)
    assert remote["records_packed"] == local["records_packed"] == len(layouts.items)
    objects = _objects(f"{gs_bucket}/packed")
    assert sum(k.startswith("shards/") for k in objects) >= 2 and objects == _local(tmp_path / "local")
    assert fs.exists(f"{gs_bucket[5:]}/packed/stats.json")
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "machine-b"))  # a rerun from another machine: nothing changes
    again = pack([f"{gs_bucket}/in/hf.parquet"], out=f"{gs_bucket}/packed", **kw)
    assert again["records_packed"] == remote["records_packed"] and _objects(f"{gs_bucket}/packed") == objects
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "machine-c"))
    report = verify_pack(f"{gs_bucket}/packed", processor=str(tiny_processor_dir))
    assert not report.problems and report.records == len(layouts.items)
    with pytest.raises(UserError, match="gs://no-such-bucket-here"):
        pack([layouts.hf], out="gs://no-such-bucket-here/out", **kw)
    assert len(list(read_records([f"{gs_bucket}/in"]))) == len(layouts.items)  # a prefix is a folder
    with pytest.raises(UserError, match="no such object or prefix"):
        list(read_records([f"{gs_bucket}/in/nothing.parquet"]))
