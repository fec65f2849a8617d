"""A ``lengths.parquet`` given back to ``curate pack`` (``--lengths``): read, checked, vouched for.

Every ``curate pack`` records the SHA-256 of the ``lengths.parquet`` it wrote in its ``stats.json``
(``lengths_sha256``). A lengths file read back is held to it:

* beside the ``stats.json`` of the pack that wrote it, its bytes must still have that hash: a file
  changed since (token counts edited by hand or by a tool) is refused, never planned nor reused;
* its counts are reused for other records (``--lengths`` with INPUT, or an earlier folder that counted
  the same inputs) only when it is vouched for that way;
* a table without such a record (made elsewhere) is planned as it is (``--lengths`` without INPUT,
  ``--plan-only``), after its columns are checked: ``id`` and ``tokens`` present, ``tokens`` integers,
  none null or negative.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.errors import UserError
from curate.core.io import file_sha256, read_json
from curate.core.shards import SHARDS_DIR

#: The name of a pack's lengths file, and the ``stats.json`` key of its hash.
LENGTHS_FILE, LENGTHS_SHA = "lengths.parquet", "lengths_sha256"


def vouched(path: Path) -> bool | None:
    """Whether the pack that wrote ``path`` vouches for its bytes: True (same hash), False (changed since),
    None (no finished pack's record of it beside it)."""
    try:
        recorded = read_json(path.parent / "stats.json").get(LENGTHS_SHA) if path.name == LENGTHS_FILE else None
    except (OSError, ValueError, AttributeError):
        recorded = None
    if not isinstance(recorded, str):
        return None
    return file_sha256(path) == recorded


def load_lengths(path: Path, *, need_store: bool, reuse: bool = False,
                 columns: Sequence[str] | None = None) -> tuple[pa.Table, Path, str | None]:
    """Read a lengths file (only ``columns`` of it when given and present): ``(table, its folder, the processor
    fingerprint it was counted with)``; ``reuse``: its counts will be reused for other records.

    Raises:
        UserError: no such file, not Parquet, missing, null or negative counts, changed since its pack wrote
            it, or (``reuse``) not vouched for by a pack's ``stats.json``.
    """
    if not path.exists():
        raise UserError(f"--lengths {path}: no such file")
    trusted = vouched(path)
    if trusted is False:
        raise UserError(f"--lengths {path}: changed since curate pack wrote it (its SHA-256 differs from "
                        f"{path.parent / 'stats.json'}); its counts cannot be trusted: count again from INPUT")
    if trusted is None and reuse:
        raise UserError(f"--lengths {path}: no stats.json of the curate pack that wrote it vouches for it, so its "
                        "counts are not reused for INPUT; give a pack's own lengths.parquet, or plan it as it is "
                        "with --plan-only and no INPUT")
    try:
        # ParquetFile, not read_table: the dataset layer (and the pandas it imports) is not needed for one file
        schema = pq.read_schema(path)
        if columns is not None:
            columns = [c for c in columns if c in schema.names]
        as_codes = [c for c in ("source",) if columns is not None and c in columns  # a few names: read as codes
                    and pa.types.is_string(schema.field(c).type)]
        table = pq.ParquetFile(path, read_dictionary=as_codes or None).read(columns=columns)
    except Exception as exc:  # pyarrow raises several types
        raise UserError(f"--lengths {path}: not a readable Parquet file ({exc})") from None
    missing = {"id", "tokens"} - set(table.column_names)
    if missing:
        raise UserError(f"--lengths {path}: missing column(s) {', '.join(sorted(missing))}; need at least id and tokens")
    tokens = table.column("tokens")
    if not pa.types.is_integer(tokens.type):
        raise UserError(f"--lengths {path}: tokens are {tokens.type}, not integers")
    if tokens.null_count:
        raise UserError(f"--lengths {path}: {tokens.null_count:,} records have no token count (null)")
    if table.num_rows and pc.min(tokens).as_py() < 0:
        raise UserError(f"--lengths {path}: negative token counts")
    folder = path.parent
    fingerprint = None
    settings = folder / SHARDS_DIR / "lengths" / "settings.json"
    if settings.exists():
        fingerprint = read_json(settings).get("processor")
    if need_store and not (folder / "_records").is_dir():
        raise UserError(f"--lengths {path}: writing shards needs the counted records stored beside it "
                        f"({folder}/_records); pack with --plan-only, or count again from INPUT")
    return table, folder, fingerprint


def processor_of(lengths: Path) -> str:
    """The processor an earlier pack counted with (its ``stats.json``), for ``--lengths`` with INPUT."""
    try:
        found = read_json(lengths.parent / "stats.json").get("settings", {}).get("processor_path")
    except (OSError, ValueError, AttributeError):
        found = None
    if not found:
        raise UserError(f"--lengths {lengths} with INPUT counts the records that changed: give --processor "
                        "(the one the trainer uses)")
    return str(found)
