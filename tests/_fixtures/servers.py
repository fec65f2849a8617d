"""What the storage-server fixtures share: a server process on a loopback port, up for the length of a block."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from curate.fixtures.tiny_vlm import free_port


def wait_for_port(port: int, timeout: float = 60.0) -> None:
    """Return once something accepts connections on ``127.0.0.1:port`` (or ``timeout`` has passed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)


@contextmanager
def serving(command: Sequence[str], env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Run ``command`` (with ``{port}`` filled in by a free port) until the block ends; yields its loopback URL."""
    port = free_port()
    proc = subprocess.Popen([part.format(port=port) for part in command], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=dict(env) if env is not None else None)
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
