"""Records written back keep their images: bytes stay bytes, in the ``datasets`` image struct.

Stages that write records (``resample``'s ``records/``, ``recaption``'s records, ``rl-filter``'s
kept prompts) go through here. Records whose images are paths are written as JSONL, as before;
when any record carries image bytes the file is Parquet instead, with ``image`` a struct
``{bytes: binary, path: string}`` and ``images`` a list of them (the layout the Hugging Face
``datasets`` library reads as its ``Image`` feature), so the images travel with the records and no
path points nowhere. Such a file's schema carries the ``datasets`` features (metadata key ``huggingface``,
:func:`with_hf_features`), so ``datasets.load_dataset("parquet", ...)`` reads its images as images.

Per-shard intermediate files stay JSONL: :func:`dumps_record` writes bytes as ``{"$bytes": base64}``
and :func:`loads_record` restores them.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

#: The ``datasets`` library's ``Image`` feature as a Parquet/Arrow type.
IMAGE_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
_TAG = "$bytes"
#: Arrow types whose ``datasets`` dtype is not their Arrow name.
_HF_DTYPES = {"float": "float32", "double": "float64", "halffloat": "float16"}
_IMAGE_KEYS = ("images", "image")


def _default(obj: Any) -> Any:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {_TAG: base64.b64encode(bytes(obj)).decode("ascii")}
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _hook(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and _TAG in obj:
        return base64.b64decode(obj[_TAG])
    return obj


def with_resolved_paths(raw: dict[str, Any], images: Sequence[Any], relative_to: str | None = None) -> dict[str, Any]:
    """The raw row with the image paths of its ``images`` (or ``image``) field replaced by the record's resolved
    ones (``images``: the canonical record's, in the same order: the reader's one resolution, from the file's
    folder or ``--image-root``), so that the row, written into another folder, still points at its images.
    With ``relative_to`` (the folder the row is written to) a local path under it is written relative to it.
    Bytes and structs carrying bytes stay as they are; the row is not changed (a new one is returned when a
    path changes)."""
    key = "images" if raw.get("images") is not None else "image" if raw.get("image") is not None else None
    if key is None:
        return raw
    value = raw[key]
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) != len(images):
        return raw

    def one(item: Any, resolved: Any) -> Any:
        if not isinstance(resolved, str):
            return item
        if relative_to is not None and "://" not in resolved[:32]:
            rel = os.path.relpath(resolved, relative_to)
            resolved = resolved if rel.startswith("..") else rel
        if isinstance(item, str):
            return resolved
        if isinstance(item, dict) and isinstance(item.get("path"), str) and not item.get("bytes"):
            return {**item, "path": resolved}
        return item

    new = [one(item, resolved) for item, resolved in zip(items, images)]
    if new == items:
        return raw
    return {**raw, key: new if isinstance(value, (list, tuple)) else new[0]}


def dumps_record(obj: Any, *, sort_keys: bool = True) -> str:
    """One JSON line (no newline) for a record or raw row that may hold bytes."""
    return json.dumps(obj, ensure_ascii=False, sort_keys=sort_keys, default=_default)


def loads_record(text: str) -> Any:
    """The inverse of :func:`dumps_record`."""
    return json.loads(text, object_hook=_hook)


def carries_bytes(value: Any) -> bool:
    """Whether a record (or any value inside it) holds bytes."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return True
    if isinstance(value, dict):
        return any(carries_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(carries_bytes(v) for v in value)
    return False


def line_carries_bytes(line: str) -> bool:
    """Whether a :func:`dumps_record` line holds bytes (a cheap text test)."""
    return f'"{_TAG}"' in line


def _struct(item: Any) -> dict[str, Any] | None:
    if item is None:
        return None
    if isinstance(item, (bytes, bytearray, memoryview)):
        return {"bytes": bytes(item), "path": None}
    if isinstance(item, str):
        return {"bytes": None, "path": item}
    if isinstance(item, dict):
        return {"bytes": item.get("bytes"), "path": item.get("path")}
    raise TypeError(f"not an image: {type(item).__name__}")


def records_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """A table of rows whose ``image``/``images`` columns become ``datasets`` image structs."""
    columns: dict[str, list[Any]] = {}
    for i, row in enumerate(rows):
        for key in row:
            columns.setdefault(key, [None] * i)
        for key, values in columns.items():
            values.append(row.get(key))
    arrays, names = [], []
    for key, values in columns.items():
        if key == "images":
            arr = pa.array([None if v is None else [_struct(x) for x in (v if isinstance(v, list) else [v])]
                            for v in values], type=pa.list_(IMAGE_STRUCT))
        elif key == "image":
            arr = pa.array([_struct(v) for v in values], type=IMAGE_STRUCT)
        else:
            try:
                arr = pa.array(values)
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types in an extra field: keep it as JSON text
                arr = pa.array([None if v is None else dumps_record(v) for v in values], type=pa.string())
        arrays.append(arr)
        names.append(key)
    return with_hf_features(pa.Table.from_arrays(arrays, names=names))


def _hf_feature(kind: pa.DataType) -> Any:
    """The ``datasets`` feature (its JSON form) of an Arrow type; None for a type it has no plain feature for."""
    if kind == IMAGE_STRUCT:
        return {"_type": "Image"}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        inner = _hf_feature(kind.value_type)
        return None if inner is None else {"feature": inner, "_type": "List"}
    if pa.types.is_struct(kind):
        fields = {kind.field(i).name: _hf_feature(kind.field(i).type) for i in range(kind.num_fields)}
        return None if any(v is None for v in fields.values()) else fields
    if pa.types.is_dictionary(kind) or pa.types.is_map(kind) or pa.types.is_union(kind) \
            or pa.types.is_fixed_size_list(kind) or pa.types.is_decimal(kind):
        return None
    return {"dtype": _HF_DTYPES.get(str(kind), str(kind)), "_type": "Value"}


def _holds_images(kind: pa.DataType) -> bool:
    if kind == IMAGE_STRUCT:
        return True
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _holds_images(kind.value_type)
    return pa.types.is_struct(kind) and any(_holds_images(kind.field(i).type) for i in range(kind.num_fields))


def with_hf_features(table: pa.Table) -> pa.Table:
    """``table`` with the Hugging Face ``datasets`` features in its schema metadata (key ``huggingface``, as
    ``datasets`` writes it: ``Image`` for the image structs, ``List``, ``Value``) when a column holds images,
    or made again when the table already had some (a source file's, whose columns may have changed); a table with
    a column ``datasets`` has no plain feature for keeps none."""
    metadata = dict(table.schema.metadata or {})
    if not any(_holds_images(f.type) for f in table.schema) and b"huggingface" not in metadata:
        return table
    features = {f.name: _hf_feature(f.type) for f in table.schema}
    metadata.pop(b"huggingface", None)
    if all(v is not None for v in features.values()):
        metadata[b"huggingface"] = json.dumps({"info": {"features": features}}).encode("utf-8")
    return table.replace_schema_metadata(metadata or None)


def write_records(folder: str | Path, stem: str, rows: Iterable[dict[str, Any]]) -> str:
    """Write records as ``<stem>.jsonl``, or ``<stem>.parquet`` when any carries image bytes; return the name."""
    from curate.core.io import atomic_open, write_parquet

    rows = list(rows)
    folder = Path(folder)
    if any(carries_bytes(r) for r in rows):
        name = f"{stem}.parquet"
        write_parquet(folder / name, records_table(rows))
        return name
    name = f"{stem}.jsonl"
    with atomic_open(folder / name, "w") as fh:
        for row in rows:
            fh.write(dumps_record(row) + "\n")
    return name


def image_ref(image: str | bytes) -> str:
    """How a table column names an image: its path, or ``sha256:<hex>`` of bytes carried in the record."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        import hashlib

        return "sha256:" + hashlib.sha256(bytes(image)).hexdigest()
    return image


def merge_record_lines(parts: Sequence[Path], folder: Path, stem: str) -> str:
    """Concatenate per-shard :func:`dumps_record` JSONL files into ``<stem>.jsonl``, or ``<stem>.parquet``
    when they carry image bytes; return the name written."""
    import shutil

    from curate.core.io import atomic_open

    with_bytes = False
    for part in parts:
        with open(part, encoding="utf-8") as fh:
            if any(line_carries_bytes(line) for line in fh):
                with_bytes = True
                break
    if with_bytes:
        rows = [loads_record(line) for part in parts for line in part.read_text(encoding="utf-8").splitlines() if line]
        return write_records(folder, stem, rows)
    with atomic_open(folder / f"{stem}.jsonl", "w") as out:
        for part in parts:
            with open(part, encoding="utf-8") as fh:
                shutil.copyfileobj(fh, out)
    return f"{stem}.jsonl"
