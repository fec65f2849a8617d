"""Images: the one gate every stage reads them through, with bounded reads and named reasons.

* :func:`check`: the displayed size of an image proven to decode (header + proof);
* :func:`decode`: the pixels, upright 8-bit RGB (:func:`decode_small`: a JPEG at a reduced DCT scale, for signatures);
* :class:`ImageLimits`: bytes, pixels and aspect ratio an image is held to;
* :class:`ImageError`: every refusal, with a reason of :data:`REASONS`;
* :func:`probe`: header only (a claim, not a proof).

Handled (decoded correctly, not errors): CMYK and palette images (converted to RGB), 16-bit and 32-bit
greyscale (scaled to 8 bits), images with alpha (composited on white), EXIF-rotated images (sizes and
pixels follow the displayed orientation).
"""

from curate.core.images.errors import (DEFAULT_LIMITS, DEFAULT_MAX_BYTES, DEFAULT_MAX_PIXELS, MAX_ASPECT, REASONS,
                                       ImageError, ImageLimits, reason_of)
from curate.core.images.gate import (check, check_aspect, decode, decode_bytes, decode_small, file_extension,
                                     refusal)
from curate.core.images.header import probe
from curate.core.images.opening import ImageInfo, to_rgb
from curate.core.images.read import ImageSource, file_errors, image_label, read_bytes

__all__ = ["DEFAULT_LIMITS", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_PIXELS", "MAX_ASPECT", "REASONS", "ImageError",
           "ImageInfo", "ImageLimits", "ImageSource", "check", "check_aspect", "decode", "decode_bytes", "decode_small",
           "file_errors", "file_extension", "image_label", "probe", "read_bytes", "reason_of", "refusal", "to_rgb"]
