"""Rows into curate's canonical record: JSON text within limits, image columns, the conversation of each
text layout, where images stand in it, the source and id of a row without them, and the golds of VQA rows.

JSON text of user data parsed within limits: what a crafted line can do is a reason, never an exception.

Every JSON row a reader parses (a JSONL line, a ``.json`` array, a tar's ``.json`` member, a
conversation stored as a JSON string) goes through :func:`parse_json`. Beyond malformed text
(``malformed_json``) it refuses, each with its reason:

* ``number_too_large``: an integer of more than Python's 4,300 digits (``int`` refuses to convert it);
* ``nested_too_deep``: arrays and objects nested more than :data:`MAX_DEPTH` deep (a record is a few
  levels deep; a line of 100,000 brackets would exhaust the interpreter's stack);
* ``invalid_text``: a string holding a lone UTF-16 surrogate (``"\\ud800"``): valid JSON, but no UTF-8
  encoder (Parquet, tars, the tokenizer, the trainer) can write it.

The checks beyond parsing cost a C-speed scan of the text: the depth is walked only when the text holds
more than :data:`MAX_DEPTH` brackets, strings only when it holds an escaped surrogate.

Image columns of a row, in every layout curate reads, to a list of paths or bytes.

Layouts (see docs/inputs.md):

* paths: ``image``/``images`` holding a path or a list of paths (relative to the input's folder);
* Hugging Face ``datasets``: the ``Image`` feature is a struct ``{bytes: binary, path: string}``; a
  column holds one struct or a list of them. ``bytes`` wins over ``path`` (``path`` is then only the
  original file name); a null struct is ``missing_image``, empty bytes ``empty_file`` (the reasons the image
  gate gives a missing or an empty file); a null column means no image;
* Cauldron / FineVision: ``images`` (list of structs) and ``texts``, a list of ``{user, assistant}``
  turns, become the record's conversation;
* img2dataset: raw image bytes in a column named like an image extension (``jpg``, ``png``,
  ``webp``...), the ``key`` column as id when there is no ``id``;
* MathVista: ``image`` is the image's file name in the dataset's archive (``images/1.jpg``) and
  ``decoded_image`` the image itself (an ``Image`` struct): when a row's ``image`` is one path and
  exactly one other column holds an image struct with image bytes, those bytes are the image (the
  path is read only when there are none);
* MMMU and MMMU-Pro: numbered columns ``image_1`` … ``image_7`` (structs, null when unused), the row's
  images in the order of their numbers; the text refers to them as ``<image 1>`` … (read as ``<image>``
  placeholders, the images in their order: :func:`curate.core.records.number_placeholders`).

A column that holds something no layout reads as an image (raw image bytes, or an image struct
whose bytes are an image) is never ignored: the row is errored ``invalid_image_column`` with a
detail naming the column.

The conversation of a row in each text layout (:func:`curate.core.formats.rows.text_layout`).

* ``messages`` (OpenAI: ``role``, ``content`` as text or content parts) and ``conversations`` (LLaVA:
  ``from``, ``value``), possibly stored as a JSON string in a Parquet column;
* a caption (``caption``, its aliases, or the run's ``--text-field``): ``<image>`` and
  :data:`CAPTION_PROMPT`, then the caption;
* ``problem`` (RL sets) and ``question`` (VQA sets) with their answer; a multiple-choice VQA row with its
  options lettered and the letter as answer (:mod:`curate.core.formats.rows`).

Where a record's images stand in its conversation: ``<image>`` placeholders, MMMU's numbered ones,
and the images a record's layout implies it has.

The ``source`` of a record that carries none: named after its input file, less any shard number.

Every stats file is broken down per source, so a dataset split into numbered shards should be
one source, not one per shard: img2dataset writes ``00000.tar … 08499.tar``, Hugging Face
``train-00000-of-00042.parquet``, WebDataset tools ``laion-000123.tar``. The rule
(:func:`default_source`):

* a stem without a shard number is the source (``coyo.jsonl`` → ``coyo``, ``cc12m.parquet`` → ``cc12m``);
* a shard number is a trailing run of digits, alone or after ``-``, ``_`` or ``.``, optionally
  followed by ``-of-`` and a count: ``laion-000123`` → ``laion``, ``train-00000-of-00042`` → ``train``;
  digits glued to a name stay (``coco2017``);
* when nothing is left, or only a generic word (:data:`GENERIC_NAMES`: ``train``, ``data``,
  ``shard``…), the nearest enclosing folder whose name is not generic names it instead, up to three
  levels up: ``laion400m/00000.tar`` → ``laion400m``, ``the_cauldron/vqav2/train-00000-of-00002.parquet``
  → ``vqav2``, ``coyo/data/train-00000-of-00128.parquet`` → ``coyo``;
* without such a folder, the stripped name (``train``), else the nearest folder's name (``data/train/0000.parquet``
  → ``train``), else the stem.

A row's own ``source`` (or ``data_source``) always wins over this rule.

A row without an ``id`` is ``<stem>:<row>``, and when the source comes from a folder the folder's name
leads (:func:`default_id_prefix`): the subsets of ``the_cauldron`` all hold a ``train-00000-of-0000N.parquet``,
and their rows would otherwise share ids (every subset after the first errored ``duplicate_id``).
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Mapping

from curate.core.image_headers import ImageAt
from curate.core.io import as_path, is_url


# JSON text of user data parsed within limits: what a crafted line can do is a reason, never an exception.
#: Arrays and objects nested deeper than this are refused (``nested_too_deep``).
MAX_DEPTH = 64
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")


class JsonRefused(ValueError):
    """JSON text that is not a usable row; ``reason`` is stable, ``detail`` says what."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def parse_json(text: str | bytes | bytearray) -> Any:
    """Parse JSON text of user data within the limits of the module docstring.

    Raises:
        JsonRefused: ``malformed_json``, ``number_too_large``, ``nested_too_deep`` or ``invalid_text``.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonRefused("malformed_json", exc.msg) from None
    except UnicodeDecodeError:
        raise JsonRefused("malformed_json", "not UTF-8") from None
    except RecursionError:
        raise JsonRefused("nested_too_deep", f"arrays or objects nested more than {MAX_DEPTH} deep") from None
    except ValueError as exc:  # int() refusing more than sys.get_int_max_str_digits() digits
        raise JsonRefused("number_too_large", str(exc).split(";")[0]) from None
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
        surrogates = _SURROGATE_ESCAPE.search(text) is not None
    else:
        brackets = text.count(b"[") + text.count(b"{")
        surrogates = _SURROGATE_ESCAPE_BYTES.search(text) is not None
    if brackets > MAX_DEPTH and depth(value) > MAX_DEPTH:
        raise JsonRefused("nested_too_deep", f"arrays or objects nested more than {MAX_DEPTH} deep")
    if surrogates:
        check_text(value)
    return value


def check_value(value: Any) -> None:
    """The checks of :func:`parse_json` beyond parsing, on a value parsed already (a row of a ``.json`` array).

    Raises:
        JsonRefused: ``nested_too_deep`` or ``invalid_text``.
    """
    if depth(value) > MAX_DEPTH:
        raise JsonRefused("nested_too_deep", f"arrays or objects nested more than {MAX_DEPTH} deep")
    check_text(value)


def depth(value: Any) -> int:
    """How deep arrays and objects nest in a parsed JSON value (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def check_text(value: Any) -> None:
    """Refuse a parsed value holding a string that UTF-8 cannot encode (a lone surrogate), keys included.

    Raises:
        JsonRefused: ``invalid_text``.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise JsonRefused("invalid_text", f"a lone surrogate {item[exc.start]!r} in a string "
                                                  "(no UTF-8 writer accepts it)") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


# Image columns of a row, in every layout curate reads, to a list of paths or bytes.
#: The one list of image formats, as file extensions: tar members with one of them are a sample's images, Parquet
#: columns named by one hold raw image bytes. Every raster format Pillow reads (docs/images.md's table, accepted
#: or refused with the gate's reason: the gate, not the name, decides what decodes), and HEIC/HEIF and JPEG XL,
#: which need a plugin (without one: ``not_an_image``). Pillow's stubs for scientific and video files (BUFR,
#: GRIB, HDF5, MPEG) and PostScript documents are not images here (tests check the list against Pillow's).
IMAGE_EXTS = frozenset({
    "jpg", "jpeg", "jpe", "jfif", "mpo", "png", "apng", "webp", "gif", "bmp", "dib", "tif", "tiff",
    "ppm", "pgm", "pbm", "pnm", "pfm", "avif", "avifs", "jp2", "j2k", "jpc", "jpf", "jpx", "j2c", "psd", "tga",
    "icb", "vda", "vst", "ico", "cur", "icns", "qoi", "sgi", "rgb", "rgba", "bw", "pcx", "dcx", "dds", "blp", "ftc",
    "ftu", "im", "xbm", "xpm", "fits", "fit", "fli", "flc", "gbr", "msp", "pcd", "pxr", "ras", "eps", "wmf", "emf",
    "iim", "heic", "heif", "jxl"})
#: The extensions long used as image column names: a column so named must hold image bytes (other names of
#: :data:`IMAGE_EXTS`, such as ``rgb`` or ``im``, are image columns only when they hold bytes).
STRICT_IMAGE_COLUMNS = frozenset({"jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff", "ppm", "pgm", "pbm",
                                  "pnm"})
#: The fields a conversation comes from, in the order they are looked for (:func:`text_layout`).
TEXT_LAYOUTS = ("messages", "conversations", "caption", "problem", "question")
#: Caption columns of the public image-text sets, read as ``caption`` in a row without ``messages``,
#: ``conversations``, ``caption``, ``problem`` or ``question`` (:func:`curate.core.records.to_canonical`): ``text``
#: (COYO, DataComp, most Hugging Face text-to-image sets), ``TEXT`` (LAION), ``captions`` (a list: COCO Captions,
#: Flickr30k, LLaVA's caption files). The column used is not kept among the record's extra fields (a list is,
#: as ``captions``).
CAPTION_ALIASES = ("text", "TEXT", "captions")
#: Columns of an image's address before download (img2dataset's input tables: ``url``, LAION's ``URL``).
URL_COLUMNS = ("url", "URL", "image_url")
#: The fields a caption record's text comes from: ``caption``, then the aliases.
CAPTION_LAYOUTS = ("caption", *CAPTION_ALIASES)
#: MMMU's numbered image columns (``image_1`` …).
NUMBERED_IMAGE = re.compile(r"image_(\d+)")
_MAGIC = (b"\xff\xd8\xff", b"\x89PNG", b"GIF8", b"BM", b"II*\x00", b"MM\x00*")


def text_layout(raw: dict[str, Any], text_field: str | None = None) -> str | None:
    """The field a row's conversation comes from: ``messages``, ``conversations``, ``caption``, ``problem``,
    ``question`` (VQA sets: POPE, GQA, VQAv2, TextVQA, DocVQA), then
    a caption alias (:data:`CAPTION_ALIASES`), then ``text_field`` (a caption named by the run); None when it
    has none."""
    for key in (*TEXT_LAYOUTS, *CAPTION_ALIASES):
        if key in raw:
            return key
    return text_field if text_field is not None and text_field in raw else None


class RecordInvalid(Exception):
    """Raised for a row that is not a usable record; ``reason`` is stable, ``detail`` says where."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def as_text(value: Any, field: str) -> str:
    """A text field's value: a string, or a number as text.

    Raises:
        RecordInvalid: ``invalid_field`` for anything else.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise RecordInvalid("invalid_field", f"{field} must be a string, got {type(value).__name__}")


def caption_text(value: Any, field: str) -> str:
    """A caption field's text, stripped; of a list of captions (Flickr30k, COCO Captions: five per image), the
    first that is not empty (:func:`curate.core.records.to_canonical` keeps the list as ``captions``)."""
    if isinstance(value, (list, tuple)):
        texts = (as_text(v, f"{field}[{i}]").strip() for i, v in enumerate(value) if v is not None)
        return next((t for t in texts if t), "")
    return as_text(value, field).strip()


def looks_like_image(data: bytes) -> bool:
    """Whether bytes start like a common image file (JPEG, PNG, GIF, BMP, TIFF, WEBP)."""
    return data.startswith(_MAGIC) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")


def _resolve(path: str, base_dir: Path | str) -> str:
    """An image path as the record gives it, made absolute against the record file's folder (URLs as given)."""
    if is_url(path):
        return path
    if path.startswith("file://") or os.path.isabs(path):
        path = str(as_path(path))  # a file:// URL is a local path
        if os.path.isabs(path):
            return path
    base = _base(str(base_dir))
    if is_url(base):
        return base.rstrip("/") + "/" + str(Path(path))
    return os.path.normpath(os.path.join(base, path))  # normpath does what Path() would to the relative part


@functools.lru_cache(maxsize=64)
def _base(base_dir: str) -> str:
    """A record file's folder as text (one per input file, so made once)."""
    return base_dir if is_url(base_dir) else str(as_path(base_dir))


def image_item(value: Any, column: str, base_dir: Path | str) -> str | bytes:
    """One image of column ``column``: an absolute path (or URL), or the image bytes.

    Raises:
        RecordInvalid: ``missing_image`` (a null struct, or no bytes and no path), ``empty_file`` (empty bytes),
            ``invalid_image_column`` (anything else that is not a path, bytes or an image struct).
    """
    if isinstance(value, str):
        if not value:
            raise RecordInvalid("invalid_field", f"column {column!r}: every image must be a non-empty path string")
        return _resolve(value, base_dir)
    if isinstance(value, (bytes, bytearray, memoryview, ImageAt)):
        if not len(value):
            raise RecordInvalid("empty_file", f"column {column!r}: empty image bytes")
        if isinstance(value, ImageAt):
            return value
        return value if isinstance(value, bytes) else bytes(value)
    if isinstance(value, dict):
        if not ({"bytes", "path"} & value.keys()):
            raise RecordInvalid("invalid_image_column",
                                f"column {column!r}: a struct with fields {sorted(value)} is not an image "
                                "(expected the datasets Image struct {bytes, path})")
        data, path = value.get("bytes"), value.get("path")
        if isinstance(data, (bytes, bytearray, memoryview, ImageAt)):
            if not len(data):  # bytes there but empty: the image the gate would call an empty file
                raise RecordInvalid("empty_file", f"column {column!r}: an image struct with empty bytes")
            return data if isinstance(data, (bytes, ImageAt)) else bytes(data)
        if isinstance(path, str) and path:
            return _resolve(path, base_dir)
        raise RecordInvalid("missing_image", f"column {column!r}: image struct without bytes or path")
    if value is None:
        raise RecordInvalid("missing_image", f"column {column!r}: null image")
    raise RecordInvalid("invalid_image_column",
                        f"column {column!r} holds {type(value).__name__}, not an image path, bytes or {{bytes, path}} struct")


def _image_list(value: Any, column: str, base_dir: Path | str) -> list[str | bytes]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [image_item(v, column, base_dir) for v in value]
    return [image_item(value, column, base_dir)]


def _texts_to_messages(texts: Any) -> list[dict[str, str]]:
    """Cauldron/FineVision ``texts`` (list of ``{user, assistant}``) to canonical messages."""
    if not isinstance(texts, list) or not texts:
        raise RecordInvalid("invalid_field", "texts must be a non-empty list of {user, assistant} turns")
    messages = []
    for i, turn in enumerate(texts):
        if not isinstance(turn, dict) or not isinstance(turn.get("user"), str) or not isinstance(turn.get("assistant"), str):
            raise RecordInvalid("invalid_field", f"texts[{i}] is not a {{user, assistant}} pair of strings")
        messages += [{"role": "user", "content": turn["user"]}, {"role": "assistant", "content": turn["assistant"]}]
    return messages


def normalize_row(raw: dict[str, Any], base_dir: Path | str) -> tuple[dict[str, Any], list[str | bytes],
                                                                      list[int] | None]:
    """The row with its images taken out: ``(row for the text layouts, images, numbers)``.

    The returned row has ``messages`` for a Cauldron/FineVision row, no extension-named or numbered
    image columns, and ``id`` from img2dataset's ``key`` when it has none. ``numbers`` are the
    images' numbers when they come from MMMU's ``image_k`` columns (for the ``<image k>``
    placeholders), else None. The input row is not changed.

    Raises:
        RecordInvalid: see :func:`image_item`; also ``invalid_image_column`` for bytes in a column
            that no layout reads as an image (they would otherwise be lost silently).
    """
    row, numbers = raw, None
    if "texts" in row and not any(key in row for key in TEXT_LAYOUTS):
        row = {k: v for k, v in row.items() if k != "texts"}
        row["messages"] = _texts_to_messages(raw["texts"])
    if row.get("images") is not None:
        images = _image_list(row["images"], "images", base_dir)
    elif row.get("image") is not None:
        embedded = _embedded_copy(row) if isinstance(row["image"], str) else None
        if embedded is None:
            images = _image_list(row["image"], "image", base_dir)
        else:
            images = [image_item(row[embedded], embedded, base_dir)]
            row = {k: v for k, v in row.items() if k != embedded}
    else:
        ext_cols = [k for k in row if isinstance(k, str) and k.lower() in IMAGE_EXTS
                    and (k.lower() in STRICT_IMAGE_COLUMNS or isinstance(row[k], (bytes, bytearray, memoryview, ImageAt))
                         or (isinstance(row[k], dict) and "bytes" in row[k]))]
        images = []
        if ext_cols:
            for col in ext_cols:
                value = row[col]
                if value is None:
                    raise RecordInvalid("missing_image", f"column {col!r}: null image bytes (a failed download?)")
                if not isinstance(value, (bytes, bytearray, memoryview, dict, ImageAt)):
                    raise RecordInvalid("invalid_image_column",
                                        f"column {col!r} holds {type(value).__name__}, not image bytes")
                images.append(image_item(value, col, base_dir))
            row = {k: v for k, v in row.items() if k not in ext_cols}
            if row.get("id") in (None, "") and row.get("key") not in (None, ""):
                row["id"] = row["key"]
        else:
            row, images, numbers = _numbered_images(row, base_dir)
    if not images:
        for key, value in row.items():
            if _holds_image_bytes(value):
                raise RecordInvalid("invalid_image_column",
                                    f"column {key!r} holds image bytes that no layout reads; name it 'image' "
                                    "or after its extension ('jpg', 'png', ...)")
    return row, images, numbers


def _holds_image_bytes(value: Any) -> bool:
    """Whether a cell holds image bytes: raw, or as the ``bytes`` of a struct."""
    head = value.get("bytes") if isinstance(value, dict) else value
    head = head.head if isinstance(head, ImageAt) else head
    return isinstance(head, (bytes, bytearray, memoryview)) and looks_like_image(bytes(head[:16]))


def _embedded_copy(row: dict[str, Any]) -> str | None:
    """The one column besides ``image`` that holds an image struct with image bytes (MathVista's
    ``decoded_image``), or None when there is none or more than one."""
    found = [k for k, v in row.items() if k != "image" and isinstance(v, dict) and _holds_image_bytes(v)]
    return found[0] if len(found) == 1 else None


def _numbered_images(row: dict[str, Any], base_dir: Path | str) -> tuple[dict[str, Any], list[str | bytes],
                                                                         list[int] | None]:
    """MMMU's ``image_1`` … ``image_N`` columns: the row without any of them, the non-null ones in the order of
    their numbers, and those numbers (no numbered column: the row as it is, no image, None)."""
    numbered = sorted((int(m.group(1)), k) for k in row
                      if isinstance(k, str) and k.startswith("image_") and (m := NUMBERED_IMAGE.fullmatch(k)))
    if not numbered:
        return row, [], None
    present = [(n, k) for n, k in numbered if row[k] is not None]
    taken = {k for _, k in numbered}
    return ({k: v for k, v in row.items() if k not in taken}, [image_item(row[k], k, base_dir) for _, k in present],
            [n for n, _ in present])


# The conversation of a row in each text layout (:func:`curate.core.formats.rows.text_layout`).
IMAGE_TOKEN = "<image>"
CAPTION_PROMPT = "Describe the image."
_ROLE_MAP = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
             "system": "system", "model": "assistant", "bot": "assistant"}


def _content_text(content: Any, field: str) -> str:
    """Flatten OpenAI-style content parts (text / image) to text with <image> placeholders."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text":
                parts.append(as_text(part.get("text", ""), field))
            elif isinstance(part, dict) and part.get("type") in ("image", "image_url"):
                parts.append(IMAGE_TOKEN)
            else:
                raise RecordInvalid("invalid_field", f"{field} has a content part that is neither text nor image")
        return "".join(parts)
    if content is None:
        return ""
    raise RecordInvalid("invalid_field", f"{field} content must be a string, got {type(content).__name__}")


def messages_of(raw: dict[str, Any], layout: str, caption: bool) -> list[dict[str, str]]:
    """The conversation of a row whose text comes from ``layout`` (:func:`~curate.core.formats.rows.text_layout`;
    ``caption``: the field is read as a caption)."""
    if layout == "messages":
        turns, role_key, text_key = raw["messages"], "role", "content"
    elif layout == "conversations":
        turns, role_key, text_key = raw["conversations"], "from", "value"
    elif caption:
        caption = caption_text(raw[layout], layout)
        if not caption:
            raise RecordInvalid("invalid_field", f"{layout} is empty")
        prompt = f"{IMAGE_TOKEN}\n{CAPTION_PROMPT}" if raw.get("image") or raw.get("images") else CAPTION_PROMPT
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": caption}]
    elif layout == "question":
        question = as_text(raw["question"], "question")
        try:
            choice = multiple_choice(raw)
        except ValueError as exc:
            raise RecordInvalid("invalid_field", str(exc)) from None
        if choice is not None:  # multiple choice (ScienceQA, AI2D, A-OKVQA): options lettered, the letter answers
            options, letter = choice
            return [{"role": "user", "content": choice_question(raw, question, options)},
                    {"role": "assistant", "content": letter}]
        return [{"role": "user", "content": question}, {"role": "assistant", "content": _vqa_answer(raw)}]
    else:  # problem
        problem = as_text(raw["problem"], "problem")
        answer = raw.get("answer", "")
        structured = isinstance(answer, list) and answer and not isinstance(answer[0], (str, int, float))
        if isinstance(answer, dict) or structured:  # a detection list of boxes: its JSON text
            answer = json.dumps(answer, ensure_ascii=False)
        answer_text = answer[0] if isinstance(answer, list) and answer else answer
        return [{"role": "user", "content": problem},
                {"role": "assistant", "content": as_text(answer_text if answer_text is not None else "", "answer")}]
    if isinstance(turns, str):  # Parquet users often store the conversation as a JSON string
        try:
            turns = parse_json(turns)
        except JsonRefused as exc:
            reason = "invalid_field" if exc.reason == "malformed_json" else exc.reason
            raise RecordInvalid(reason, f"messages is a string but not usable JSON: {exc.detail}") from None
    if not isinstance(turns, list) or not turns:
        raise RecordInvalid("invalid_field", "messages/conversations must be a non-empty list")
    out = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise RecordInvalid("invalid_field", f"turn {i} is not an object")
        role = _ROLE_MAP.get(str(turn.get(role_key, turn.get("role", ""))).lower())
        if role is None:
            raise RecordInvalid("invalid_field", f"turn {i} has unknown role {turn.get(role_key)!r}")
        text = _content_text(turn.get(text_key, turn.get("content")), f"turn {i}")
        out.append({"role": role, "content": text})
    return out


def _vqa_answer(raw: dict[str, Any]) -> str:
    """The answer of a VQA row: ``answer`` (POPE, GQA), else the first of ``answers``, a list of strings
    (TextVQA, DocVQA) or of ``{"answer": ...}`` annotations (VQAv2); its annotators' other answers stay in the
    record as ``answers``.

    Raises:
        RecordInvalid: ``invalid_field`` when the row has no answer.
    """
    answer = raw.get("answer")
    if answer is None or answer == "" or answer == []:
        answer = next(iter(annotator_answers(raw)), None)
    if isinstance(answer, (list, tuple)):
        answer = next((a for a in answer if a not in (None, "")), None)
    if isinstance(answer, dict):
        answer = answer.get("answer")
    if answer is None or answer == "":
        raise RecordInvalid("invalid_field", "question has no answer (answer or answers)")
    return as_text(answer, "answer").strip()


# Where a record's images stand in its conversation: ``<image>`` placeholders, MMMU's numbered ones, and the images a
# record's layout implies it has.
_NUMBERED_PLACEHOLDER = re.compile(r"<image (\d+)>")


def number_placeholders(messages: list[dict[str, str]], images: list[Any],
                        numbers: list[int] | None) -> tuple[list[dict[str, str]], list[Any]]:
    """MMMU's numbered placeholders: in a conversation with no ``<image>``, each ``<image k>`` (in the question
    or its options) becomes ``<image>`` where it stands, and the images follow the placeholders: image ``k``
    at each of its places (twice if it is referred to twice). ``numbers`` are the images' numbers (MMMU's
    ``image_k`` columns, which the row keeps as they are when written back); without them (other layouts,
    whose written-back rows keep their own image order) or without such placeholders nothing changes.

    Raises:
        RecordInvalid: ``image_count_mismatch`` for a placeholder with no such image, or an image that no
            placeholder refers to.
    """
    if numbers is None or not images or count_placeholders(messages) or \
            not any(_NUMBERED_PLACEHOLDER.search(m["content"]) for m in messages):
        return messages, images
    by_number = dict(zip(numbers, images))
    order = [int(k) for m in messages for k in _NUMBERED_PLACEHOLDER.findall(m["content"])]
    missing = next((k for k in order if k not in by_number), None)
    if missing is not None:
        raise RecordInvalid("image_count_mismatch", f"<image {missing}> refers to no image (the row has images "
                                                    f"{', '.join(map(str, numbers))})")
    referred = set(order)
    unused = next((k for k in numbers if k not in referred), None)
    if unused is not None:
        raise RecordInvalid("image_count_mismatch", f"image {unused} is referred to by no <image k> placeholder")
    messages = [{**m, "content": _NUMBERED_PLACEHOLDER.sub(IMAGE_TOKEN, m["content"])} for m in messages]
    return messages, [by_number[k] for k in order]


def place_images(messages: list[dict[str, str]], n_images: int) -> list[dict[str, str]]:
    """Check that ``messages`` hold one ``<image>`` per image; when they hold none, put the
    placeholders (each followed by a newline) at the start of the first user turn.

    Raises:
        RecordInvalid: ``image_count_mismatch`` (other counts, or images but no user turn).
    """
    n_tags = count_placeholders(messages)
    if n_tags == n_images:
        return messages
    if n_images == 0:
        raise RecordInvalid("missing_image", f"{n_tags} {IMAGE_TOKEN} placeholder{'s' if n_tags > 1 else ''} but "
                                             "no image in the record")
    if n_tags == 0 and n_images > 0:
        for i, m in enumerate(messages):
            if m["role"] == "user":
                messages = list(messages)
                messages[i] = {**m, "content": (IMAGE_TOKEN + "\n") * n_images + m["content"]}
                return messages
        raise RecordInvalid("image_count_mismatch", "record has images but no user turn to hold them")
    raise RecordInvalid("image_count_mismatch", f"{n_tags} {IMAGE_TOKEN} placeholders for {n_images} images")


def implied_image(raw: dict[str, Any], layout: str, caption: bool) -> str | None:
    """Why a row without images should have had one (its layout says so), or None: a URL column (an
    image never downloaded) or a caption (it describes an image)."""
    url = next((k for k in URL_COLUMNS if isinstance(raw.get(k), str) and raw[k]), None)
    if url is not None:
        return (f"the row has an image {url} ({raw[url][:120]}) but no image bytes: download the images first "
                "(for example with img2dataset) and pass its output")
    if caption:
        return f"a caption ({layout}) without an image: give the record its image (image or images)"
    return None


def count_placeholders(messages: Iterable[dict[str, str]]) -> int:
    """Number of ``<image>`` placeholders in a conversation."""
    return sum(m["content"].count(IMAGE_TOKEN) for m in messages)


# The ``source`` of a record that carries none: named after its input file, less any shard number.
#: Names that say which split or shard a file is, not which dataset: a source is looked for above them.
GENERIC_NAMES = frozenset({"train", "training", "test", "testing", "val", "valid", "validation", "dev", "eval",
                           "data", "dataset", "datasets", "default", "shard", "shards", "part", "parts", "chunk",
                           "chunks", "split", "splits", "parquet", "tars", "webdataset", "wds", "output", "images"})
_SHARD = re.compile(r"(?:(?P<name>.*?)[-_.])?\d+(?:-of-\d+)?")
_LEVELS = 3


def default_source(path: str) -> str:
    """The source of the records of input file ``path`` that have none (see the module docstring)."""
    return _names(path)[0]


def default_id_prefix(path: str) -> str:
    """What the id of a row without one starts with (``<prefix>:<row>``): the file's stem, after the folder that
    names its source when the stem alone does not (``vqav2/train-00000-of-00002``,
    ``laion400m/00000``), so that the same file names in two datasets' folders give different ids."""
    return _names(path)[1]


@functools.lru_cache(maxsize=4096)
def _names(path: str) -> tuple[str, str]:
    p = as_path(path if is_url(path) else os.path.abspath(path))
    stem = p.stem
    match = _SHARD.fullmatch(stem)
    if match is None:
        return stem, stem
    name = match.group("name") or ""
    if name and name.lower() not in GENERIC_NAMES:
        return name, stem
    folder, generic = p.parent, ""
    for _ in range(_LEVELS):
        label = folder.name
        if not label or ":" in label:  # the file system's root, or a URL's scheme
            break
        if label.lower() not in GENERIC_NAMES:
            return label, f"{label}/{stem}"
        generic = generic or label
        folder = folder.parent
    return name or generic or stem, stem


# The golds of VQA rows: their annotators' answers, and the options and letter of multiple-choice rows.
#
# Shared by the reader (above) and the verifiers' routing (:mod:`curate.rewards.registry`); this module loads
# neither numpy nor pyarrow, so the rewards stay light inside RL trainers.
#
# * **Annotators' answers**: TextVQA and DocVQA store ``answers`` as a list of strings, VQAv2
#   as ``{"answer": ...}`` annotations; a row without ``answer`` is scored against any of them
#   (:func:`annotator_answers`).
# * **Multiple choice**: ScienceQA stores ``choices`` and ``answer``, the index of the right
#   one (an integer), with ``hint`` as the context; AI2D exports store ``options`` and the
#   index as text; A-OKVQA stores ``choices`` and ``correct_choice_idx``. Read as they are,
#   the answer would be the text ``1`` and the options nowhere in the prompt. Such a row reads
#   as LLaVA reads ScienceQA: the context, the question, the options lettered ``A.``, ``B.``, …
#   and :data:`CHOICE_PROMPT`, answered by the option's letter (:func:`choice_question`), and
#   that letter is its gold for the ``multiple-choice`` verifier (:func:`answer_letter`). MMMU stores its
#   options as the text of a Python list (``"['8', '10']"``, ``"[]"`` for open questions): read as that list.
OPTION_FIELDS = ("choices", "options")
"""Fields that hold a row's options, the first present wins."""
INDEX_FIELDS = ("answer", "correct_choice_idx")
"""Fields that may hold the index (or the text, or the letter) of a multiple-choice row's answer."""
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CHOICE_PROMPT = "Answer with the option's letter from the given choices directly."


def annotator_answers(raw: Mapping[str, Any]) -> list[str]:
    """The distinct non-empty answers of ``answers`` (strings, or ``{"answer": ...}`` annotations), first seen first."""
    found = raw.get("answers")
    if not isinstance(found, (list, tuple)):
        return []
    out: list[str] = []
    for item in found:
        if isinstance(item, Mapping):
            item = item.get("answer")
        if item is None or isinstance(item, (list, tuple, Mapping)):
            continue
        text = str(item).strip()
        if text and text not in out:
            out.append(text)
    return out


def options_of(raw: Mapping[str, Any]) -> list[str] | None:
    """The row's options (``choices`` or ``options``: 2 to 26 strings or numbers, or the text of such a
    Python list), else None."""
    for field in OPTION_FIELDS:
        options = raw.get(field)
        if options is None:
            continue
        if isinstance(options, str):
            options = _listed(options)
        if (isinstance(options, (list, tuple)) and 2 <= len(options) <= len(LETTERS)
                and all(isinstance(o, (str, int, float)) and not isinstance(o, bool) for o in options)):
            return [str(o).strip() for o in options]
        return None
    return None


def answer_letter(raw: Mapping[str, Any], options: list[str]) -> str | None:
    """The letter of the row's answer among ``options``, or None when the row names none of them.

    The answer (``answer``, else ``correct_choice_idx``) may be an integer index, an index
    written as digits, one of the options' texts, or a letter within the options.

    Raises:
        ValueError: an integer index outside the options (the message says so).
    """
    value = next((raw[f] for f in INDEX_FIELDS if raw.get(f) not in (None, "")), None)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if not 0 <= value < len(options):
            raise ValueError(f"answer {value} is not the index of one of the {len(options)} options")
        return LETTERS[value]
    if not isinstance(value, str):
        return None
    text = value.strip()
    if text in options:
        return LETTERS[options.index(text)]
    letter = text.strip("().").strip()
    if len(letter) == 1 and letter in LETTERS[:len(options)]:
        return letter
    if text.isdigit() and int(text) < len(options):
        return LETTERS[int(text)]
    return None


def multiple_choice(raw: Mapping[str, Any]) -> tuple[list[str], str] | None:
    """``(options, letter of the answer)`` of a multiple-choice row (options, and an answer naming one of them),
    else None.

    Raises:
        ValueError: an integer index outside the options (:func:`answer_letter`).
    """
    options = options_of(raw)
    letter = answer_letter(raw, options) if options else None
    return (options, letter) if letter is not None else None


def is_multiple_choice(raw: Mapping[str, Any]) -> bool:
    """Whether the row is a multiple-choice one (:func:`multiple_choice`; an index outside its options counts,
    so that scoring it reports the error)."""
    try:
        return multiple_choice(raw) is not None
    except ValueError:
        return True


def choice_question(raw: Mapping[str, Any], question: str, options: list[str]) -> str:
    """The prompt of a multiple-choice row: ``Context: hint`` (when the row has one), the question, the lettered
    options and :data:`CHOICE_PROMPT`, a line each."""
    hint = raw.get("hint")
    lines = [f"Context: {hint.strip()}"] if isinstance(hint, str) and hint.strip() else []
    lines.append(question.strip())
    lines.extend(f"{LETTERS[i]}. {option}" for i, option in enumerate(options))
    lines.append(CHOICE_PROMPT)
    return "\n".join(lines)


def _listed(text: str) -> Any:
    """The list written as ``text`` (a Python or JSON list literal of at most 100,000 characters), else None."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")) or len(text) > 100_000:
        return None
    import ast  # only for rows whose options are text

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
