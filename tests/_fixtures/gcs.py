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

import sys
import uuid
from collections.abc import Iterator

import pytest

from curate.core.threads import environ
from tests._fixtures.servers import serving

ENV = {"GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "NO_GCE_CHECK": "true", "FSSPEC_GS_TOKEN": "anon"}


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[str]:
    """The endpoint URL of a GCS emulator on loopback (skipped when gcsfs or the emulator is not installed)."""
    pytest.importorskip("gcp_storage_emulator")
    with serving([sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", "{port}",
                  "--in-memory", "-q"]) as url, \
            environ({**ENV, "STORAGE_EMULATOR_HOST": url}):  # before gcsfs is imported: it reads the layout switch then
        gcsfs = pytest.importorskip("gcsfs")
        import fsspec.config

        saved_conf = dict(fsspec.config.conf.get("gs", {}))
        fsspec.config.conf["gs"] = {**saved_conf, "token": "anon"}  # FSSPEC_GS_TOKEN is read when fsspec is imported
        if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:  # imported before the switch: use the plain one
            fsspec.register_implementation("gs", gcsfs.core.GCSFileSystem, clobber=True)
        try:
            yield url
        finally:
            fsspec.config.conf["gs"] = saved_conf
            gcsfs.core.GCSFileSystem.clear_instance_cache()


@pytest.fixture
def gs_bucket(gcs_server: str) -> str:
    """A fresh, empty bucket: ``gs://<name>``."""
    import gcsfs

    name = f"curate-{uuid.uuid4().hex[:12]}"
    gcsfs.core.GCSFileSystem(token="anon", skip_instance_cache=True).mkdir(name)
    return f"gs://{name}"
