"""Images known by their head and their place in an input, for steps that need only the header.

Pack's length step needs each image's size (from its header) and where to find it again; it
reads records with ``heads=True`` (:func:`curate.core.records.read_part`), and images inside a
tar or a Parquet file come as :class:`ImageAt` instead of bytes:

* a tar member: only its first 16 KiB and last 4 KiB are read (the end-marker check); the header
  parser asks for up to 64 KiB (:meth:`ImageAt.longer_head`) in the rare image whose frame header
  lies further; :meth:`ImageAt.read` reads the member again;
* a Parquet cell: a view on the Arrow buffer of its row group (no copy); :meth:`ImageAt.read`
  copies it out.

Every other step reads records without ``heads`` and gets the image bytes themselves.
"""

from __future__ import annotations

from typing import IO, Any

from curate.core.image_headers import HEAD, TAIL

#: What is read first of a tar member: JPEG frame headers and PNG IHDR nearly always lie within it.
SHORT_HEAD = 16384


def read_member(fh: IO[bytes], offset: int, size: int) -> bytes:
    """``size`` bytes of an open tar at ``offset`` (a member's data); OSError when it is shorter now."""
    fh.seek(offset)
    data = fh.read(size)
    if len(data) != size:
        raise OSError(f"member at offset {offset} is cut short ({len(data)} of {size} bytes)")
    return data


class ImageAt:
    """An image in a tar (``span`` ``[offset, size]``) or a Parquet file (``[row, column, item, size]``).

    ``head`` and ``tail`` are its first 64 KiB and last 4 KiB; ``len()`` is its size in bytes.
    """

    __slots__ = ("file", "where", "size", "head", "tail", "_data")

    def __init__(self, file: str, where: list[int], size: int, head: Any, tail: bytes, data: Any = None) -> None:
        self.file, self.where, self.size = file, where, size
        self.head, self.tail, self._data = head, tail, data

    @classmethod
    def member(cls, fh: IO[bytes], tar: str, offset: int, size: int) -> ImageAt:
        """A tar member at ``offset``: its head and tail read from the open tar (all of it when small)."""
        fh.seek(offset)
        if size <= SHORT_HEAD + TAIL:
            data = fh.read(size)
            if len(data) != size:
                raise OSError(f"member at offset {offset} is cut short")
            return cls(tar, [offset, size], size, data, data[-TAIL:], data)
        head = fh.read(SHORT_HEAD)
        fh.seek(offset + size - TAIL)
        tail = fh.read(TAIL)
        if len(head) != SHORT_HEAD or len(tail) != TAIL:
            raise OSError(f"member at offset {offset} is cut short")
        return cls(tar, [offset, size], size, head, tail)

    @classmethod
    def cell(cls, view: memoryview, file: str, row: int, field: int, item: int) -> ImageAt:
        """A Parquet cell: ``view`` on the Arrow buffer (kept, not copied)."""
        size = len(view)
        return cls(file, [row, field, item, size], size, view[:HEAD], bytes(view[-TAIL:]), view)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"ImageAt({self.file!r}, {self.where})"

    def span(self) -> list[int]:
        """Where the shard writer finds it again (see :mod:`packer.lengths`)."""
        return list(self.where)

    @property
    def view(self) -> memoryview | None:
        """The whole image as a view on the Arrow buffer (a Parquet cell not yet detached), else None."""
        return self._data if isinstance(self._data, memoryview) else None

    def longer_head(self) -> bytes | memoryview | None:
        """The first 64 KiB when :attr:`head` holds less of a longer image (read again from the tar); else None."""
        if len(self.head) >= min(HEAD, self.size) or len(self.where) != 2:
            return None
        from curate.core.io import open_input

        with open_input(self.file) as fh:
            fh.seek(self.where[0])
            return fh.read(min(HEAD, self.size))

    def read(self) -> bytes:
        """The image bytes (read again from the tar, or copied from the Arrow buffer).

        Raises:
            OSError: the tar is gone or shorter now; ValueError: the view was released by :meth:`detach`.
        """
        if self._data is not None:
            return bytes(self._data)
        if len(self.where) != 2:
            raise ValueError(f"{self.file} row {self.where[0]}: image no longer held (detached)")
        from curate.core.io import open_input

        with open_input(self.file) as fh:
            return read_member(fh, self.where[0], self.size)

    def detach(self) -> ImageAt:
        """The same address without the bytes held (head, tail, view): what is kept once the header is read."""
        return ImageAt(self.file, self.where, self.size, b"", b"")
