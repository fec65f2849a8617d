"""The limits one record is held to: its text in characters before anything tokenizes it, its images
(:class:`ImageReading`, declared once for every stage that touches pixels).

Length limits on user text, applied before anything tokenizes it.

A single row of several megabytes must never cost memory in proportion to its size:
stages refuse text beyond a limit in characters before rendering or tokenizing it,
and record the row with the reason :data:`TOO_LONG` (``curate pack`` lengths,
``curate rl-filter`` prompts, ``curate recaption`` answers; the ``transformers``
generation backend also bounds prompts in tokens). Character counts are cheap
(``len``), so the memory a row costs is proportional to the limit.

What one record may cost in images, declared once for every stage that touches pixels.

:class:`ImageReading` is a base of the settings of ``pack``, ``embed`` (and ``balance``), ``recaption`` and
``rl-filter``: the image gate's byte and pixel limits (:class:`curate.core.images.ImageLimits`) and the images a
record may hold. The flags are declared once too (``curate.verbs.IMAGE_LIMITS``). With them one
record costs at most ``max_images`` reads of at most ``max_image_bytes`` bytes and decodes of at most
``max_image_pixels`` pixels, in every stage. A decoder runs in C and cannot be stopped from Python, so its
time is bounded by these two limits rather than by a clock (docs/limits.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from curate.core import validate as v
from curate.core.settings import setting


# Defaults and bounds that several stages' settings share: a stage's settings (``curate.balance.config``,
# ``packer.config``) name them without loading the sharding code.
DEFAULT_SHARD_SIZE = 5000
"""Records per shard of a sharded stage (``--shard-size``)."""

DEFAULT_MAX_IMAGES = 64
"""Images one record may hold (``--max-images-per-record``): interleaved documents and multi-image
conversations hold a few to a few dozen; a record past it is errored ``too_many_images`` in the one
record loop (:func:`curate.core.shards.readable_records`) before any image is read."""

MAX_WORKERS = 4096
"""Worker processes or actors at most (``--workers``): each is a process with its own copy of a model."""
MAX_THREADS = 1024
"""Threads of one kind per worker at most (``--threads``, ``--decode-threads``, ``--concurrency``)."""


# Length limits on user text, applied before anything tokenizes it.
TOO_LONG = "too_long"
#: Characters of one record's text that ``curate pack`` counts (about 250k+ tokens: beyond any context).
MAX_RECORD_CHARS = 1_000_000
#: Characters of one RL prompt (``curate rl-filter``).
MAX_PROMPT_CHARS = 200_000
#: Characters of one caption answer checked by ``curate recaption``.
MAX_CAPTION_CHARS = 20_000
#: Tokens of one prompt the ``transformers`` backend feeds its model.
MAX_PROMPT_TOKENS = 32_768
#: Characters a single token covers at most when bounding tokens by characters (a guard, not a rule).
CHARS_PER_TOKEN_BOUND = 64


def total_chars(texts: Iterable[object]) -> int:
    """The characters of the strings among ``texts`` (other values count 0)."""
    return sum(len(t) for t in texts if isinstance(t, str))


def over(n: int, limit: int | None, what: str) -> str | None:
    """``"N <what> > limit L"`` when ``n`` exceeds ``limit`` (None: no limit), else None."""
    if limit is None or n <= limit:
        return None
    return f"{n:,} {what} > limit {limit:,}"


# What one record may cost in images, declared once for every stage that touches pixels.
if TYPE_CHECKING:  # the image gate loads Pillow and numpy: settings are checked without them
    from curate.core.images import ImageLimits

#: The reason of a record holding more than ``max_images`` images.
TOO_MANY_IMAGES = "too_many_images"


def image_limits(max_bytes: int | None = None, max_pixels: int | None = None) -> ImageLimits:
    """The gate's :class:`~curate.core.images.ImageLimits` with the limits given (None: the gate's default)."""
    from curate.core.images import DEFAULT_LIMITS, ImageLimits

    given = {k: val for k, val in (("max_bytes", max_bytes), ("max_pixels", max_pixels)) if val is not None}
    return ImageLimits(**given) if given else DEFAULT_LIMITS


@dataclass(frozen=True, kw_only=True)
class ImageReading:
    """The image limits of a stage's settings (a base class of its config; keyword-only fields).

    Each field is a setting (:func:`curate.core.settings.setting`) whose flag is one of the shared image limit
    flags (``curate.verbs.IMAGE_LIMITS``), hence ``cli=False``. A limit left None is the gate's
    (:data:`~curate.core.images.DEFAULT_MAX_BYTES`, :data:`~curate.core.images.DEFAULT_MAX_PIXELS`).
    """

    max_image_bytes: int | None = setting(
        None, cli=False, flag="--max-image-bytes",
        help="Image files or cells larger than this are errored too_large before they are read.")
    max_image_pixels: int | None = setting(
        None, cli=False, flag="--max-image-pixels",
        help="Images with more pixels are errored decompression_bomb before they are decoded.")
    max_images: int = setting(
        DEFAULT_MAX_IMAGES, cli=False, flag="--max-images-per-record",
        help="Records holding more images are errored too_many_images before any is read.")

    @property
    def image_limits(self) -> ImageLimits:
        """The limits every image of the run is held to."""
        return image_limits(self.max_image_bytes, self.max_image_pixels)

    def check_image_reading(self) -> None:
        """Refuse limits that are not positive integers (one line naming the flag).

        Raises:
            UserError: a limit out of range.
        """
        v.integer("--max-image-bytes", self.max_image_bytes, 1)
        v.integer("--max-image-pixels", self.max_image_pixels, 1)
        v.integer("--max-images-per-record", self.max_images, 1)

    def reading_settings(self) -> dict[str, Any]:
        """The limits as a stage records them in its settings (they decide which records are read)."""
        return {"image_limits": self.image_limits.settings(), "max_images": self.max_images}
