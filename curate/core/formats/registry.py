"""Every input container curate reads, by name and by file suffix: the one table of formats.

Readers (:mod:`curate.core.records`), the split cache (:mod:`curate.core.splits`), folder listing and
writing records back (``resample``'s selected records) all look a format up here. A new format is a
:class:`~curate.core.formats.container.Container` in a module of its own and one line below.
"""

from __future__ import annotations

from curate.core.formats.container import Container
from curate.core.formats.jsonl import JsonArray, JsonLines
from curate.core.formats.parquet import ParquetRows
from curate.core.formats.tars import GzippedTar, Tar

#: Every container, by the name its parts carry.
CONTAINERS: dict[str, Container] = {c.name: c for c in (JsonLines(), JsonArray(), ParquetRows(), Tar(), GzippedTar())}
#: Every record-file suffix and the container it names.
SUFFIXES: dict[str, str] = {suffix: c.name for c in CONTAINERS.values() for suffix in c.suffixes}
#: The suffixes as messages name them.
ACCEPTED = ", ".join(list(SUFFIXES)[:-1]) + f" or {list(SUFFIXES)[-1]}"
