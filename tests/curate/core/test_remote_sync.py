"""What moves between a bucket and the local mirror of ``--out``: reruns read markers, not shard data; each
shard's outputs reach the bucket before its marker, and a run killed between them is finished with the same bytes.

Against a real S3 server (moto) on 127.0.0.1, whose request recorder lists every request; a real HTTP server on
127.0.0.1 that stops sending half-way, for interrupted downloads; and a real HTTP proxy on 127.0.0.1 in front of the
S3 server that holds back the upload of a marker, for a run killed mid-upload.
"""

from __future__ import annotations

import http.client
import http.server
import json
import multiprocessing
import os
import re
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


def test_each_marker_reaches_the_bucket_after_its_outputs(s3_server: str, bucket: str, layouts: Layouts,
                                                          tiny_processor_dir: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Uploads overlap (a marker goes while the next shard's outputs do), but a shard's marker is sent only once all
    its outputs are in the bucket; every object is sent once, and ``stats.json`` last."""
    _fs().put_file(str(layouts.hf), f"{bucket}/in/hf.parquet")
    out = f"{bucket}/out"
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    with recorded_requests(s3_server) as seen:
        pack([f"{bucket}/in/hf.parquet"], out=out, processor=str(tiny_processor_dir), ctx=1024, shard_size=4,
             sequences_per_shard=1, seed=5, verify_fraction=0.0, plot=False, workers=2)
    puts, objects = _split(seen, out)[1], _objects(out)
    assert len(puts) == len(set(puts)) and sorted(puts) == sorted(objects)
    markers = [k for k in puts if re.fullmatch(r"_shards/[a-z_]+/\d+\.json", k)]
    assert sum(k.startswith("_shards/write/") for k in markers) >= 3, markers
    for marker in markers:
        files = json.loads(objects[marker])["files"]
        assert files and all(puts.index(f) < puts.index(marker) for f in files), (marker, files, puts)
    assert puts[-1] == "stats.json"


class _Proxy(http.server.BaseHTTPRequestHandler):
    """Forwards every request to the S3 server ``upstream``, but holds back the first upload whose path matches
    ``hold`` (never forwarded: ``held`` is set and the connection waits until the proxy stops)."""

    protocol_version = "HTTP/1.1"  # answers ``Expect: 100-continue``; one request per connection
    upstream = ""
    hold = re.compile("$^")
    held = threading.Event()
    stop = threading.Event()
    lock = threading.Lock()

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return body
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _forward(self) -> None:
        body = self._body()
        with self.lock:
            holding = self.command == "PUT" and self.hold.search(self.path) and not self.held.is_set()
            if holding:
                self.held.set()
        if holding:
            self.stop.wait(300)
            self.close_connection = True
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "expect",
                                                                               "connection", "content-length")}
        conn = http.client.HTTPConnection(self.upstream, timeout=60)
        conn.request(self.command, self.path, body=body if body or self.command in ("PUT", "POST") else None,
                     headers=headers)
        reply = conn.getresponse()
        data = reply.read()
        self.send_response(reply.status)
        for k, v in reply.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length", "server", "date"):
                self.send_header(k, v)
        self.send_header("Content-Length", reply.getheader("Content-Length", str(len(data))))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.close_connection = True
        conn.close()

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward  # noqa: N815 - http.server's names

    def log_message(self, *args: object) -> None:
        pass


def _pack_through(endpoint: str, inputs: list[str], out: str, settings: dict) -> None:
    """A run of pack whose every request goes to ``endpoint``, in a process group of its own (it and its workers are
    killed together)."""
    import fsspec.config

    os.setpgrp()
    os.environ["AWS_ENDPOINT_URL"] = os.environ["FSSPEC_S3_ENDPOINT_URL"] = endpoint
    fsspec.config.conf.setdefault("s3", {})["endpoint_url"] = endpoint
    pack(inputs, out=out, **settings)


def test_a_run_killed_between_a_shards_outputs_and_its_marker_is_finished_with_the_same_bytes(
        s3_server: str, bucket: str, layouts: Layouts, tiny_processor_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed (with its workers) while a written shard's outputs are in the bucket and its marker is on its way: the
    bucket has no marker for that shard, and a rerun from another machine makes it again and gives every object a
    run never killed gives."""
    fs = _fs()
    fs.put_file(str(layouts.hf), f"{bucket}/in/hf.parquet")
    inputs, killed = [f"{bucket}/in/hf.parquet"], f"{bucket}/killed"
    kw = dict(processor=str(tiny_processor_dir), ctx=1024, shard_size=4, sequences_per_shard=1, seed=5,
              verify_fraction=0.0, plot=False, workers=2)
    _Proxy.upstream, _Proxy.hold = s3_server.split("://", 1)[1], re.compile(r"/killed/_shards/write/\d+\.json$")
    _Proxy.held.clear()
    _Proxy.stop.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "machine-a"))
    proc = multiprocessing.get_context("fork").Process(
        target=_pack_through, args=(f"http://127.0.0.1:{server.server_address[1]}", inputs, killed, kw))
    proc.start()  # not a daemon: it starts workers
    try:
        deadline = time.monotonic() + 180
        while not _Proxy.held.wait(0.1) and proc.is_alive() and time.monotonic() < deadline:
            pass
        assert _Proxy.held.is_set(), f"no marker of a written shard was uploaded (exit code {proc.exitcode})"
        time.sleep(0.5)  # what else is in flight lands (other shards: outputs, then their markers)
    finally:
        if proc.is_alive():
            os.killpg(proc.pid, signal.SIGKILL)
        proc.join(timeout=60)
        _Proxy.stop.set()
        server.shutdown()
        server.server_close()
    fs.invalidate_cache()
    inner = killed[len("s3://"):]
    there = {p[len(inner) + 1:] for p in fs.find(inner)}
    assert "stats.json" not in there
    written = {k.split("/")[-1].split(".")[0] for k in there if k.startswith("shards/") and k.endswith(".tar")}
    unmarked = sorted(s for s in written if f"_shards/write/{s}.json" not in there)
    assert unmarked, (written, there)  # a shard whose outputs are in the bucket and whose marker is not
    assert all(f"shards/{s}.index.json" in there for s in unmarked)
    # another machine finishes it: the unmarked shards are made again; and a reference run never killed
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "machine-b"))
    with recorded_requests(s3_server) as seen:
        pack(inputs, out=killed, **kw)
    remade = {k.split("/")[-1].split(".")[0] for k in _split(seen, killed)[1] if k.startswith("shards/")}
    assert set(unmarked) <= remade
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "machine-c"))
    pack(inputs, out=f"{bucket}/reference", **kw)
    after, reference = _objects(killed), _objects(f"{bucket}/reference")
    after.pop("history.json"), reference.pop("history.json")  # the wall times of each invocation (docs/resume.md)
    assert sorted(after) == sorted(reference) and "stats.json" in after
    assert [k for k in after if after[k] != reference[k]] == []
