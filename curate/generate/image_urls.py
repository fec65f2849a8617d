"""Images as ``data:`` URLs for OpenAI-compatible servers, through the image gate.

Only images the gate accepts are sent, and the server sees the pixels every other stage sees:
formats servers decode alike (JPEG, PNG, WEBP) go as stored when shown as stored; any other format,
and an image whose EXIF orientation turns it, goes as a PNG of the upright pixels.
"""

from __future__ import annotations

import base64
import io

from curate.core.images import DEFAULT_LIMITS, ImageLimits, check, decode_bytes, read_bytes

#: Formats sent as stored (what OpenAI-compatible servers decode alike); others go as PNG (:func:`data_url`).
MIME = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}


def data_url(path: str | bytes, limits: ImageLimits = DEFAULT_LIMITS) -> str:
    """A ``data:`` URL of an image the gate accepts (:func:`curate.core.images.check`).

    A JPEG, PNG or WEBP shown as stored goes as its original bytes; any other format, and an image
    whose EXIF orientation turns it, goes as a PNG of the upright pixels the gate decoded, so the
    server sees the pixels every other stage sees, whichever formats and EXIF handling it has.

    Raises:
        ImageError: the image is not accepted (the same reason every stage gives it).
    """
    data = read_bytes(path, limits)
    label = f"image ({len(path)} bytes)" if isinstance(path, bytes) else str(path)
    info = check(data, limits, label=label)
    mime = MIME.get(info.format)
    if mime is None or info.orientation != 1:
        pixels, _ = decode_bytes(data, limits, label)
        buf = io.BytesIO()
        pixels.save(buf, "PNG")
        data, mime = buf.getvalue(), "image/png"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
