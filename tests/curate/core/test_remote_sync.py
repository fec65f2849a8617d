"""What moves between a bucket and the local mirror of ``--out``: reruns read markers, not shard data.

Against a real S3 server (moto) on 127.0.0.1, whose request recorder lists every request; and a
real HTTP server on 127.0.0.1 that stops sending half-way, for interrupted downloads.
"""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from curate.core.io import staging, staging_folder
from curate.core.remote import get_file
from packer.pack import pack
from tests._fixtures.formats import Layouts
from tests._fixtures.s3 import recorded_requests

DATA = ("shards/", "_records/")  # finished shards' data: never fetched by a rerun that has nothing to write


def _fs():
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


def _objects(url: str) -> dict[str, bytes]:
    fs, inner = _fs(), url[len("s3://"):]
    return {p[len(inner) + 1:]: fs.cat_file(p) for p in sorted(fs.find(inner))}


def _split(seen: list[tuple[str, str, str]], url: str) -> tuple[list[str], list[str]]:
    """The object GETs and PUTs among recorded requests, as keys relative to ``url``."""
    inner = url[len("s3://"):] + "/"
    gets = [k[len(inner):] for m, k, q in seen if m == "GET" and k.startswith(inner) and "list-type" not in q]
    puts = [k[len(inner):] for m, k, _ in seen if m == "PUT" and k.startswith(inner)]
    return gets, puts


@pytest.mark.slow
def test_a_rerun_reads_markers_not_shard_data(s3_server: str, bucket: str, layouts: Layouts, tiny_processor_dir: Path,
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fs().put_file(str(layouts.hf), f"{bucket}/in/hf.parquet")
    out = f"{bucket}/out"
    kw = dict(processor=str(tiny_processor_dir), ctx=1024, shard_size=4, sequences_per_shard=2, seed=5,
              verify_fraction=0.0, plot=False)

    def run(machine: str) -> None:
        monkeypatch.setenv("CURATE_CACHE", str(tmp_path / machine))  # a machine = its own staging folder
        pack([f"{bucket}/in/hf.parquet"], out=out, **kw)
        left = [p for p in staging(out).rglob("*") if p.is_file() and p.name not in (".url", ".curate.lock")]
        assert not left, left  # the bucket holds the run: nothing of it stays on this machine

    run("a")
    first = _objects(out)
    assert sum(k.startswith("shards/") for k in first) >= 3 and any(k.startswith("_records/") for k in first)
    for machine in ("b", "a"):  # another machine, then the one that ran it (its staging folder emptied since)
        with recorded_requests(s3_server) as seen:
            run(machine)
        gets, puts = _split(seen, out)
        assert not [k for k in gets if k.startswith(DATA)], gets
        # markers, settings, what pack merges, and the history of runs it appends to
        assert all(k.startswith(("_shards/", "lengths/")) or k == "history.json" for k in gets), gets
        assert puts == ["history.json"], puts  # nothing the bucket holds already (history.json: the wall times)
    assert {k: v for k, v in _objects(out).items() if k != "history.json"} == \
        {k: v for k, v in first.items() if k != "history.json"}
    # a run killed while writing shards: the last two are missing; another machine finishes it
    fs, inner = _fs(), out[len("s3://"):]
    tars = sorted(k for k in first if k.startswith("shards/") and k.endswith(".tar"))
    lost = []  # a shard's tar and its sequence index (packer/sampler.py)
    for tar in tars[-2:]:
        shard_id = tar.rsplit("/", 1)[1].split(".")[0]
        lost += [tar, f"shards/{shard_id}.index.json"]
        fs.rm([f"{inner}/{tar}", f"{inner}/shards/{shard_id}.index.json", f"{inner}/_shards/write/{shard_id}.json"])
    fs.rm(f"{inner}/stats.json")
    with recorded_requests(s3_server) as seen:
        run("c")
    gets, puts = _split(seen, out)
    assert any(k.startswith("_records/") for k in gets)  # the record store the writer reads, fetched to write
    assert not [k for k in gets if k.startswith("shards/")], gets
    assert sorted(k for k in puts if k.startswith("shards/")) == sorted(lost)
    assert {k: v for k, v in _objects(out).items() if k != "history.json"} == \
        {k: v for k, v in first.items() if k != "history.json"}
    # a download whose process died leaves a hidden partial file in the staging folder: the next run removes it
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "a"))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    part = staging(out) / "lengths" / f".000000.parquet.{int(dead.stdout)}.0123abcd.part"
    part.parent.mkdir(parents=True, exist_ok=True)
    part.write_bytes(b"half")
    run("a")
    assert not part.exists()
    # what verify reads is what the bucket holds: a tar and its marker gone from the bucket are missed
    fs.rm([f"{inner}/{tars[0]}", f"{inner}/_shards/write/{tars[0].rsplit('/', 1)[1].split('.')[0]}.json"])
    from packer.verify import verify_pack

    report = verify_pack(out)
    assert report.shards == len(tars) - 1 and any("sequences in the shards" in p for p in report.problems)


class _HalfServer(http.server.BaseHTTPRequestHandler):
    """Announces 4 MiB, sends 256 KiB, then (``/stall``) waits or (``/cut``) closes the connection."""

    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(4 << 20))
        self.end_headers()
        self.wfile.write(b"x" * (256 << 10))
        self.wfile.flush()
        if self.path == "/stall":
            self.release.wait(60)

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", str(4 << 20))
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def half_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HalfServer)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        _HalfServer.release.set()
        server.shutdown()
        server.server_close()


def test_an_interrupted_download_leaves_no_file_under_its_name(half_server: str, tmp_path: Path) -> None:
    import fsspec

    dest = tmp_path / "mirror" / "lengths" / "000000.parquet"
    with pytest.raises(Exception):  # noqa: B017 - the connection closes before the announced length
        get_file(fsspec.filesystem("http", skip_instance_cache=True), f"{half_server}/cut", dest)
    assert not dest.exists() and not list(dest.parent.iterdir())
    # SIGKILL while the bytes arrive: a hidden partial file, never the final name
    code = ("import fsspec, sys; from pathlib import Path; from curate.core.remote import get_file; "
            "get_file(fsspec.filesystem('http'), sys.argv[1], Path(sys.argv[2]))")
    proc = subprocess.Popen([sys.executable, "-c", code, f"{half_server}/stall", str(dest)],
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and not [p for p in dest.parent.iterdir() if p.stat().st_size > 0]:
            assert proc.poll() is None, "the download ended before it could be killed"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    left = list(dest.parent.iterdir())
    assert not dest.exists() and len(left) == 1 and left[0].name.startswith(".000000.parquet.")
    assert left[0].name.endswith(".part")


def test_push_does_not_upload_again_what_another_process_put_after_a_listing(
        s3_server: str, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker process uploads a shard's marker after the driver listed the prefix (``ensure_local``): the driver's
    final ``push`` must see it in the bucket, not trust the folder listing its filesystem cached, and leave it."""
    from curate.core.remote import ensure_local, push, remote_fs

    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    url = f"{bucket}/out"
    local = staging_folder(url)
    (local / "_shards" / "st").mkdir(parents=True)
    for rel, text in (("_shards/st/settings.json", "{}"), ("_shards/st/000000.json", '{"files": []}'),
                      ("stats.json", "{}")):
        (local / rel).write_text(text)
    fs, inner = remote_fs(url)
    fs.put_file(str(local / "_shards/st/settings.json"), f"{inner}/_shards/st/settings.json")
    ensure_local(local, ["*.none"])  # the driver lists the prefix: its filesystem caches each folder's listing
    _fs().put_file(str(local / "_shards/st/000000.json"), f"{inner}/_shards/st/000000.json")  # another process
    with recorded_requests(s3_server) as seen:
        assert push(url, local) == 1
    assert _split(seen, url)[1] == ["stats.json"]
