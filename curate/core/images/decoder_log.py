"""What C decoders print, captured per image instead of reaching the terminal.

libtiff reports through process-wide handlers that print to stderr by default (``tempfile.tif: WEBP compression
support is not configured.``). :func:`captured` routes them, for the thread that decodes, into a list the gate
puts in the reason's detail (and reads: a codec "not configured" is ``unsupported_format``). The handlers are
installed once, through ctypes, on the libtiff this process has loaded (Pillow's, found in ``/proc/self/maps``);
outside :func:`captured`, and where they cannot be installed (not Linux x86-64/arm64, no libtiff loaded), messages
go to stderr as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import threading
from collections.abc import Iterator

_local = threading.local()
_lock = threading.Lock()
_installed: list[object] = []  # the ctypes callbacks, kept alive; empty until installed (or tried)
_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
#: Characters kept of one message.
MESSAGE_CHARS = 300


def _loaded_libtiff() -> str | None:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                path = line.rstrip("\n").split(" ", 5)[-1].strip()
                if "/libtiff" in path and ".so" in path:
                    return path
    except OSError:
        return None
    return None


def _handle(module: bytes | None, fmt: bytes | None, args: int | None) -> None:
    buf = ctypes.create_string_buffer(MESSAGE_CHARS)
    _vsnprintf(buf, MESSAGE_CHARS, fmt, args)
    text = buf.value.decode("utf-8", "replace").strip().rstrip(".")
    sink = getattr(_local, "messages", None)
    if sink is None:
        os.write(2, f"{(module or b'').decode('utf-8', 'replace')}: {text}.\n".encode())
    elif len(sink) < 16 and text not in sink:
        sink.append(text)


def _install() -> None:
    """Install the libtiff handlers once (after Pillow's TIFF decoder is loaded)."""
    global _vsnprintf
    with _lock:
        if _installed or platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64", "arm64"):
            return
        from PIL import Image  # noqa: F401 - Pillow's imaging core links libtiff

        path = _loaded_libtiff()
        if path is None:
            _installed.append(None)
            return
        lib = ctypes.CDLL(path)
        libc = ctypes.CDLL(None)
        _vsnprintf = libc.vsnprintf
        _vsnprintf.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p]
        callback = _HANDLER(_handle)
        for name in ("TIFFSetErrorHandler", "TIFFSetWarningHandler"):
            setter = getattr(lib, name)
            setter.restype, setter.argtypes = ctypes.c_void_p, [_HANDLER]
            setter(callback)
        _installed.append(callback)


_vsnprintf = None


@contextlib.contextmanager
def captured() -> Iterator[list[str]]:
    """The messages libtiff reports on this thread while the block runs (warnings and errors, in order)."""
    if not _installed:
        try:
            _install()
        except (OSError, AttributeError):
            _installed.append(None)
    outer = getattr(_local, "messages", None)
    _local.messages = messages = []
    try:
        yield messages
    finally:
        _local.messages = outer
