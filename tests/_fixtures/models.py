"""Session fixtures: the tiny offline processor and models (built once per test session).

Build times on the 2-core machine, once transformers/open_clip are imported
(about 10-15 s the first time in a session): processor about 0.3 s, tiny CLIP
about 0.3 s, tiny VLM about 0.6 s (its own processor included). Treat the
folders as read-only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

import pytest

from curate.fixtures.processor import build_tiny_processor
from curate.fixtures.tiny_clip import TinyClip, build_tiny_clip, register_tiny_clip
from curate.fixtures.tiny_vlm import (
    build_tiny_vlm,
    free_port,
    serve_missing_packages,
    start_transformers_serve,
    stop_process,
    wait_ready,
)


@pytest.fixture(scope="session")
def tiny_processor_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the tiny Qwen2-VL processor (min 28·28·4, max 28·28·1024 pixels)."""
    return build_tiny_processor(tmp_path_factory.mktemp("tiny-processor"))


@pytest.fixture(scope="session")
def tiny_clip_spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``local-dir:/…`` spec of the tiny open_clip model (seed 0, 64-d embeddings, 64 px images)."""
    return build_tiny_clip(tmp_path_factory.mktemp("tiny-clip"), seed=0)


@pytest.fixture(scope="session")
def tiny_clip(tiny_clip_spec: str) -> TinyClip:
    """The tiny CLIP with its ``.pt`` checkpoint's config registered in open_clip (arch ``curate-tiny-clip``)."""
    return register_tiny_clip(tiny_clip_spec)


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of the tiny random Qwen2-VL with its processor (≤256 image tokens per image)."""
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"), seed=0)


@dataclass(frozen=True)
class TinyServer:
    """A running ``transformers serve`` of the tiny VLM."""

    url: str  #: Base URL, e.g. ``http://127.0.0.1:PORT`` (the OpenAI API is under ``/v1``).
    model: str  #: The only model name the server accepts (the folder, as given).
    folder: Path
    process: Popen
    log: Path
    startup_seconds: float


@pytest.fixture(scope="session")
def tiny_vlm_server(tiny_vlm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinyServer]:
    """A ``transformers serve`` of the tiny VLM on a free loopback port, for the whole session.

    Skips when the server's dependencies are missing. Tests that stop or break the
    server must start their own with ``start_transformers_serve``.
    """
    missing = serve_missing_packages()
    if missing:
        pytest.skip(f"transformers serve needs {', '.join(missing)}")
    port = free_port()
    log = tmp_path_factory.mktemp("tiny-vlm-server") / "server.log"
    proc = start_transformers_serve(tiny_vlm_dir, port, log=log, extra_args=["--default-seed", "0"])
    try:
        url = f"http://127.0.0.1:{port}"
        try:
            seconds = wait_ready(url, timeout=float(os.environ.get("CURATE_SERVE_TIMEOUT", "180")), proc=proc)
        except (RuntimeError, TimeoutError) as exc:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{exc}\n--- server log ---\n{tail}") from exc
        yield TinyServer(url, str(tiny_vlm_dir), tiny_vlm_dir, proc, log, seconds)
    finally:
        stop_process(proc)
