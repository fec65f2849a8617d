"""Input formats beyond plain JSONL/JSON/Parquet rows with image paths.

* :mod:`curate.core.formats.rows`: image columns as the Hugging Face ``datasets`` library writes
  them (struct ``{bytes, path}``, one or a list), the Cauldron/FineVision layout (``images`` +
  ``texts`` of ``{user, assistant}`` turns) and raw-bytes columns named like an image extension
  (img2dataset's Parquet output);
* :mod:`curate.core.formats.wds`: WebDataset tars (a file, a folder of tars or a brace pattern);
* :mod:`curate.core.formats.writeback`: records written back keep their images as bytes.

A record's ``images`` hold paths (``str``) or the image bytes themselves (``bytes``); every
stage accepts both (see :mod:`curate.core.images`).
"""

from __future__ import annotations

from curate.core.formats.rows import IMAGE_EXTS, normalize_row
from curate.core.formats.wds import expand_braces

__all__ = ["IMAGE_EXTS", "expand_braces", "normalize_row"]
