"""WebDataset tars as record inputs.

A tar is read as consecutive member groups: a member ``dir/KEY.ext`` belongs to group
``dir/KEY`` (the name up to the first dot of its base name), as WebDataset groups them. One
group is one row:

* images: members whose last extension is an image type (``jpg``, ``png``, ``webp``...), in
  member order, carried as bytes;
* text: ``txt`` (a caption), or a ``json`` holding ``conversations`` / ``messages`` (or a
  ``caption``); the ``json``'s other fields are kept as the record's extra fields;
* id: the ``json``'s ``id``, else the group key.

A group without an image or without text is a bad row (``incomplete_group``); a tar that ends
inside a member or without its end-of-archive blocks errors its last group (``truncated_tar``).
Groups are found from the tar headers alone (member data is skipped), so splitting a big tar
into parts costs one header read per member; a part starts at its first group's header offset.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from curate.core.formats.rows import IMAGE_EXTS

class MemberBytes(bytes):
    """The bytes of a tar member that also say where they came from (``tar``, ``offset``, ``size``).

    Pack's length step stores this reference instead of the bytes; the shard writer reads the
    member again (:func:`read_member`). Anything that makes new bytes from it gets plain bytes.
    """

    tar: str
    offset: int

    def __new__(cls, data: bytes, tar: str, offset: int) -> MemberBytes:
        obj = super().__new__(cls, data)
        obj.tar, obj.offset = tar, offset
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (MemberBytes, (bytes(self), self.tar, self.offset))


def read_member(fh: IO[bytes], offset: int, size: int) -> bytes:
    """``size`` bytes of an open tar at ``offset`` (a member's data); OSError when it is shorter now."""
    fh.seek(offset)
    data = fh.read(size)
    if len(data) != size:
        raise OSError(f"member at offset {offset} is cut short ({len(data)} of {size} bytes)")
    return data


_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


def expand_braces(pattern: str) -> list[str]:
    """Expand ``{00000..00099}`` ranges (zero padding kept) and ``{a,b}`` lists, left to right."""
    match = _BRACE.search(pattern)
    if match is None:
        return [pattern]
    body, head, tail = match.group(1), pattern[:match.start()], pattern[match.end():]
    rng = _RANGE.match(body)
    if rng:
        lo, hi = int(rng.group(1)), int(rng.group(2))
        width = len(rng.group(1)) if rng.group(1).startswith("0") else 0
        step = 1 if hi >= lo else -1
        options = [f"{i:0{width}d}" for i in range(lo, hi + step, step)]
    elif "," in body:
        options = body.split(",")
    else:
        return [head + "{" + body + "}" + t for t in expand_braces(tail)]
    return [head + opt + t for opt in options for t in expand_braces(tail)]


@dataclass
class Group:
    """One member group of a tar: its key, the header offset of its first member, its members."""

    key: str
    offset: int
    members: list[tuple[str, int, int]] = field(default_factory=list)  # (extension, data offset, size)
    truncated: str = ""


def _split_name(name: str) -> tuple[str, str] | None:
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot <= slash + 1:
        return None
    return name[:dot], name[dot + 1:]


def scan_groups(fh: IO[bytes], size: int, offset: int = 0) -> Iterator[Group]:
    """Yield the member groups of a tar from byte ``offset`` on, reading headers only.

    The last group carries ``truncated`` (a reason detail) when the archive does not end cleanly.
    """
    fh.seek(offset)
    current: Group | None = None
    end, problem = offset, ""
    try:
        with tarfile.open(fileobj=fh, mode="r:") as tar:
            for info in tar:
                end = info.offset_data + ((info.size + 511) // 512) * 512
                if not info.isfile():
                    continue
                parts = _split_name(info.name)
                if parts is None:
                    continue
                key, ext = parts
                if current is not None and key != current.key:
                    yield current
                    current = None
                if current is None:
                    current = Group(key, info.offset)
                current.members.append((ext.lower(), info.offset_data, info.size))
            if end > size:
                problem = f"the tar ends at byte {size}, inside a member"
    except tarfile.ReadError as exc:
        problem = f"unreadable tar after byte {end}: {exc}"
    if not problem:
        fh.seek(end)
        rest = fh.read(1024)
        if len(rest) < 1024 or rest.strip(b"\x00"):
            problem = f"the tar ends at byte {size} without its end-of-archive blocks"
    if current is None and problem:
        current = Group(f"@{end}", end)
    if current is not None:
        current.truncated = problem
        yield current


def count_groups(fh: IO[bytes], size: int) -> tuple[list[int], int]:
    """The header offset of every group and how many there are (``len`` of the first)."""
    offsets = [g.offset for g in scan_groups(fh, size)]
    return offsets, len(offsets)


def group_row(fh: IO[bytes], group: Group, tar: str | None = None) -> tuple[dict[str, Any], str | None]:
    """Read one group's members into a raw row; ``({"id": key}, "reason:detail")`` for a bad group.

    With ``tar`` (the tar's path or URL) images are :class:`MemberBytes` that remember their member.
    """
    bad = {"id": group.key}
    if group.truncated:
        return bad, f"truncated_tar:group {group.key}: {group.truncated}"
    images: list[bytes] = []
    text: str | None = None
    meta: Any = None
    for ext, at, size in group.members:
        fh.seek(at)
        data = fh.read(size)
        if len(data) != size:
            return bad, f"truncated_tar:group {group.key}: member .{ext} is cut short"
        last = ext.rsplit(".", 1)[-1]
        if last in IMAGE_EXTS:
            images.append(MemberBytes(data, tar, at) if tar is not None else data)
        elif last == "txt" and text is None:
            text = data.decode("utf-8", errors="replace")
        elif last == "json" and meta is None:
            try:
                meta = json.loads(data)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                return bad, f"malformed_json:group {group.key}: .{ext} is not JSON ({getattr(exc, 'msg', 'not UTF-8')})"
    row: dict[str, Any] = dict(meta) if isinstance(meta, dict) else {}
    if meta is not None and not isinstance(meta, dict):
        row["json"] = meta
    has_dialog = any(k in row for k in ("messages", "conversations", "texts"))
    if text is not None and not has_dialog:
        row["caption"] = text
    if not images and not has_dialog:
        return bad, f"incomplete_group:group {group.key} has no image member ({'|'.join(sorted(IMAGE_EXTS))})"
    if text is None and not has_dialog and not isinstance(row.get("caption"), str):
        return bad, f"incomplete_group:group {group.key} has no text: no .txt, and no .json with conversations/messages/caption"
    if images:
        row.pop("image", None)
        row["images"] = images
    row.setdefault("id", group.key)
    return row, None
