"""Images: the one gate every stage reads them through, with bounded reads and named reasons.

* :func:`check`: the displayed size of an image proven to decode (header + proof);
* :func:`decode`: the pixels, upright 8-bit RGB (:func:`decode_small`: a JPEG at a reduced DCT scale, for signatures);
* :class:`ImageLimits`: bytes, pixels and aspect ratio an image is held to;
* :class:`ImageError`: every refusal, with a reason of :data:`REASONS`;
* :func:`probe`: header only (a claim, not a proof).

Handled (decoded correctly, not errors): CMYK and palette images (converted to RGB), 16-bit and 32-bit
greyscale (scaled to 8 bits), images with alpha (composited on white), EXIF-rotated images (sizes and
pixels follow the displayed orientation).

The image gate's reasons and limits: what can be wrong with an image, named the same in every stage.

Every failure of reading or decoding an image is an :class:`ImageError` whose ``reason`` is one of
:data:`REASONS`. :func:`reason_of` turns whatever a decoder raised into one of them, so a file gets
the same reason whichever stage met it (``pack``, ``embed``, ``recaption``, ``verify``, the loader).

What C decoders print, captured per image instead of reaching the terminal.

libtiff reports through process-wide handlers that print to stderr by default (``tempfile.tif: WEBP compression
support is not configured.``). :func:`captured` routes them, for the thread that decodes, into a list the gate
puts in the reason's detail (and reads: a codec "not configured" is ``unsupported_format``). The handlers are
installed once, through ctypes, on the libtiff this process has loaded (Pillow's, found in ``/proc/self/maps``);
outside :func:`captured`, and where they cannot be installed (not Linux x86-64/arm64, no libtiff loaded), messages
go to stderr as before.

Opening and converting images with Pillow, every failure an :class:`~curate.core.images.ImageError`.

Decoders emit warnings for odd files (TIFF tags larger than the file, EXIF they skip, sizes near the
pixel limit); they are not errors and are not printed: the gate decides, and says why, per image.

Bounded reads of an image's bytes: a local file, an fsspec URL, bytes, or a cell or tar member.

A path must name a regular file (a FIFO, a device such as ``/dev/zero``, a socket or a folder is
``not_a_file``, found without blocking on it) no larger than the byte limit (``too_large``, checked
before anything is read), so one record never costs more than the limit in time or memory.

The one image gate: every stage that counts or decodes pixels accepts an image through here.

* :func:`check` (pack's count step, ``verify``, the OpenAI backend): the displayed size of an image
  **proven to decode** to the pixels the trainer's processor will see. JPEG and PNG are proven
  without a full decode (:mod:`curate.core.images`); every other format, and every file the
  proof cannot vouch for, is decoded fully.
* :func:`decode` (embed, recaption, the loader, report thumbnails): the pixels, upright 8-bit RGB.

Both read within :class:`~curate.core.images.ImageLimits` (bytes, pixels, aspect ratio),
orient as ``transformers.image_utils.load_image`` does (``ImageOps.exif_transpose`` on the loaded
image: EXIF orientation applied exactly once, whatever the format; TIFF's own orientation is applied
by libtiff when it loads), and raise :class:`~curate.core.images.ImageError` with one reason
of :data:`~curate.core.images.REASONS`, in the same order in both: the bytes (missing,
not a file, too large, empty), the header (not an image, a bomb), the pixels (truncated, unsupported,
unreadable), then the geometry (an extreme aspect ratio). So a file gets the same reason in every stage.

Header-only image sizes: what a file says about itself, read without its pixels.

:func:`probe` reads an image's header (for a local file: its first 64 KiB and last 4 KiB) and
returns the displayed size the header claims. It proves nothing about the pixels: the gate of
every stage is :func:`curate.core.images.check` (header + proof of decodability) or
:func:`curate.core.images.decode`. ``probe`` remains for what only needs a claim (the benchmark's
header-only baseline, quick looks at a folder).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import logging
import os
import platform
import re
import stat
import struct
import threading
import warnings
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps

from curate.core.image_headers import claim_too_large, ImageAt, Header, header_of_bytes, header_of_parts, read_header
from curate.core.io import is_url, text_of, url_fs


# The image gate's reasons and limits: what can be wrong with an image, named the same in every stage.
#: Images with more pixels than this are refused as decompression bombs (Pillow's own error threshold).
DEFAULT_MAX_PIXELS = 2 * 89_478_485
#: Image files larger than this are refused before they are read (the largest real photos are tens of MB).
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: The longer side over the shorter one beyond which the Qwen2-VL family's processor refuses an image.
MAX_ASPECT = 200.0

#: Every reason an image can be refused for, and what it means (docs/images.md's table is checked against this one).
REASONS: dict[str, str] = {
    "missing_image": "the record names an image that is not there (no such file, a null cell), or its layout "
                     "implies an image it does not carry (a caption without an image, a URL never downloaded)",
    "not_a_file": "the path is a FIFO, a device, a socket or a folder, not a regular file",
    "invalid_path": "the path cannot be opened as written (a NUL character, too long, a symlink loop)",
    "too_large": "the file has more bytes than the image byte limit",
    "empty_file": "the file or the cell holds 0 bytes",
    "not_an_image": "no decoder recognises the bytes as an image",
    "unsupported_format": "a known format this installation cannot decode (EPS without Ghostscript, WMF, "
                          "DDS/FTEX variants Pillow does not implement, ...)",
    "truncated": "the image data ends before the image does (an interrupted download)",
    "unreadable_image": "the image data is corrupt, or the file cannot be read",
    "decompression_bomb": "more pixels than the pixel limit",
    "extreme_aspect_ratio": f"the longer side is more than {MAX_ASPECT:g} times the shorter "
                            "(the Qwen2-VL processor refuses it)",
    "image_vanished": "the image changed or was deleted between two steps of a run",
}


class ImageError(Exception):
    """An image that cannot be used; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ImageLimits:
    """The bounds every image is held to: bytes read, pixels decoded, aspect ratio.

    One image then costs at most a known amount of reading and memory in every stage.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_aspect: float = MAX_ASPECT

    def settings(self) -> dict[str, Any]:
        """The limits as recorded in a stage's settings (they change which images are accepted)."""
        return asdict(self)


DEFAULT_LIMITS = ImageLimits()

#: What a decoder's message says it found, checked in this order (the first match decides, so one message has one
#: reason): a format or variant this installation cannot decode, then data that ends early. Any other failure of a
#: recognised file is corrupt data (``unreadable_image``). Whether data ended early is then checked against the
#: bytes for formats with an end marker (:func:`curate.core.images.ends_early`).
MESSAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("unsupported_format", ("not configured", "ghostscript", "cannot find loader", "unknown pixel mode",
                            "cannot handle", "unknown raw mode", "unrecognized mode", "unknown data organization",
                            "not supported", "unsupported", "not implemented")),
    ("truncated", ("truncated", "premature end", "not enough image data", "not enough data", "expected to read",
                   "end of file", "no more data", "unexpected end", "buffer overrun", "requires a buffer of at least")),
)


def message_reason(text: str) -> str:
    """The reason a decoder's message names (:data:`MESSAGES`; ``unreadable_image`` when none matches)."""
    low = text.lower()
    for reason, words in MESSAGES:
        if any(word in low for word in words):
            return reason
    return "unreadable_image"


def reason_of(exc: BaseException) -> str:
    """The gate's reason for an exception a decoder raised (the same text gives the same reason everywhere)."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(exc, ImageError):
        return exc.reason
    if isinstance(exc, Image.DecompressionBombError):
        return "decompression_bomb"
    if isinstance(exc, UnidentifiedImageError):
        return "not_an_image"
    if isinstance(exc, NotImplementedError):
        return "unsupported_format"
    return message_reason(str(exc))


_ADDRESS = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")


def as_image_error(exc: BaseException, label: str) -> ImageError:
    """An :class:`ImageError` naming ``label`` for whatever a decoder raised (its text without object addresses,
    which would make the same file's detail differ from run to run)."""
    if isinstance(exc, ImageError):
        return exc
    text = _ADDRESS.sub("", str(exc).strip().splitlines()[0]).strip() if str(exc).strip() else ""
    return ImageError(reason_of(exc), f"{label}: {type(exc).__name__}{': ' + text[:200] if text else ''}")


# What C decoders print, captured per image instead of reaching the terminal.
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


# Opening and converting images with Pillow, every failure an :class:`ImageError`.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
logging.getLogger("PIL").addHandler(logging.NullHandler())  # Pillow's log of odd files: the gate's reason says it


@dataclass(frozen=True)
class ImageInfo:
    """What the gate knows of an accepted image: its displayed size, format, mode, orientation and bytes."""

    width: int
    height: int
    format: str
    mode: str
    orientation: int
    nbytes: int


class ViewFile(io.RawIOBase):
    """A read-only file over a memoryview (Pillow reads from it without the image being copied first)."""

    def __init__(self, view: memoryview | bytes) -> None:
        super().__init__()
        self._view, self._pos = memoryview(view), 0

    def readable(self) -> bool:
        """Always readable."""
        return True

    def seekable(self) -> bool:
        """Always seekable."""
        return True

    def __len__(self) -> int:
        return len(self._view)

    def read(self, n: int | None = -1) -> bytes:
        """Up to ``n`` bytes from the current position (all that is left by default)."""
        end = len(self._view) if n is None or n < 0 else min(len(self._view), self._pos + n)
        out = bytes(self._view[self._pos:end])
        self._pos = max(self._pos, end)
        return out

    def readinto(self, buf: Any) -> int:
        """Read into ``buf``; the number of bytes read."""
        data = self.read(len(buf))
        buf[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the position."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        """The position."""
        return self._pos

    def read_all(self) -> memoryview:
        """The whole view (without a copy)."""
        return self._view


def as_file(data: bytes | memoryview) -> io.BufferedIOBase | ViewFile:
    """A seekable file over image bytes (a view is not copied)."""
    return io.BytesIO(data) if isinstance(data, bytes) else ViewFile(data)


def ends_early(data: Any) -> bool | None:
    """Whether image bytes visibly end before their image does: True (cut short), False (whole), None (a format
    without an end marker, where only the decoder can tell).

    JPEG: whole when an end-of-image marker (``FF D9``) follows the last start-of-scan (``FF DA``) in the last
    64 KiB (an EXIF thumbnail's own end marker comes before the main scan, so it does not count); PNG: an ``IEND``
    chunk in the last 4 KiB; GIF: the trailer ``;``; WEBP: the RIFF size the header gives.
    """
    return _ends_early(bytes(data[:16]), bytes(data[-65536:]), len(data))


def _ends_early(head: bytes, tail: bytes, size: int) -> bool | None:
    if head[:3] == b"\xff\xd8\xff":
        end = tail.rfind(b"\xff\xd9")
        return end < 0 or end < tail.rfind(b"\xff\xda")
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return b"IEND" not in tail[-4096:]
    if head[:4] == b"GIF8":
        return not tail.rstrip(b"\x00").endswith(b";")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return size < int.from_bytes(head[4:8], "little") + 8
    return None


def looks_complete(head: bytes, tail: bytes, size: int) -> bool:
    """Whether a file known by its first bytes ``head`` and last bytes ``tail`` (64 KiB for a JPEG) is not visibly
    cut short (:func:`ends_early`; True for formats without an end marker)."""
    return _ends_early(head, tail, size) is not True


def truncation(error: ImageError, data: Any, upgrade: bool = True) -> ImageError:
    """``error`` settled by the bytes where they can tell: data that visibly ends early is ``truncated`` (with
    ``upgrade``: a failure while decoding the pixels, where a cut file often reads as a broken stream); a file that
    is whole is not ``truncated``, even when the decoder ran out of data (its structure is corrupt:
    ``unreadable_image``)."""
    if error.reason not in ("unreadable_image", "truncated"):
        return error
    early = ends_early(data)
    if early and upgrade and error.reason == "unreadable_image":
        return ImageError("truncated", f"{error.detail} (the file ends early)")
    if early is False and error.reason == "truncated":
        return ImageError("unreadable_image", f"{error.detail} (the file is whole: its data is corrupt)")
    return error


def pil_open(fh: Any, max_pixels: int, label: str) -> Image.Image:
    """Open lazily (header only), mapping every failure and oversize to an :class:`ImageError`.

    Bytes no decoder recognises are ``not_an_image``; bytes whose first bytes a decoder recognises but whose header
    it then refuses are what that decoder found (:func:`recognised_failure`).
    """
    try:
        img = Image.open(fh)
    except Exception as exc:  # noqa: BLE001 - a decoder may raise anything on a crafted file
        error = as_image_error(exc, label)
        held = fh.getbuffer() if hasattr(fh, "getbuffer") else fh.read_all() if hasattr(fh, "read_all") else None
        found = recognised_failure(fh, label) if error.reason == "not_an_image" else None
        if found is not None:  # refused in its header: the decoder's message says whether it ran out of data
            raise (truncation(found, held, upgrade=False) if held is not None else found) from None
        raise (truncation(error, held) if held is not None else error) from None
    w, h = img.size
    if w <= 0 or h <= 0:
        raise ImageError("unreadable_image", f"{label}: size {w}x{h}")
    if w * h > max_pixels:
        raise ImageError("decompression_bomb", f"{label}: {w}x{h} pixels exceeds {max_pixels:,} "
                                               "(raise --max-image-pixels to accept it)")
    return img


def recognised_failure(fh: Any, label: str) -> ImageError | None:
    """What the first decoder that recognises the file's first bytes found when it then refused the file (tried as
    ``Image.open`` tries them, whose own error only says that no decoder took it); None when none recognises them.
    """
    Image.init()
    try:
        fh.seek(0)
        prefix = fh.read(16)
    except (OSError, ValueError):
        return None
    for fmt in Image.ID:
        factory, accept = Image.OPEN[fmt]
        if accept is None:
            continue
        found = accept(prefix)
        if not found or isinstance(found, str):
            continue
        try:
            fh.seek(0)
            factory(fh, "")
        except Exception as exc:  # noqa: BLE001 - the decoder's own refusal is the answer
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            text = _ADDRESS.sub("", text).strip()
            return ImageError(message_reason(text), f"{label}: {fmt}: {text[:200]}")
        return None
    return None


def open_image(data: bytes | memoryview, max_pixels: int, label: str) -> Image.Image:
    """:func:`pil_open` on image bytes, the header's size then checked against the bytes
    (:func:`curate.core.image_headers.claim_too_large`) before anything is decoded: a claim the data cannot
    hold is ``truncated`` (``unreadable_image`` when the file is whole: its header lies), found without allocating
    the image."""
    img = pil_open(as_file(data), max_pixels, label)
    too_large = claim_too_large(data)
    if too_large is not None:  # cut short, or (a whole file) a header that lies: corrupt
        raise truncation(ImageError("truncated", f"{label}: {too_large}"), data, upgrade=False)
    return img


_SIXTEEN = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")


def to_rgb(img: Image.Image) -> Image.Image:
    """8-bit RGB: CMYK and palettes converted, 16/32-bit greyscale scaled, alpha composited on white."""
    mode = img.mode
    if mode == "RGB":
        return img
    if mode in _SIXTEEN:
        arr = np.asarray(img, dtype=np.float64)
        lo, hi = float(arr.min()), float(arr.max())
        if mode.startswith("I;16"):
            lo, hi = 0.0, 65535.0
        scaled = np.zeros_like(arr) if hi <= lo else (arr - lo) * (255.0 / (hi - lo))
        return Image.fromarray(np.clip(scaled + 0.5, 0, 255).astype(np.uint8), "L").convert("RGB")
    if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


# Bounded reads of an image's bytes: a local file, an fsspec URL, bytes, or a cell or tar member.
#: A path or URL, the bytes, or an image in a tar or Parquet file known by its head (pack's length step).
ImageSource = str | os.PathLike[str] | bytes | ImageAt

_PATH_ERRORS = {errno.ELOOP: "a symlink loop", errno.ENAMETOOLONG: "the path is too long"}


def image_label(src: ImageSource, index: int = 0) -> str:
    """How an image is named in messages: its path, or ``image <index> (<n> bytes)``."""
    if isinstance(src, (bytes, ImageAt)):
        return f"image {index} ({len(src)} bytes)"
    text = text_of(src) if isinstance(src, (str, os.PathLike)) else str(src)
    return text if len(text) <= 300 else text[:200] + f"... ({len(text)} characters)"


@contextlib.contextmanager
def file_errors(src: ImageSource, unreadable: type[OSError] = OSError) -> Iterator[None]:
    """Map the file-system failures of opening or reading ``src`` to :class:`ImageError` reasons.

    A missing file is ``missing_image``; a folder ``not_a_file``; a NUL in the path, a symlink loop or
    a path too long ``invalid_path``; ``unreadable`` errors (by default every other ``OSError``)
    ``unreadable_image``.
    """
    label = image_label(src)
    try:
        yield
    except FileNotFoundError:
        raise ImageError("missing_image", label) from None
    except IsADirectoryError:
        raise ImageError("not_a_file", f"{label} is a folder") from None
    except ValueError as exc:  # "embedded null byte"
        raise ImageError("invalid_path", f"{label}: {exc}") from None
    except OSError as exc:
        if exc.errno in _PATH_ERRORS:
            raise ImageError("invalid_path", f"{label}: {_PATH_ERRORS[exc.errno]}") from None
        if isinstance(exc, unreadable):
            raise ImageError("unreadable_image", f"{label}: {exc.strerror or exc}") from None
        raise


def _check_size(size: int, limits: ImageLimits, label: str) -> None:
    if size > limits.max_bytes:
        raise ImageError("too_large", f"{label}: {size:,} bytes, more than the limit of {limits.max_bytes:,} "
                                      "(raise --max-image-bytes to accept it)")


def read_bytes(src: ImageSource, limits: ImageLimits = DEFAULT_LIMITS) -> bytes | memoryview:
    """An image's bytes, read within ``limits`` (a Parquet cell still held comes as a view, not copied).

    Raises:
        ImageError: ``missing_image``, ``not_a_file``, ``invalid_path``, ``too_large``,
            ``unreadable_image`` or ``image_vanished`` (a tar member that changed since it was listed).
    """
    label = image_label(src)
    if isinstance(src, bytes):
        _check_size(len(src), limits, label)
        return src
    if isinstance(src, ImageAt):
        _check_size(len(src), limits, label)
        if src.held is not None:
            return src.held
        try:
            return src.read()
        except (OSError, ValueError) as exc:
            raise ImageError("image_vanished", f"{src.file}: {exc}") from None
    if is_url(src):
        return _read_url(os.fspath(src), limits, label)
    with file_errors(src):
        fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                        or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a folder"
                        if stat.S_ISDIR(st.st_mode) else "not a regular file")
                raise ImageError("not_a_file", f"{label} is {kind}")
            _check_size(st.st_size, limits, label)
            return _read_fd(fd, st.st_size, limits, label)
        finally:
            os.close(fd)


def _read_fd(fd: int, size: int, limits: ImageLimits, label: str) -> bytes:
    """The file's bytes; a file that grew past the limit while read is ``too_large``."""
    chunks, total = [], 0
    want = size + 1  # one byte more: a file that grew since fstat is noticed
    while True:
        chunk = os.read(fd, max(want - total, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limits.max_bytes:
            _check_size(total, limits, label)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _read_url(url: str, limits: ImageLimits, label: str) -> bytes:
    try:
        fs, inner = url_fs(url)
        size = fs.size(inner)
        if size is not None:
            _check_size(int(size), limits, label)
        with fs.open(inner, "rb") as fh:
            data = fh.read(limits.max_bytes + 1)
    except FileNotFoundError:
        raise ImageError("missing_image", label) from None
    except ImageError:
        raise
    except Exception as exc:  # fsspec back ends raise their own types
        raise ImageError("unreadable_image", f"{label}: {exc}") from None
    _check_size(len(data), limits, label)
    return data


# The one image gate: every stage that counts or decodes pixels accepts an image through here.
def check(src: ImageSource, limits: ImageLimits = DEFAULT_LIMITS, *, label: str | None = None) -> ImageInfo:
    """The displayed size of an image proven to decode (see the module docstring).

    Raises:
        ImageError: the image is not accepted; the same reason :func:`decode` gives the same file.
    """
    label = label or image_label(src)
    data = read_bytes(src, limits)
    if not len(data):
        raise ImageError("empty_file", label)
    img = open_image(data, limits.max_pixels, label)
    fmt, mode = img.format or "unknown", img.mode
    proven = prove(img, data) if fmt in PROVEN_FORMATS else None
    if proven is None:  # another format, or a doubt: the full decode decides (and names the reason)
        opened = None if fmt in PROVEN_FORMATS else img  # a proof may have used the image up: open it again
        pixels, orientation = decode_bytes(data, limits, label, opened=opened)
        width, height = pixels.size
    else:
        (width, height), orientation = proven.displayed(), proven.orientation
        check_aspect(width, height, limits, label)
    return ImageInfo(width=width, height=height, format=fmt, mode=mode, orientation=orientation, nbytes=len(data))


def refusal(images: Sequence[ImageSource], limits: ImageLimits = DEFAULT_LIMITS) -> ImageError | None:
    """The gate's refusal of the first of ``images`` it refuses (each labelled by its place), or None.

    Stages that hand images to a model check them here first, so a record is errored with the same
    reason as in every other stage, before any request is made.
    """
    for j, image in enumerate(images):
        try:
            check(image, limits, label=image_label(image, j))
        except ImageError as exc:
            return exc
    return None


def decode(src: ImageSource, limits: ImageLimits = DEFAULT_LIMITS, *, label: str | None = None) -> Image.Image:
    """Decode an image fully to an upright 8-bit RGB Pillow image.

    Raises:
        ImageError: see :func:`check`.
    """
    label = label or image_label(src)
    return decode_bytes(read_bytes(src, limits), limits, label)[0]


def decode_small(src: ImageSource, limits: ImageLimits = DEFAULT_LIMITS, *, label: str | None = None,
                 size: tuple[int, int] = (256, 256), grey: bool = False) -> tuple[Image.Image, int, int]:
    """Decode an image for a signature: ``(upright image, full displayed width, full displayed height)``.

    The same gate as :func:`decode` (same reads, limits, reasons, orientation, aspect check on the full size), but a
    JPEG is decoded at the largest DCT scale (1/2 to 1/8) that keeps it at least ``size`` (Pillow's ``draft``):
    libjpeg still reads every coefficient, so a file refused here is refused by :func:`decode`, at a fraction of
    the cost. Other formats are decoded fully. With ``grey`` the image is 8-bit greyscale (``L``; a colour JPEG's
    luma is decoded alone, without its chroma), else upright 8-bit RGB.
    """
    label = label or image_label(src)
    data = read_bytes(src, limits)
    if not len(data):
        raise ImageError("empty_file", label)
    img = open_image(data, limits.max_pixels, label)
    width, height = img.size
    if img.format in ("JPEG", "MPO") and img.mode in ("RGB", "L"):
        img.draft("L" if grey else img.mode, size)
    out, orientation = decode_bytes(data, limits, label, opened=img, full_size=(width, height), keep_grey=grey)
    if orientation in (5, 6, 7, 8):
        width, height = height, width
    return (out if not grey or out.mode == "L" else out.convert("L")), width, height


def decode_bytes(data: bytes | memoryview, limits: ImageLimits, label: str,
                 opened: Image.Image | None = None,
                 full_size: tuple[int, int] | None = None, keep_grey: bool = False) -> tuple[Image.Image, int]:
    """Decode image bytes: ``(upright RGB image, the EXIF orientation that was applied)``; ``opened``: the
    image Pillow has just opened from ``data`` (not loaded), when the caller has it; ``full_size``: its stored size
    before a reduced decode (the aspect check holds the full size); ``keep_grey``: an 8-bit greyscale image is
    returned as it is, not as RGB."""
    if not len(data):
        raise ImageError("empty_file", label)
    img = opened if opened is not None else open_image(data, limits.max_pixels, label)
    with captured() as messages:  # libtiff's reports: into the reason, not onto the terminal
        try:
            img.load()
            value = img.getexif().get(0x0112, 1)  # as exif_transpose reads it (TIFF's is gone once libtiff loaded it)
            orientation = value if isinstance(value, int) and 1 <= value <= 8 else 1
            ImageOps.exif_transpose(img, in_place=True)  # upright, without a copy of an image that already is
            rgb = img if keep_grey and img.mode == "L" else to_rgb(img)
        except Exception as exc:  # noqa: BLE001 - a decoder may raise anything on a crafted file
            error = as_image_error(exc, label)
            if messages:  # what the decoder printed says more than "decoder error -2"
                said = "; ".join(messages)
                reason = message_reason(said)
                error = ImageError(reason if reason != "unreadable_image" else error.reason,
                                   f"{error.detail} ({img.format or 'decoder'}: {said[:300]})")
            raise truncation(error, data) from None
    width, height = rgb.size if full_size is None else full_size
    check_aspect(width, height, limits, label)
    return rgb, orientation


def check_aspect(width: int, height: int, limits: ImageLimits, label: str) -> None:
    """Refuse an image whose longer side is more than ``limits.max_aspect`` times its shorter one."""
    if max(width, height) > limits.max_aspect * min(width, height):
        raise ImageError("extreme_aspect_ratio", f"{label}: {width}x{height} is more than "
                                                 f"{limits.max_aspect:g}:1, the processor refuses it")


def file_extension(info_format: str, path: str | bytes | None = None) -> str:
    """A file extension for an image format (used when storing original bytes)."""
    known = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tif"}
    if info_format in known:
        return known[info_format]
    from curate.core.formats.rows import IMAGE_EXTS  # the one list: Pillow's extension for the format, if listed

    Image.init()
    if info_format.lower() in IMAGE_EXTS:
        return info_format.lower()
    for ext, fmt in Image.registered_extensions().items():
        if fmt == info_format and ext.lstrip(".") in IMAGE_EXTS:
            return ext.lstrip(".")
    if path and isinstance(path, str):
        suffix = Path(path).suffix.lower().lstrip(".")
        if suffix.isalnum() and len(suffix) <= 8:
            return suffix
    return "img"


# Header-only image sizes: what a file says about itself, read without its pixels.
def probe(src: ImageSource, *, max_pixels: int = DEFAULT_MAX_PIXELS, label: str | None = None) -> ImageInfo:
    """Read an image's header (never its pixels) and return the displayed size it claims.

    Raises:
        ImageError: missing, empty, not an image, truncated (end marker absent), or a decompression bomb.
    """
    label = label or image_label(src)
    if isinstance(src, ImageAt):
        fast = header_of_parts(src.head, src.tail) if len(src) else None
        if fast is not None:
            return _from_header(fast, len(src), max_pixels, label)
        src = bytes(read_bytes(src))
    if not isinstance(src, bytes) and is_url(src):
        src = bytes(read_bytes(src))
    if isinstance(src, bytes):
        fast = header_of_bytes(src) if src else None
        if fast is not None:
            return _from_header(fast, len(src), max_pixels, label)
        return _probe_file(io.BytesIO(src), len(src), max_pixels, label)
    with file_errors(src, unreadable=PermissionError), open(src, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fast = read_header(src, size, fh.fileno()) if size else None
        if fast is not None:
            return _from_header(fast, size, max_pixels, label)
        return _probe_file(fh, size, max_pixels, label)


def _from_header(h: Header, size: int, max_pixels: int, label: str) -> ImageInfo:
    if h.width * h.height > max_pixels:
        raise ImageError("decompression_bomb", f"{label}: {h.width}x{h.height} pixels exceeds {max_pixels}")
    if not h.complete:
        raise ImageError("truncated", f"{label}: {h.format} end marker missing")
    w, h_ = (h.height, h.width) if h.orientation in TRANSPOSING else (h.width, h.height)
    return ImageInfo(width=w, height=h_, format=h.format, mode=h.mode, orientation=h.orientation, nbytes=size)


def _probe_file(fh: io.BufferedIOBase, size: int, max_pixels: int, label: str) -> ImageInfo:
    if size == 0:
        raise ImageError("empty_file", label)
    img = pil_open(fh, max_pixels, label)
    w, h = img.size
    fmt = img.format or "unknown"
    try:  # TIFF reports the displayed size already (libtiff applies the orientation when it loads)
        orientation = 1 if fmt == "TIFF" else int(img.getexif().get(0x0112, 1))
    except Exception:  # noqa: BLE001 - malformed EXIF is not fatal here: treated as upright
        orientation = 1
    orientation = orientation if 1 <= orientation <= 8 else 1
    fh.seek(0)
    head = fh.read(8)
    fh.seek(max(0, size - (65536 if fmt == "JPEG" else 4096)))
    tail = fh.read()
    if not looks_complete(head, tail, size):
        raise ImageError("truncated", f"{label}: {fmt} end marker missing")
    if orientation in TRANSPOSING:
        w, h = h, w
    return ImageInfo(width=w, height=h, format=fmt, mode=img.mode, orientation=orientation, nbytes=size)


# Decodability proven without a full decode: JPEG from its structure, PNG from its CRCs and zlib stream.
# 
# Proof that a JPEG decodes, from its structure: every segment libjpeg would refuse is checked, the
# entropy-coded data is only walked for its markers.
# 
# libjpeg stops a decode (``error_exit``: what Pillow raises) only on what its headers say: lengths,
# precision, sizes, sampling factors, component ids, quantisation and Huffman tables (indices, counts,
# over-full codes, DC symbols over 15), scan parameters, tables used before they are defined, unknown
# markers, a file that ends before its end marker. Damaged entropy-coded data is a warning to libjpeg:
# the decode goes on (the pixels are wrong, as they would be for the trainer). So a file whose every
# segment passes these checks and that reaches its end-of-image marker decodes, and checking it costs
# a walk over the markers (C-speed search through the scans), not a Huffman decode of every
# coefficient.
# 
# Only the plain structures are vouched for: baseline, extended sequential and progressive Huffman
# JPEGs with 1, 3 or 4 components. Anything else (arithmetic coding, lossless, hierarchical, DNL,
# 12-bit, unusual scan parameters, fractional sampling) answers "don't know" and goes to the full
# decode, which names the reason (:mod:`curate.core.images`).
# 
# Proof that an image decodes, cheaper than decoding it, for the two formats of most of the web.
# 
# * **JPEG**: its structure checked as libjpeg checks it, the entropy-coded data walked for its markers
#   to the end-of-image marker (:mod:`curate.core.images`); a structure that walk does not
#   vouch for is decoded at 1/8 scale (Pillow's draft mode: libjpeg still reads and Huffman-decodes the
#   whole entropy-coded stream, so a broken stream fails as it would at full size).
# * **PNG**: Pillow reads the chunks before the image data (as it does when it opens a file:
#   their CRCs and contents checked); then every image-data chunk's CRC is checked and its zlib stream
#   inflated without keeping the pixels: it must end exactly at the size the header implies, with a
#   valid filter byte at the start of every row.
# 
# A proof answers "decodes" or "don't know" (None), never "broken": whatever the proof cannot vouch
# for (another format, an interlaced or animated PNG, an orientation given in XMP, a failed check)
# goes to the full decode, which then names the reason. So an image the proof accepts is one the
# full decode accepts, and a file gets the same reason whichever path it took.
# Proof that a JPEG decodes, from its structure: every segment libjpeg would refuse is checked, the entropy-coded data
# is only walked for its markers.
_MARKER = re.compile(rb"\xff[\x01-\xcf\xd8-\xfe]")  # a marker in entropy-coded data (not RSTn, stuffing or fill)
_SOF = (0xC0, 0xC1, 0xC2)  # baseline, extended sequential, progressive (Huffman)
_TABLES_AND_MISC = {0xC4, 0xDB, 0xDD, 0xFE} | set(range(0xE0, 0xF0))  # DHT, DQT, DRI, COM, APPn
_MAX_DIMENSION = 65500
_MAX_BLOCKS_IN_MCU = 10


class _Doubt(Exception):
    """The structure is not one this module vouches for."""


class _State:
    def __init__(self) -> None:
        self.frame: tuple[int, int, dict[int, tuple[int, int, int]]] | None = None  # height, width, id -> (h, v, tq)
        self.progressive = False
        self.quant: set[int] = set()
        self.huffman: set[tuple[int, int]] = set()  # (class 0 DC / 1 AC, index)
        self.scans = 0


def jpeg_decodes(view: memoryview | bytes) -> tuple[int, int] | None:
    """``(width, height)`` of a JPEG proven to decode (see the module docstring), else None."""
    data = bytes(view) if isinstance(view, memoryview) else view
    try:
        return _walk(data)
    except (_Doubt, struct.error, IndexError):
        return None


def _walk(data: bytes) -> tuple[int, int] | None:
    if data[:2] != b"\xff\xd8":
        raise _Doubt
    state, pos, size = _State(), 2, len(data)
    while True:
        while pos < size and data[pos] == 0xFF and pos + 1 < size and data[pos + 1] == 0xFF:
            pos += 1  # fill bytes before a marker
        if pos + 2 > size or data[pos] != 0xFF:
            raise _Doubt
        marker = data[pos + 1]
        if marker == 0xD9:  # end of image
            if state.frame is None or not state.scans:
                raise _Doubt
            height, width, _ = state.frame
            return width, height
        if pos + 4 > size:
            raise _Doubt
        length = struct.unpack_from(">H", data, pos + 2)[0]
        body = data[pos + 4:pos + 2 + length]
        if length < 2 or len(body) != length - 2:
            raise _Doubt
        pos += 2 + length
        if marker in _SOF:
            _frame(state, marker, body)
        elif marker == 0xDA:
            _scan(state, body)
            found = _MARKER.search(data, pos)  # the next marker after the entropy-coded data
            if found is None:
                raise _Doubt  # cut: the decoder would run out of data
            pos = found.start()
        elif marker == 0xC4:
            _huffman(state, body)
        elif marker == 0xDB:
            _quant(state, body)
        elif marker == 0xDD:
            if length != 4:
                raise _Doubt
        elif marker not in _TABLES_AND_MISC:
            raise _Doubt  # another frame type, DNL, DAC, a reserved marker...


def _frame(state: _State, marker: int, body: bytes) -> None:
    if state.frame is not None or state.scans:
        raise _Doubt
    precision, height, width, count = struct.unpack_from(">BHHB", body, 0)
    if precision != 8 or not (0 < height <= _MAX_DIMENSION and 0 < width <= _MAX_DIMENSION):
        raise _Doubt
    if count not in (1, 3, 4) or len(body) != 6 + 3 * count:
        raise _Doubt
    comps: dict[int, tuple[int, int, int]] = {}
    for k in range(count):
        cid, hv, tq = body[6 + 3 * k], body[7 + 3 * k], body[8 + 3 * k]
        h, v = hv >> 4, hv & 15
        if cid in comps or not (1 <= h <= 4 and 1 <= v <= 4) or tq > 3:
            raise _Doubt
        comps[cid] = (h, v, tq)
    max_h, max_v = max(c[0] for c in comps.values()), max(c[1] for c in comps.values())
    if any(max_h % h or max_v % v for h, v, _ in comps.values()):
        raise _Doubt  # fractional sampling: libjpeg refuses it
    if count > 1 and sum(h * v for h, v, _ in comps.values()) > _MAX_BLOCKS_IN_MCU:
        raise _Doubt
    state.frame, state.progressive = (height, width, comps), marker == 0xC2


def _scan(state: _State, body: bytes) -> None:
    if state.frame is None:
        raise _Doubt
    _, _, comps = state.frame
    n = body[0]
    if not 1 <= n <= 4 or len(body) != 4 + 2 * n:
        raise _Doubt
    ids = [body[1 + 2 * k] for k in range(n)]
    tables = [(body[2 + 2 * k] >> 4, body[2 + 2 * k] & 15) for k in range(n)]
    ss, se, ah, al = body[1 + 2 * n], body[2 + 2 * n], body[3 + 2 * n] >> 4, body[3 + 2 * n] & 15
    if len(set(ids)) != n or any(cid not in comps for cid in ids) or any(td > 3 or ta > 3 for td, ta in tables):
        raise _Doubt
    if n > 1 and sum(comps[cid][0] * comps[cid][1] for cid in ids) > _MAX_BLOCKS_IN_MCU:
        raise _Doubt
    if any(comps[cid][2] not in state.quant for cid in ids):
        raise _Doubt  # a quantisation table used before it is defined
    if not state.progressive:
        if (ss, se, ah, al) != (0, 63, 0, 0):
            raise _Doubt
        needed = [(0, td) for td, _ in tables] + [(1, ta) for _, ta in tables]
    elif ss == 0:  # a DC scan
        if se != 0 or al > 13 or (ah and ah != al + 1):
            raise _Doubt
        needed = [(0, td) for td, _ in tables] if ah == 0 else []
    else:  # an AC scan: one component
        if n != 1 or not ss <= se <= 63 or al > 13 or (ah and ah != al + 1):
            raise _Doubt
        needed = [(1, ta) for _, ta in tables]
    if any(t not in state.huffman for t in needed):
        raise _Doubt
    state.scans += 1


def _quant(state: _State, body: bytes) -> None:
    pos = 0
    while pos < len(body):
        pq, tq = body[pos] >> 4, body[pos] & 15
        if pq > 1 or tq > 3:
            raise _Doubt
        pos += 1 + (128 if pq else 64)
        if pos > len(body):
            raise _Doubt
        state.quant.add(tq)


def _huffman(state: _State, body: bytes) -> None:
    pos = 0
    while pos < len(body):
        tc, th = body[pos] >> 4, body[pos] & 15
        if tc > 1 or th > 3 or pos + 17 > len(body):
            raise _Doubt
        counts = body[pos + 1:pos + 17]
        total = sum(counts)
        symbols = body[pos + 17:pos + 17 + total]
        if total > 256 or len(symbols) != total or (tc == 0 and any(s > 15 for s in symbols)):
            raise _Doubt
        code = 0  # canonical codes: each length's codes must fit in that many bits, never all ones
        for bits, count in enumerate(counts, start=1):
            code += count
            if count and code >= 1 << bits:
                raise _Doubt
            code <<= 1
        state.huffman.add((tc, th))
        pos += 17 + total


# Proof that an image decodes, cheaper than decoding it, for the two formats of most of the web.
#: Formats a proof exists for (every other format is decoded fully).
PROVEN_FORMATS = ("JPEG", "MPO", "PNG")
#: EXIF orientations whose display swaps width and height (what ``ImageOps.exif_transpose`` does).
TRANSPOSING = (5, 6, 7, 8)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_PNG_TEXT = (b"tEXt", b"zTXt", b"iTXt")
#: ``info`` keys from which Pillow may read an orientation other than the EXIF block's (XMP, ImageMagick).
_OTHER_ORIENTATION = ("Raw profile type exif", "XML:com.adobe.xmp", "xmp")
_EXIF_TEXT = (b"Raw profile type exif", b"XML:com.adobe.xmp")
_ANIMATION = (b"acTL", b"fcTL", b"fdAT")
_INFLATE_STEP = 1 << 20


@dataclass(frozen=True)
class Proven:
    """An image proven to decode: its stored size and the orientation its display applies."""

    width: int
    height: int
    orientation: int

    def displayed(self) -> tuple[int, int]:
        """``(width, height)`` as displayed (after the EXIF orientation)."""
        return (self.height, self.width) if self.orientation in TRANSPOSING else (self.width, self.height)


def _orientation(value: object) -> int:
    """Pillow's orientation value as ``exif_transpose`` reads it (anything but 2..8 is upright)."""
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def prove(img: Image.Image, data: bytes | memoryview) -> Proven | None:
    """Prove that ``img`` (just opened by Pillow from ``data``) decodes; None when this cannot be shown cheaply.

    ``img`` is used up (a JPEG's is loaded at reduced scale): decode again from ``data`` for pixels.
    """
    try:
        if img.format in ("JPEG", "MPO"):
            return _prove_jpeg(img, data)
        if img.format == "PNG":
            return _prove_png(img, data)
    except Exception:  # noqa: BLE001 - any doubt is for the full decode to settle, with its reason
        return None
    return None


def _prove_jpeg(img: Image.Image, data: bytes | memoryview) -> Proven | None:
    width, height = img.size
    orientation = _orientation(img.getexif().get(0x0112, 1))  # what exif_transpose reads (EXIF, then XMP)
    if jpeg_decodes(data) != (width, height):  # not a structure the walk vouches for: decode at 1/8 scale
        img.draft(None, (1, 1))  # the smallest scale libjpeg offers: every coefficient still decoded
        img.load()
    return Proven(width, height, orientation)


def _prove_png(img: Image.Image, data: bytes | memoryview) -> Proven | None:
    if img.info.get("interlace") or getattr(img, "is_animated", False):
        return None
    if any(key in img.info for key in _OTHER_ORIENTATION):
        return None
    view = memoryview(data)
    if len(view) < 33 or bytes(view[12:16]) != b"IHDR":
        return None
    width, height, depth, color, _, _, _ = struct.unpack_from(">IIBBBBB", view, 16)
    if depth not in _PNG_DEPTHS.get(color, ()):
        return None
    stride = (width * _PNG_CHANNELS[color] * depth + 7) // 8 + 1  # a filter byte, then the row
    if not _image_data_decodes(view, stride, height):
        return None
    raw = img.info.get("exif")
    orientation = 1
    if raw is not None:
        exif = Image.Exif()
        exif.load(raw)
        orientation = _orientation(exif.get(0x0112, 1))
    return Proven(width, height, orientation)


def _image_data_decodes(view: memoryview, stride: int, rows: int) -> bool:
    """Walk every chunk after the signature; inflate the image data without keeping it.

    True when the IDAT chunks are consecutive, their CRCs hold, their zlib stream ends exactly after
    ``rows * stride`` bytes with nothing after it, every row starts with a filter type 0..4, IEND is
    reached, and no chunk after the image data could change the orientation Pillow would apply.
    """
    pos, size = 8, len(view)
    inflater = zlib.decompressobj()
    produced = 0
    expected = rows * stride
    state = "before"  # before, in, after the image data
    while pos + 8 <= size:
        length, kind = struct.unpack_from(">I", view, pos)[0], bytes(view[pos + 4:pos + 8])
        end = pos + 12 + length
        if length > 0x7FFFFFFF or end > size:
            return False  # cut short: for the decoder to judge
        if kind in _ANIMATION:
            return False
        if kind == b"IDAT":
            if state == "after":
                return False
            state = "in"
            body = view[pos + 8:pos + 8 + length]
            if zlib.crc32(body, zlib.crc32(b"IDAT")) != struct.unpack_from(">I", view, pos + 8 + length)[0]:
                return False
            produced = _inflate(inflater, body, produced, stride, expected)
            if produced < 0:
                return False
        elif state == "in":
            state = "after"
        if kind == b"IEND":
            return state == "after" and produced == expected and inflater.eof and not inflater.unused_data
        if state == "after" and (kind == b"eXIf" or (kind in _PNG_TEXT and _exif_keyword(view, pos, length))):
            return False  # read by Pillow only once the pixels are loaded: let the full decode see it
        pos = end
    return False


def _exif_keyword(view: memoryview, pos: int, length: int) -> bool:
    head = bytes(view[pos + 8:pos + 8 + min(length, 80)])
    return head.split(b"\0", 1)[0] in _EXIF_TEXT


def _inflate(inflater: zlib._Decompress, body: memoryview, produced: int, stride: int, expected: int) -> int:
    """Feed one IDAT chunk; return the bytes produced so far, or -1 on a bad stream, filter byte or size."""
    pending = bytes(body)
    while pending and not inflater.eof:
        try:
            out = inflater.decompress(pending, _INFLATE_STEP)
        except zlib.error:
            return -1
        pending = inflater.unconsumed_tail
        if produced + len(out) > expected:
            return -1
        first = (-produced) % stride  # the first row start within this piece
        if first < len(out):
            filters = np.frombuffer(out, np.uint8)[first::stride]
            if filters.size and int(filters.max()) > 4:
                return -1
        produced += len(out)
    if pending or inflater.unused_data:
        return -1  # data after the end of the stream
    return produced
