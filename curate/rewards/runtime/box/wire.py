"""Frames between the host and the sandbox runner: a 4-byte little-endian length, then JSON.

JSON, never pickle: the host reads what comes out of the sandbox, and unpickling it would run
code there. Reads take exactly one frame (no read-ahead), so a caller may wait on the file
descriptor for the next one.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

_HEADER = struct.Struct("<I")


def write_frame(fd: int, obj: Any) -> None:
    """Write ``obj`` as one frame to ``fd`` (blocking until all of it is written)."""
    data = json.dumps(obj, separators=(",", ":")).encode("ascii")
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int, until: float | None) -> bytes:
    chunks = []
    while size:
        if until is not None:
            left = until - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise EOFError("no complete frame in time")
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise EOFError("channel closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, max_bytes: int, timeout: float | None = None) -> Any:
    """One frame from ``fd``: its JSON value.

    Raises:
        EOFError: The channel closed, the frame is larger than ``max_bytes``, is not JSON, or
            did not arrive whole within ``timeout`` seconds.
    """
    until = None if timeout is None else time.monotonic() + timeout
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, until))
    if size > max_bytes:
        raise EOFError(f"frame of {size} bytes (at most {max_bytes})")
    try:
        return json.loads(_read_exact(fd, size, until))
    except ValueError:
        raise EOFError("frame is not JSON") from None
