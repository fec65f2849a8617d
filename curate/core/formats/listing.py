"""Input arguments to files: local paths, folders, brace patterns and object-store URLs, and which files of a
folder or a bucket prefix are records.

An unreachable bucket or missing credentials stop the run before any work, with one line
naming the URL (:class:`~curate.core.errors.UserError`).

Which files of an input folder are records:

A folder given as input is searched recursively for files with a records suffix.
Hidden files and folders (``.tmp``, ``.nv-meta``) are never inputs, and a ``.json``
file holds records only as an array: a JSON object, such as a folder's
``EXPECTED.json`` or a ``stats.json``, is skipped with one line on stderr that
names it and says why. A file named directly on the command line is always read
(and refused with a one-line error when it is not records).

A curate output folder inside an input folder (``curate pack data/ --out data/packed``) is
skipped whole, with one line: its shards, tags and rejects are not the user's records, and
reading them would change the inputs of the next run, so a rerun could not resume. It is
known by what every stage leaves in it (:func:`output_folder`): the lock of a run
(``.curate.lock``, held while it runs and left by a killed one), the shard markers of a
sharded stage (``_shards/``) or the ``stats.json`` of a finished one. A folder named
directly is always read.

A Parquet file with the stem of a tar beside it (``00000.parquet`` next to ``00000.tar``) is that
shard's metadata table, as img2dataset and NeMo Curator write their WebDataset output: one row per
sample it tried (failed downloads too), caption but no image. Its rows would be read a second time
as records without their images, so it is skipped with one line; named directly, it is read.
A prefix in object storage follows the same rules (:func:`keep_listed`, :func:`json_records`;
there an output folder is known by its ``_shards/``).

Skipped files are said once per process, on stderr, when the listing ends (:func:`say_skipped`):
one line for a lone file, one line per folder and reason for several (img2dataset's 8,500 shards
leave 8,500 metadata tables and 8,500 ``_stats.json`` files: two lines, not 17,000).
"""

from __future__ import annotations

import json
import os
from collections.abc import Container
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.core.formats.containers import ACCEPTED, expand_braces
from curate.core.io import Location, as_path, is_url, text_of, url_fs


# Input arguments to files: local paths, folders, brace patterns and object-store URLs.
def remote_error(url: str, exc: BaseException) -> UserError:
    """A one-line UserError for a failed object-storage call: credentials, access or what the back end said."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    name = type(exc).__name__
    if "credential" in text.lower() or "NoCredentials" in name or "AccessDenied" in text or "Forbidden" in text:
        hint = "check the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws, GOOGLE_APPLICATION_CREDENTIALS)"
    else:
        endpoint = "STORAGE_EMULATOR_HOST" if url.startswith(("gs://", "gcs://")) else "AWS_ENDPOINT_URL"
        hint = f"check the URL, the endpoint ({endpoint}) and the network"
    return UserError(f"{url}: cannot read ({name}: {text}); {hint}")


def _remote(url: str, suffixes: Container[str]) -> list[Location]:
    try:
        fs, inner = url_fs(url)
        protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
        try:
            kind = fs.info(inner).get("type")  # unlike isdir/isfile (gcsfs), an unreachable endpoint raises here
        except FileNotFoundError:
            kind = None
        if kind == "directory":
            relative = sorted(p[len(inner):].lstrip("/") for p in fs.find(inner))
            base = f"{protocol}://{inner.rstrip('/')}/"
            found = _json_arrays(fs, base, [rel for rel in keep_listed(base, relative) if _wanted(rel, suffixes)])
            if not found:
                raise UserError(f"{url}: holds no {ACCEPTED} files")
            return [Location(p) for p in found]
        if kind == "file":
            return [Location(url)]
    except UserError:
        raise
    except ImportError as exc:
        raise UserError(f"{url}: no filesystem for this URL ({exc}); install curate[s3] or curate[gcs]") from None
    except Exception as exc:  # botocore/aiohttp raise many types for unreachable endpoints and bad keys
        raise remote_error(url, exc) from None
    raise UserError(f"{url}: no such object or prefix")


def _json_arrays(fs: Any, base: str, relative: list[str]) -> list[str]:
    """The URLs of a listed prefix's inputs, without its ``.json`` objects that are not arrays of records
    (img2dataset's ``00000_stats.json``...): their first bytes are read, all at once."""
    jsons = [rel for rel in relative if rel.lower().endswith(".json")]
    inner = base.split("://", 1)[1]
    heads = fs.cat_ranges([inner + rel for rel in jsons], [0] * len(jsons), [JSON_HEAD] * len(jsons)) if jsons else []
    # A failed range read (an empty object answers 416 on S3) comes back as an exception: left to the reader.
    refused = {rel for rel, head in zip(jsons, heads)
               if isinstance(head, bytes) and not json_records(base + rel, head)}
    return [base + rel for rel in relative if rel not in refused]


def _wanted(rel: str, suffixes: Container[str]) -> bool:
    parts = [p for p in rel.split("/") if p]
    return bool(parts) and not any(p.startswith(".") for p in parts) and record_suffix(parts[-1]) in suffixes


def list_inputs(item: str | os.PathLike[str], suffixes: Container[str]) -> list[Path | Location]:
    """The input files one argument stands for (a file, a folder, a brace pattern, a URL or URL prefix).

    Args:
        item: the argument as given.
        suffixes: lower-case suffixes of record formats (folders keep only those, hidden paths skipped).
    """
    try:
        return _list_inputs(item, suffixes)
    finally:
        say_skipped()  # one line per folder and reason, once the listing is done


def _list_inputs(item: str | os.PathLike[str], suffixes: Container[str]) -> list[Path | Location]:
    text = text_of(item)  # a path, a URL or a Location
    expanded = expand_braces(text)
    if len(expanded) > 1:
        return [f for one in expanded for f in _list_inputs(one, suffixes)]
    if is_url(text):
        return list(_remote(text, suffixes))
    path = as_path(text)
    assert isinstance(path, Path)
    if path.is_dir():
        found = records_files(path, suffixes)  # skips hidden files and JSON that is not records
        if not found:
            raise UserError(f"{path}: folder holds no {ACCEPTED} files of records")
        return list(found)
    if path.is_file():
        return [path]
    raise UserError(f"{path}: no such file or folder")


# Which files of an input folder are records.
_REPORTED: set[Path | str] = set()  # one line per skipped path (or URL) and process, however often it is listed
#: Skipped files not said yet: (folder, reason for several) → [(name, line for it alone)].
_PENDING: dict[tuple[str, str], list[tuple[str, str]]] = {}
_SHOWN_NAMES = 3  # names shown in a line for several files (the first ones, … the last one)
_TABLES = (".parquet", ".pq")


#: Bytes read from the start of a ``.json`` input to tell an array of records from an object.
JSON_HEAD = 4096


def json_records(path: Path | str, head: bytes) -> bool:
    """Whether a ``.json`` input whose first bytes are ``head`` holds records (an array, or nothing); if not,
    say once that ``path`` is skipped."""
    first = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if first in (b"[", b""):
        return True
    _skip(path, f"not records (a .json input holds an array of records; this file starts with "
                f"{first.decode(errors='replace')!r})", group="not records (a .json input holds an array of records)")
    return False


def _json_array(path: Path) -> bool:
    """Whether a local ``.json`` file holds records (:func:`json_records`)."""
    with open(path, "rb") as fh:
        return json_records(path, fh.read(JSON_HEAD))


_SHARDS = "shard markers, _shards/"


def output_folder(folder: Path) -> str | None:
    """What shows ``folder`` to be a curate output folder (for the line that skips it), or None."""
    if (folder / ".curate.lock").exists():
        return "a run's lock, .curate.lock"
    if (folder / "_shards").is_dir():
        return _SHARDS
    stats = folder / "stats.json"
    if stats.is_file():
        try:
            with open(stats, "rb") as fh:
                head = json.loads(fh.read(1 << 22))
        except (OSError, ValueError):
            return None
        if isinstance(head, dict) and isinstance(head.get("stage"), str) and "records_in" in head:
            return f"stats.json of curate {head['stage']}"
    return None


#: Suffixes of two parts (a gzipped tar), which ``Path.suffix`` would see as ``.gz``.
_DOUBLE = (".tar.gz",)


def record_suffix(name: str) -> str:
    """A file name's record suffix, lower-case: ``.tar.gz`` for a gzipped tar, else its last suffix."""
    lower = name.lower()
    return next((d for d in _DOUBLE if lower.endswith(d)), os.path.splitext(lower)[1])


def records_files(folder: Path, suffixes: Container[str]) -> list[Path]:
    """The record files under ``folder`` (sorted), skipping hidden paths, JSON that is not an array and the
    curate output folders below it (see the module docstring).

    Args:
        folder: An input folder.
        suffixes: Lower-case file suffixes of record formats (``.jsonl``, ``.parquet``, ...).
    """
    found = []
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        keep = []
        for name in sorted(dirs):
            if name.startswith("."):
                continue
            why = output_folder(here / name)
            if why is None:
                keep.append(name)
            else:
                _skip_output(here / name, why)
        dirs[:] = keep  # os.walk descends only into these
        present = {name.lower() for name in files}
        for name in files:
            path = here / name
            if name.startswith(".") or record_suffix(name) not in suffixes or not path.is_file():
                continue
            if path.suffix.lower() == ".json" and not _json_array(path):
                continue
            if _tar_table(name, present, path):
                continue
            found.append(path)
    return sorted(found)


def _skip_output(folder: Path | str, why: str) -> None:
    _skip(folder, f"a curate output folder ({why}), not input records", "/")


def _tar_table(name: str, present: Container[str], shown: Path | str) -> bool:
    """Whether ``name`` (a path relative to a listing) is a Parquet table beside a tar of the same stem, the
    tar's metadata table (``present``: the listing's lower-cased names); if so, say once that ``shown`` is
    skipped."""
    stem, dot, suffix = name.rpartition(".")
    if not dot or "." + suffix.lower() not in _TABLES or (stem + ".tar").lower() not in present:
        return False
    _skip(shown, f"the metadata table of {stem.rsplit('/', 1)[-1]}.tar beside it (img2dataset's layout); "
                 "the records are read from the tar",
          group="the metadata tables of the tars of the same name beside them (img2dataset's layout); "
                "the records are read from the tars")
    return True


def _skip(path: Path | str, why: str, tail: str = "", group: str | None = None) -> None:
    """Note once per process that ``path`` (a local path or a URL) is skipped, and why (``tail``: ``/`` after a
    folder's name; ``group``: the reason in a line for several files of one folder), for :func:`say_skipped`."""
    key = path.resolve() if isinstance(path, Path) else path
    if key in _REPORTED:
        return
    _REPORTED.add(key)
    text = str(path)
    folder, _, name = text.rpartition("/") if "/" in text else ("", "", text)
    _PENDING.setdefault((folder, group or f"{name}{tail}: {why}"), []).append((name, f"skipped {path}{tail}: {why}"))


def say_skipped() -> None:
    """Say on stderr the files skipped since the last call: one line per file alone, one per folder and reason for
    several (their count, the first names and the last); nothing with ``--quiet``."""
    from curate.core.progress import note

    for (folder, group), files in sorted(_PENDING.items()):
        if len(files) == 1:
            note(files[0][1])
            continue
        names = sorted(name for name, _ in files)
        shown = names if len(names) <= _SHOWN_NAMES + 1 else [*names[:_SHOWN_NAMES], "…", names[-1]]
        note(f"skipped {len(names):,} files in {folder or '.'}/ ({', '.join(shown)}): {group}")
    _PENDING.clear()


def keep_listed(root: str, relative: list[str]) -> list[str]:
    """The objects of a listed prefix that are inputs, by the rules of local folders (the module docstring):
    those below a curate output folder (one holding ``_shards/``; a bucket keeps no lock) and Parquet
    tables beside a tar of the same stem are skipped (said by :func:`say_skipped`). ``relative``: every object's path
    under ``root``, ``/``-separated, any suffix; the kept ones come back in the same order."""
    present = {rel.lower() for rel in relative}
    outputs = {rel[:rel.index("/_shards/")] for rel in relative if "/_shards/" in rel}  # never the root itself
    base = root.rstrip("/") + "/"
    kept = []
    for rel in relative:
        parts = rel.split("/")
        folder = next((f for f in ("/".join(parts[:i]) for i in range(1, len(parts))) if f in outputs), None)
        if folder is not None:
            _skip_output(base + folder, _SHARDS)
        elif not _tar_table(rel, present, base + rel):
            kept.append(rel)
    return kept
