"""Record readers: JSONL, JSON arrays and Parquet, in every layout curate accepts.

Conversion to the canonical form happens here, once, at read time::

    {"id": str, "source": str, "images": [absolute paths],
     "messages": [{"role": "user"|"assistant"|"system", "content": str}], ...extra fields}

Accepted layouts (see DESIGN.md §1):

* canonical: ``messages`` with ``role``/``content``;
* LLaVA: ``conversations`` with ``from: human|gpt|system`` and ``value``; ``image`` or ``images``;
* caption-only: ``caption`` (the user turn is ``<image>\\n`` + :data:`CAPTION_PROMPT`), or, in a row
  with none of the other layouts, ``text`` or ``TEXT`` (:data:`~curate.core.formats.rows.CAPTION_ALIASES`);
  a list of captions (Flickr30k, COCO Captions) gives its first non-empty one, the list kept as ``captions``;
* RL (LLaVA-OneVision-1.5-RL): ``problem`` and ``answer`` (plus ``answer_type``,
  ``problem_type``, ``prompt_type``, optional ``reward``), kept as extra fields.

Image paths are relative to the input file's folder unless absolute. Every
``<image>`` placeholder stands for the next image in ``images``; when a record has
images but no placeholders, they are put at the start of the first user turn.

A record that cannot be converted is not an exception for the run: readers yield
a :class:`BadRecord` with a stable reason (``malformed_json``, ``not_an_object``,
``unknown_layout``, ``invalid_field``, ``image_count_mismatch``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate.core.errors import UserError, reading_input
from curate.core.formats.rows import normalize_row
from curate.core.formats.listing import record_suffix
from curate.core.formats.containers import Part, ACCEPTED, CONTAINERS, SUFFIXES  # noqa: F401 (re-exported)
from curate.core.formats.listing import list_inputs
from curate.core.formats.rows import (default_id_prefix, default_source, CAPTION_PROMPT, IMAGE_TOKEN, messages_of,
                                      count_placeholders, implied_image, number_placeholders, place_images,
                                      CAPTION_LAYOUTS, TEXT_LAYOUTS, RecordInvalid, as_text, text_layout)
from curate.core.formats.rl_layouts import rl_row
from curate.core.io import as_path

_LAYOUT_KEYS = {"id", "source", "image", "images", *TEXT_LAYOUTS}
_NO_LAYOUT = "no messages, conversations, caption, text, problem or question field"

Record = dict[str, Any]
#: How rows become records (ids, sources, layouts): part of every stage's recorded settings and of
#: cross-run caches, so a run or a cache made by a reader that read the same rows otherwise is not reused.
#: Raise it whenever the same row would read differently. 2: sources without shard numbers (formats.sources);
#: 3: a list of captions is read (its first non-empty one), not errored; 4: ids without an id field lead with the
#: source folder when the file name is only a shard number (formats.sources.default_id_prefix); 5: VQA rows
#: (``question`` with ``answer`` or ``answers``) are read, not errored ``unknown_layout``; 6: multiple-choice VQA
#: rows (``choices``/``options`` and the answer's index) read with their options lettered (core.answers); 7: MMMU
#: rows (``image_1`` … columns, ``<image k>`` placeholders, the images in their order; options as list text),
#: image structs in columns no layout reads errored ``invalid_image_column``; 8: a row whose ``image`` is a path
#: and that has one image struct column with bytes (MathVista's ``decoded_image``) reads those bytes.
#: 9: a row whose layout implies an image it does not carry (a caption, a URL never downloaded, ``<image>``
#: placeholders) is errored ``missing_image`` unless the run reads text only; ``captions`` lists are caption rows;
#: gzipped tars are read. 10: tar members with an empty key (``.jpg``) are a group of their own, errored
#: ``empty_key`` (they were skipped); JSON rows with a too long integer, nesting too deep or a lone surrogate are
#: errored (``number_too_large``, ``nested_too_deep``, ``invalid_text``: curate.core.formats.rows).
#: 11: rows of the RL trainers' layouts (verl's ``prompt`` and ``reward_model``, VLM-R1's ``accu_reward_method``,
#: LLaVA-OneVision-1.5-RL's ``problem_type``) are read as RL records (curate.core.formats.rl_layouts).
READER_VERSION = 11


@dataclass(frozen=True)
class BadRecord:
    """A row that could not become a record: counted and written with its reason."""

    id: str
    source: str
    reason: str
    detail: str


# ---------------------------------------------------------------------------
# Canonical conversion
# ---------------------------------------------------------------------------

def to_canonical(raw: Any, base_dir: Path | str, *, fallback_id: str, fallback_source: str,
                 text_field: str | None = None, text_only: bool = False, layout: str | None = None) -> Record:
    """Convert one raw row (any accepted layout) to a canonical record.

    Args:
        raw: the parsed JSON object or Parquet row.
        base_dir: folder that relative image paths are relative to (the file's own, or the run's image root).
        fallback_id: id used when the row has none (``<file stem>:<row>``, the stem led by its folder when it
            is only a shard number: :func:`curate.core.formats.rows.default_id_prefix`).
        fallback_source: source used when the row has none (the input file's name less any shard number:
            :func:`curate.core.formats.rows.default_source`).
        text_field: a row in none of the layouts is read as a caption record whose caption is this field
            (e.g. ``alt_text``), when it has it.
        text_only: the run reads text only (text matching): a caption or a URL row without image bytes is
            read as text instead of errored ``missing_image``.
        layout: the RL layout the run names (``--layout``), else None: a row of an RL trainer's layout (verl,
            VLM-R1, LLaVA-OneVision-1.5-RL) is detected by its keys (:mod:`curate.core.formats.rl_layouts`).

    Raises:
        RecordInvalid: the row is not a usable record (its ``reason`` is stable).
    """
    if not isinstance(raw, dict):
        raise RecordInvalid("not_an_object", f"row is a {type(raw).__name__}, not an object")
    raw = rl_row(raw, layout)  # an RL trainer's row (verl, VLM-R1, LLaVA-OneVision-1.5-RL) as an RL record's row
    raw, images, numbers = normalize_row(raw, base_dir)  # paths or bytes, in every image layout (curate.core.formats)
    layout = text_layout(raw, text_field)
    if layout is None:
        raise RecordInvalid("unknown_layout", _NO_LAYOUT + (f", and no {text_field}" if text_field else ""))
    caption = layout in CAPTION_LAYOUTS or layout == text_field
    rid = raw.get("id")
    rid = fallback_id if rid is None or rid == "" else as_text(rid, "id")
    source = raw.get("source", raw.get("data_source"))
    source = fallback_source if source is None or source == "" else as_text(source, "source")
    messages = messages_of(raw, layout, caption)  # a broken text is named first (invalid_field)
    if not images and not text_only:
        missing = implied_image(raw, layout, caption)
        if missing is not None:
            raise RecordInvalid("missing_image", missing)
    messages, images = number_placeholders(messages, images, numbers)
    messages = place_images(messages, len(images))
    record: Record = {k: v for k, v in raw.items() if k not in _LAYOUT_KEYS and k != layout}
    if caption and isinstance(raw[layout], (list, tuple)):
        record.setdefault("captions", list(raw[layout]))  # every caption of a row that has several
    record.update(id=rid, source=source, images=images, messages=messages)
    return record


# ---------------------------------------------------------------------------
# Input files and their row ranges
# ---------------------------------------------------------------------------

def input_format(path: str | os.PathLike[str]) -> str:
    """The reader for a file, from its suffix; a clear error for anything else."""
    suffix = record_suffix(as_path(path).name)
    if suffix not in SUFFIXES:
        raise UserError(f"{path}: unsupported input type {suffix or '(no suffix)'}; use {ACCEPTED}")
    return SUFFIXES[suffix]


def expand_inputs(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Resolve input arguments (files, folders, brace patterns, fsspec URLs) to a list of files, in order.

    Local files are :class:`~pathlib.Path`; objects in a bucket are remote :class:`curate.core.io.Location`
    values.
    """
    if not inputs:
        raise UserError(f"no input given; pass one or more {ACCEPTED} files or folders")
    seen: dict[Any, str] = {}
    unique = []
    for item in inputs:
        if not str(item).strip():
            raise UserError("an input is an empty path; name the files or folders to read (use . for this folder)")
        for path in list_inputs(item, SUFFIXES):
            input_format(path)
            r = path.resolve()
            if r in seen:  # read once and counted once would hide it; read twice would count every record twice
                how = f"by {seen[r]} and by {item}" if seen[r] != str(item) else "twice"
                raise UserError(f"{r} is named {how}; give each input once")
            seen[r] = str(item)
            unique.append(r)
    return unique


def split_file(path: Path, rows_per_part: int) -> list[Part]:
    """Split one input file into parts of at most ``rows_per_part`` rows (its container decides where)."""
    return CONTAINERS[input_format(path)].split(path, rows_per_part)


def iter_rows(part: Part, heads: bool = False, views: bool = False) -> Iterator[tuple[int, Any, str | None]]:
    """Yield ``(row, raw_object, problem)`` for each row of a part; ``problem`` is None or a reason.

    With ``heads`` images inside tars and Parquet files are
    :class:`~curate.core.image_headers.ImageAt` (header bytes and address) instead of bytes; with
    ``views`` only Parquet cells are (views on the Arrow buffers, for decoding without a copy).
    """
    yield from CONTAINERS[part.format].rows(part, heads, views)


def read_part(part: Part, *, with_raw: bool = False, heads: bool = False, views: bool = False) -> Iterator[Any]:
    """Yield canonical records (or :class:`BadRecord`) for the rows of a part, in file order.

    Blank JSONL lines are not records and are skipped. With ``with_raw`` yield
    ``(raw row, record or BadRecord)`` pairs (the raw row is None for unparsable lines).
    ``heads``, ``views``: see :func:`iter_rows` (steps that need image headers only, or decode pixels).
    """
    for raw, rec in _read_part(part, heads, views):
        yield (raw, rec) if with_raw else rec


def _read_part(part: Part, heads: bool = False, views: bool = False) -> Iterator[tuple[Any, Record | BadRecord]]:
    path = as_path(part.path)
    stem, source = default_id_prefix(str(part.path)), default_source(str(part.path))
    container = CONTAINERS[part.format]
    for row, raw, problem in iter_rows(part, heads, views):
        fallback_id = f"{stem}:{row + container.first_row}"
        if problem == "blank":
            continue
        if problem is not None:
            reason, _, detail = problem.partition(":")
            where = f"{container.row_word} {row + container.first_row}"
            rid = raw.get("id") if isinstance(raw, dict) else None  # a reader may know the id of a bad row
            yield None, BadRecord(rid or fallback_id, source, reason, f"{path.name} {where}: {detail}")
            continue
        try:
            yield raw, to_canonical(raw, part.image_root or path.parent, fallback_id=fallback_id,
                                    fallback_source=source, text_field=part.text_field, text_only=part.text_only,
                                    layout=part.layout)
        except RecordInvalid as exc:
            rid = (raw.get("id") or raw.get("key")) if isinstance(raw, dict) else None  # key: img2dataset
            src = raw.get("source", raw.get("data_source")) if isinstance(raw, dict) else None  # data_source: verl
            where = f"{path.name} {container.row_word} {row + container.first_row}"
            yield raw, BadRecord(str(rid) if rid not in (None, "") else fallback_id,
                                 str(src) if isinstance(src, str) and src else source, exc.reason, f"{where}: {exc.detail}")


def read_records(inputs: Sequence[str | os.PathLike[str]], *, layout: str | None = None,
                 image_root: str | None = None) -> Iterator[Record | BadRecord]:
    """Read every record of the inputs (files or folders) in order (``layout``: the RL layout the run names,
    :func:`to_canonical`; ``image_root``: where relative image paths start). For small data, tests and the golds."""
    for path in expand_inputs(inputs):
        for part in split_file(path, 1 << 62):
            if layout is not None or image_root is not None:
                part = dataclasses.replace(part, layout=layout, image_root=image_root)
            with reading_input(part.path):  # a damaged file: one line naming it, not --out
                yield from read_part(part)
