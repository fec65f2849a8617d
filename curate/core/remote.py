"""Locations in object storage (``s3://bucket/prefix``, ``gs://...``), resolved where data is read or written.

A config holds its paths as :class:`~curate.core.location.Location` values; a stage resolves them here:

* :func:`writing`: the folder a run writes ``--out`` through. For a URL it checks the bucket is
  reachable (one line naming the URL, before any work), then works in a staging folder on this
  machine (``$CURATE_CACHE/remote/<hash>``) into which only the control files come down (shard
  markers, stage settings, ``history.json``): a rerun, on this machine or another, resumes from
  the shards whose **markers** are in the bucket without downloading their data. Each finished
  shard's outputs, then its marker, go to the bucket from whichever worker or node ran it, and leave
  the local disk (:func:`curate.core.shards.execute_shard`), except the few files this machine reads
  again; at the end what the bucket lacks is uploaded (the driver's merged outputs, then the markers,
  then ``stats.json``) and the staging folder is emptied. Local disk during a run therefore holds
  the shards in flight and the driver's own files (its per-shard summaries, plans, reports), never
  the run's data. The shard contract holds without atomic rename: outputs first, the marker last,
  and readers trust markers and ``stats.json`` only;
* :func:`local_file`: an input file (``--vocab``, ``--lengths``, ``--concepts``...) as a local file:
  itself, or a copy in the cache, fetched again only when the object's size or version changed;
* :func:`reading`: a few files of a folder in a bucket (``verify`` and ``report`` of a pack in a bucket),
  in a temporary local folder removed afterwards; the bulk (the tars) is read in place.

Credentials and endpoints come from each filesystem's usual environment and config: for S3
(``curate[s3]``) ``AWS_*`` variables, ``~/.aws``, ``AWS_ENDPOINT_URL`` / ``FSSPEC_S3_ENDPOINT_URL``;
for GCS (``curate[gcs]``) ``GOOGLE_APPLICATION_CREDENTIALS`` or gcloud's login,
``STORAGE_EMULATOR_HOST`` for an emulator, ``FSSPEC_GS_TOKEN=anon`` for anonymous access.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from curate.core.errors import UserError
from curate.core.io import curate_cache, input_stamp
from curate.core.location import Location
from curate.core.progress import note
from curate.core.remote_sync import get_file, pull, pull_control, push, remote_fs
from curate.core.staging import URL_FILE, staging, staging_folder, url_of

__all__ = ["writing", "local_file", "reading", "upload", "staging", "check_reachable", "url_of"]

#: Output URLs this process is writing, and their staging folders (nested stages of one verb share one).
_OPEN: dict[str, Path] = {}


def check_reachable(url: str) -> None:
    """Stop with one line naming ``url`` when its bucket cannot be reached or read."""
    from curate.core.formats.listing import remote_error

    fs, inner = remote_fs(url)
    bucket = inner.split("/", 1)[0]
    try:
        fs.ls(bucket, refresh=True)
    except FileNotFoundError:
        raise UserError(f"{url}: bucket {bucket!r} does not exist (or these credentials cannot see it); "
                        "create it first") from None
    except Exception as exc:  # noqa: BLE001 - botocore/aiohttp raise many types
        raise remote_error(url, exc) from None


@contextmanager
def writing(out: str | os.PathLike[str] | Location) -> Iterator[Path]:
    """The local folder a run writes ``out`` through: ``out`` itself, or a staging folder for a URL (module doc).

    Re-entrant: a stage that runs inside another one's ``writing`` of the same URL (``balance`` → ``embed``)
    shares its staging folder, and the outermost block uploads and empties it.
    """
    loc = Location(out)
    if not loc.is_remote:
        yield loc.path
        return
    url = loc.url
    if url in _OPEN:
        yield _OPEN[url]
        return
    check_reachable(url)
    local = staging_folder(url)
    pull_control(url, local)
    _OPEN[url] = local
    try:
        yield local
        push(url, local)
        note(f"outputs in {url}")
    finally:
        del _OPEN[url]
    _empty(local)


def _empty(local: Path) -> None:
    """Remove a staging folder's files once the bucket holds them (its lock file goes with the lock)."""
    from curate.core.lock import LOCK_NAME

    for child in local.iterdir():
        if child.name in (LOCK_NAME, URL_FILE):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def local_file(path: str | os.PathLike[str] | Location | None, flag: str | None = None) -> Path | None:
    """An input file as a local file: itself, or a copy of the object in the cache (None stays None).

    A copy is fetched again only when the object's size or version (ETag, generation) changed; a folder
    (a prefix) is copied whole. ``flag`` names the setting in the one-line error for a missing object.
    """
    if path is None:
        return None
    loc = Location(path)
    if not loc.is_remote:
        return loc.path
    url = loc.url
    check_reachable(url)
    fs, inner = remote_fs(url)
    try:
        info = fs.info(inner)
    except FileNotFoundError:
        raise UserError(f"{flag + ' ' if flag else ''}{url}: no such object") from None
    dest = curate_cache("inputs") / staging(url).name / loc.name
    if info.get("type") == "directory":
        pull(url, dest)
        return dest
    stamp = dest.with_name(f".{dest.name}.stamp")
    version = input_stamp(url)
    if not (dest.is_file() and stamp.is_file() and stamp.read_text(encoding="utf-8") == version):
        get_file(fs, inner, dest)
        stamp.write_text(version, encoding="utf-8")
    return dest


@contextmanager
def reading(folder: str | os.PathLike[str] | Location, include: Sequence[str]) -> Iterator[Path]:
    """A folder's files matching ``include`` (glob patterns of relative paths) as a local folder.

    A local folder is used as it is; for a prefix in a bucket the files are copied into a temporary
    folder of the cache, removed when the block ends (the rest, e.g. a pack's tars, is read in place).
    """
    loc = Location(folder)
    if not loc.is_remote:
        yield loc.path
        return
    url = loc.url
    check_reachable(url)
    top = curate_cache("reading") / f"{staging(url).name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    local = top / loc.name  # named as the prefix is (what a report calls it)
    local.mkdir(parents=True)
    try:
        pull(url, local, include=include)
        yield local
    finally:
        shutil.rmtree(top, ignore_errors=True)


def upload(local: Path, url: str) -> int:
    """Put the files of the local folder ``local`` at ``url`` (a prefix), replacing what was there; return how many."""
    fs, inner = remote_fs(url)
    fs.invalidate_cache(inner)
    if fs.exists(inner):
        fs.rm(inner, recursive=True)
    files = sorted(p for p in local.rglob("*") if p.is_file())
    for path in files:
        fs.put_file(str(path), f"{inner}/{path.relative_to(local).as_posix()}")
    return len(files)
