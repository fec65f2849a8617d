"""Session fixture: a real Google Cloud Storage JSON-API server (``gcp-storage-emulator``) on 127.0.0.1.

``gcs_server`` starts ``python -m gcp_storage_emulator start --in-memory`` on a free loopback port and
points gcsfs at it through its usual environment: ``STORAGE_EMULATOR_HOST`` (the endpoint),
anonymous access (``token='anon'``: fsspec's config here, ``FSSPEC_GS_TOKEN=anon`` for child
processes), ``NO_GCE_CHECK=true`` (no metadata-server probe) and
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``: gcsfs ≥ 2026 otherwise asks the gRPC Storage Control
API for every bucket's layout, which the emulator does not serve (each call then waits 60 s).
``gs_bucket`` makes a fresh bucket.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "NO_GCE_CHECK": "true", "FSSPEC_GS_TOKEN": "anon"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    """The endpoint URL of a GCS emulator on loopback (skipped when gcsfs or the emulator is not installed)."""
    pytest.importorskip("gcp_storage_emulator")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                             "--port", str(port), "--in-memory", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.1)
    saved = {k: os.environ.get(k) for k in (*ENV, "STORAGE_EMULATOR_HOST")}
    os.environ.update(ENV, STORAGE_EMULATOR_HOST=url)  # before gcsfs is imported: it reads the layout switch then
    gcsfs = pytest.importorskip("gcsfs")
    import fsspec.config

    saved_conf = dict(fsspec.config.conf.get("gs", {}))
    fsspec.config.conf["gs"] = {**saved_conf, "token": "anon"}  # FSSPEC_GS_TOKEN is read when fsspec is imported
    if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:  # imported before the switch was set: use the plain one
        fsspec.register_implementation("gs", gcsfs.core.GCSFileSystem, clobber=True)
    try:
        yield url
    finally:
        fsspec.config.conf["gs"] = saved_conf
        gcsfs.core.GCSFileSystem.clear_instance_cache()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def gs_bucket(gcs_server: str) -> str:
    """A fresh, empty bucket: ``gs://<name>``."""
    import gcsfs

    name = f"curate-{uuid.uuid4().hex[:12]}"
    gcsfs.core.GCSFileSystem(token="anon", skip_instance_cache=True).mkdir(name)
    return f"gs://{name}"
