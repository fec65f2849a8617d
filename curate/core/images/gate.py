"""The one image gate: every stage that counts or decodes pixels accepts an image through here.

* :func:`check` (pack's count step, ``verify``, the OpenAI backend): the displayed size of an image
  **proven to decode** to the pixels the trainer's processor will see. JPEG and PNG are proven
  without a full decode (:mod:`curate.core.images.proof`); every other format, and every file the
  proof cannot vouch for, is decoded fully.
* :func:`decode` (embed, recaption, the loader, report thumbnails): the pixels, upright 8-bit RGB.

Both read within :class:`~curate.core.images.errors.ImageLimits` (bytes, pixels, aspect ratio),
orient as ``transformers.image_utils.load_image`` does (``ImageOps.exif_transpose`` on the loaded
image: EXIF orientation applied exactly once, whatever the format; TIFF's own orientation is applied
by libtiff when it loads), and raise :class:`~curate.core.images.errors.ImageError` with one reason
of :data:`~curate.core.images.errors.REASONS`, in the same order in both: the bytes (missing,
not a file, too large, empty), the header (not an image, a bomb), the pixels (truncated, unsupported,
unreadable), then the geometry (an extreme aspect ratio). So a file gets the same reason in every stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PIL import Image, ImageOps

from curate.core.images.decoder_log import captured
from curate.core.images.errors import DEFAULT_LIMITS, ImageError, ImageLimits, as_image_error, message_reason
from curate.core.images.opening import ImageInfo, open_image, to_rgb, truncation
from curate.core.images.proof import PROVEN_FORMATS, prove
from curate.core.images.read import ImageSource, image_label, read_bytes


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
