"""Session fixture: a real S3-compatible HTTP server (moto in server mode) on 127.0.0.1.

``s3_server`` starts ``python -m moto.server`` on a free loopback port and points s3fs at it
through the usual environment (``AWS_ENDPOINT_URL``, ``FSSPEC_S3_ENDPOINT_URL``, dummy keys and a
region), so curate reaches it exactly as it reaches a real bucket. ``bucket`` makes a fresh bucket;
``recorded_requests`` lists the requests the server answered during a block.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from curate.core.threads import environ
from tests._fixtures.servers import serving

ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint URL of a moto S3 server on loopback (skipped when moto is not installed).

    Its request recorder (``/moto-api/recorder/...``, off until a test starts it) writes to a
    temporary file, not the current folder.
    """
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    recording = tmp_path_factory.mktemp("moto") / "recording.jsonl"
    with serving([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "{port}"],
                 env={**os.environ, "MOTO_RECORDER_FILEPATH": str(recording)}) as url, \
            environ({**ENV, "AWS_ENDPOINT_URL": url, "FSSPEC_S3_ENDPOINT_URL": url}):
        yield url


@pytest.fixture
def bucket(s3_server: str) -> str:
    """A fresh, empty bucket: ``s3://<name>``."""
    import s3fs

    name = f"curate-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(name)
    return f"s3://{name}"


@contextmanager
def recorded_requests(endpoint: str) -> Iterator[list[tuple[str, str, str]]]:
    """The requests the moto server at ``endpoint`` answered while the block ran, in arrival order.

    Each is ``(method, bucket/key, query)``; the list fills when the block ends (the server's
    request recorder, started and stopped around the block).
    """
    def call(what: str) -> bytes:
        with urllib.request.urlopen(f"{endpoint}/moto-api/recorder/{what}") as r:
            return r.read()

    seen: list[tuple[str, str, str]] = []
    call("reset-recording")
    call("start-recording")
    try:
        yield seen
    finally:
        call("stop-recording")
    text, at, decoder = call("download-recording").decode(), 0, json.JSONDecoder()
    while True:  # one JSON object per request; concurrent requests may leave two on one line
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            break
        entry, at = decoder.raw_decode(text, at)
        url = urlparse(entry["url"])
        seen.append((entry["method"], unquote(url.path).lstrip("/"), url.query))


def s3() -> Any:
    """A fresh s3fs filesystem on the test server (no cached listings)."""
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


def bucket_objects(url: str, patterns: tuple[str, ...]) -> dict[str, bytes]:
    """The bytes of the objects under ``url`` matching ``patterns``, by path relative to it."""
    fs, inner = s3(), url[len("s3://"):]
    return {p[len(inner) + 1:]: fs.cat_file(p) for pat in patterns for p in sorted(fs.glob(f"{inner}/{pat}"))}


def folder_files(folder: os.PathLike[str], patterns: tuple[str, ...]) -> dict[str, bytes]:
    """The bytes of the files under ``folder`` matching ``patterns``, by path relative to it."""
    from pathlib import Path

    root = Path(folder)
    return {str(p.relative_to(root)): p.read_bytes() for pat in patterns for p in sorted(root.glob(pat))}
