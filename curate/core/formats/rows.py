"""Image columns of a row, in every layout curate reads, to a list of paths or bytes.

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
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

from curate.core.formats.refs import ImageAt
from curate.core.io import as_path, is_url

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
