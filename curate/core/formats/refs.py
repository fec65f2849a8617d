"""Images known by their place in an input, for steps that keep an address instead of the bytes.

Pack's length step needs each image proven and sized, and where to find it again; it
reads records with ``heads=True`` (:func:`curate.core.records.read_part`), and images inside a
tar or a Parquet file come as :class:`ImageAt` instead of bytes:

* a tar member: read whole as the tar is walked (the image gate proves it decodes), then
  :meth:`ImageAt.detach` keeps only its address; :meth:`ImageAt.read` reads the member again;
* a Parquet cell: a view on the Arrow buffer of its row group (no copy); :meth:`ImageAt.read`
  copies it out.

Every other step reads records without ``heads`` and gets the image bytes themselves.
"""

from __future__ import annotations

from typing import IO, Any

from curate.core.image_headers import HEAD, TAIL


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
        """A tar member at ``offset``, read whole from the open tar (in order: the tar is read front to back
        once); the image gate proves it decodes, and :meth:`detach` keeps only its address afterwards."""
        data = read_member(fh, offset, size)
        return cls(tar, [offset, size], size, memoryview(data)[:HEAD], data[-TAIL:], data)

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
        """Where the shard writer finds it again (see :mod:`packer.count`)."""
        return list(self.where)

    @property
    def held(self) -> bytes | memoryview | None:
        """The whole image when it is held (a tar member just read, a Parquet cell not yet detached), else None."""
        return self._data

    @property
    def view(self) -> memoryview | None:
        """The whole image as a view on the Arrow buffer (a Parquet cell not yet detached), else None."""
        return self._data if isinstance(self._data, memoryview) else None

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
