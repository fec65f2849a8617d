"""Buckets (``s3://bucket/prefix``, ``gs://...``): their filesystems, the staging folder a run writes through,
the transfers between the two, and the uploads of finished shards in the background.

A config holds its paths as :class:`~curate.core.io.Location` values; a stage resolves them here:

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

import base64
import fnmatch
import hashlib
import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.core.io import (LOCK_NAME, URL_FILE, Location, curate_cache, input_stamp, pid_alive, staging,
                            staging_folder, url_fs, url_of)
from curate.core.progress import note

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


# ---------------------------------------------------------------------------
# Transfers between a staging folder and its bucket
# ---------------------------------------------------------------------------
# Transfers between a local staging folder and the bucket prefix it stands for (``--out s3://...``, ``gs://...``).
#
# :func:`writing` runs a stage in a staging folder on this machine for an output URL; this
# module moves the bytes, and moves as few as it can, and keeps the local disk small:
#
# * :func:`pull_control`: at the start of a run only the control files come down (every shard's
#   marker and the stage settings under ``_shards/``, ``history.json``, and the answer journals of
#   shards not complete yet); local control files the bucket does not hold are removed (the bucket is
#   the truth: a shard is done when its marker is *there*). Finished shards' data stays in the bucket;
# * :func:`push_shard`: a finished shard's outputs, then its marker, once, from the worker that ran
#   it; then :func:`drop_local` deletes its files from the local disk, except those this machine reads
#   again (the driver's ``ShardTask.driver_reads``, a later step's ``ShardTask.kept_local``).
#   :func:`push_shard_later` (below) does the same in the background while the worker makes its next shard;
# * :func:`pull_listed`: after a stage, the files of finished shards that the stage's driver reads,
#   for shards that ran elsewhere or before; :func:`ensure_local` / :func:`fetch`: before or while
#   shards run, the files of earlier steps they read (``ShardTask.reads_out``), on whichever node runs
#   them; :func:`share_reads`: before shards run, the driver's own files they read, and those of earlier runs;
# * :func:`push`: at the end, whatever the bucket lacks or holds with other bytes (outputs, then
#   markers, then ``stats.json``), never what is already there.
#
# A staging folder names its URL in a hidden file (:mod:`curate.core.io`), so every process on the machine (worker
# processes, Ray actors) knows where its files go: :func:`url_of`. Every download goes to a hidden
# temporary name beside its destination and is renamed into place, so a killed transfer never leaves
# a truncated file under a final name.

SKIP = (".tmp/", ".curate.lock")
JOURNAL = "_journal"
SHARDS = "_shards"
#: Top-level files a run reads back from its own folder (a stage's history of invocations).
CONTROL_TOP = ("history.json",)


def remote_fs(url: str) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` and its in-filesystem path (no trailing slash); one-line errors."""
    from curate.core.formats.listing import remote_error

    try:
        fs, inner = url_fs(url)
    except ImportError as exc:
        raise UserError(f"{url}: no filesystem for this URL ({exc}); install curate[s3] or curate[gcs]") from None
    except Exception as exc:  # noqa: BLE001 - bad URLs raise many types
        raise remote_error(url, exc) from None
    return fs, inner.rstrip("/")


def listing(fs: Any, inner: str, sub: str = "") -> dict[str, dict[str, Any]]:
    """The objects under ``inner/sub`` (fresh, not from a cache): path relative to ``inner`` → info.

    On S3 a folder is listed by its key prefix, one request (a listing by path asks again for the path itself
    when the folder is empty, two more requests)."""
    root = f"{inner}/{sub}".rstrip("/")
    fs.invalidate_cache(root)
    try:
        if sub and type(fs).__name__ == "S3FileSystem":
            found = fs.find(inner, prefix=sub.rstrip("/") + "/", detail=True)
        else:
            found = fs.find(root, detail=True)
    except FileNotFoundError:
        return {}
    return {path[len(inner) + 1:]: info for path, info in found.items()
            if path.startswith(inner + "/") and info.get("type") != "directory"}


def get_file(fs: Any, remote: str, dest: Path) -> None:
    """Download one object to ``dest`` through a hidden temporary name and a rename.

    The filesystem's cached listings are dropped for it first: another process (a worker, a node) may have
    written it since this one listed its folder.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part")
    fs.invalidate_cache(remote)
    try:
        fs.get_file(remote, str(tmp))
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _size(info: dict[str, Any]) -> int:
    return int(info.get("size") or 0)


def _refresh(fs: Any, inner: str, rel: str, info: dict[str, Any], local: Path) -> int:
    """Download ``rel`` unless ``local`` already holds a file of the bucket's size; 1 if it came, else 0."""
    dest = local / rel
    if dest.is_file() and dest.stat().st_size == _size(info):
        return 0
    get_file(fs, f"{inner}/{rel}", dest)
    return 1


def _is_marker(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 3 and parts[0] == SHARDS and parts[2].endswith(".json") and parts[2][:1].isdigit()


def _is_control(rel: str) -> bool:
    return (rel.startswith(SHARDS + "/") and rel.endswith(".json")) or rel in CONTROL_TOP


def _unfinished(local: Path, journal: str) -> bool:
    """Whether the shard of a journal (``_journal/<stage>/<shard>.jsonl``) has no complete marker in ``local``."""
    parts = journal.split("/")
    if len(parts) != 3:
        return False
    marker = local / SHARDS / parts[1] / (parts[2].rsplit(".", 1)[0] + ".json")
    try:
        content = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return bool(content.get("stats", {}).get("extra", {}).get("unanswered", 0))


def drop_partial(local: Path) -> None:
    """Remove the temporary files of downloads whose process died (``.<name>.<pid>.<hex>.part``)."""
    for part in local.rglob(".*.part"):
        pid = part.name.rsplit(".", 3)[-3] if part.name.count(".") >= 4 else ""
        if not (pid.isdigit() and pid_alive(int(pid))):
            part.unlink(missing_ok=True)


def pull(url: str, local: Path, *, include: Sequence[str] | None = None, prune: bool = False) -> int:
    """Copy the objects under ``url`` that ``local`` lacks (or holds at another size); return how many.

    ``include``: glob patterns of the relative paths to copy (None: all). With ``prune`` files of
    ``local`` the bucket does not hold (among those included) are removed, so ``local`` is an exact
    mirror of them (what ``verify`` reads must be what the bucket holds).
    """
    fs, inner = remote_fs(url)
    remote = {rel: info for rel, info in listing(fs, inner).items()
              if not rel.startswith(SKIP) and (include is None or _matches(rel, include))}
    drop_partial(local)
    if prune:
        for path in [p for p in local.rglob("*") if p.is_file()]:
            rel = path.relative_to(local).as_posix()
            if rel not in remote and not rel.startswith(SKIP) and not any(x.startswith(".") for x in rel.split("/")):
                path.unlink()
    return sum(_refresh(fs, inner, rel, info, local) for rel, info in sorted(remote.items()))


def pull_control(url: str, local: Path) -> int:
    """Bring the control files of ``url`` into ``local`` and drop local ones the bucket lacks; return how many came."""
    fs, inner = remote_fs(url)
    remote = {rel: info for rel, info in listing(fs, inner, SHARDS).items() if _is_control(rel)}
    for rel in CONTROL_TOP:
        remote.update(_info_if_there(fs, inner, rel))
    for path in [*(local / SHARDS).rglob("*.json"), *(local / rel for rel in CONTROL_TOP)]:
        rel = path.relative_to(local).as_posix()
        if path.is_file() and not path.name.startswith(".") and rel not in remote:
            path.unlink()  # a marker (or settings) the bucket does not hold: that shard is not done there
    drop_partial(local)  # downloads a killed process left behind
    n = sum(_refresh(fs, inner, rel, info, local) for rel, info in sorted(remote.items()))
    # answers journaled by shards that are not complete yet: a rerun asks only what they lack
    return n + sum(_refresh(fs, inner, rel, info, local) for rel, info in sorted(listing(fs, inner, JOURNAL).items())
                   if _unfinished(local, rel))


def _info_if_there(fs: Any, inner: str, rel: str) -> dict[str, dict[str, Any]]:
    """``{rel: info}`` of the object ``inner/rel``, or ``{}`` when there is none (on S3 one listing by its key, not a
    HEAD that a missing object follows with a listing)."""
    if type(fs).__name__ == "S3FileSystem":
        fs.invalidate_cache(f"{inner}/{rel}")
        found = fs.find(inner, prefix=rel, detail=True)
        return {rel: info for path, info in found.items()
                if path == f"{inner}/{rel}" and info.get("type") != "directory"}
    try:
        return {rel: fs.info(f"{inner}/{rel}")}
    except FileNotFoundError:
        return {}


def _matches(rel: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(rel, p) for p in patterns)


def _no_rejects(marker: dict[str, Any]) -> bool:
    """Whether a shard dropped and errored nothing (its rejects file is empty: no need to fetch it)."""
    stats = marker.get("stats", {})
    return not any(stats.get("dropped", {1: 1}).values()) and not any(stats.get("errored", {1: 1}).values())


def pull_listed(out: Path, markers: Sequence[dict[str, Any]], patterns: Sequence[str] | None = None) -> int:
    """Fetch files listed by ``markers`` that a staging folder lacks: those matching ``patterns``
    (None: all) and every file under ``_shards/`` (the shards' rejects, unless a shard rejected
    nothing); return how many came."""
    url = url_of(out)
    if url is None:
        return 0
    missing = [rel for m in markers for rel in m.get("files", [])
               if (patterns is None or rel.startswith(SHARDS + "/") or _matches(rel, patterns))
               and not (rel.endswith(".rejects.parquet") and _no_rejects(m)) and not (out / rel).exists()]
    if missing:
        fs, inner = remote_fs(url)
        for rel in missing:
            get_file(fs, f"{inner}/{rel}", out / rel)
    return len(missing)


def _listed(fs: Any, inner: str, patterns: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The bucket's objects matching ``patterns`` (relative path → info): one listing per folder the patterns name
    (the whole prefix for a pattern whose first component is a glob)."""
    tops = {p.split("/", 1)[0] if "/" in p and not any(c in p.split("/", 1)[0] for c in "*?[") else ""
            for p in patterns}
    return {rel: info for top in sorted(tops) for rel, info in listing(fs, inner, top).items()
            if _matches(rel, patterns)}


def ensure_local(out: Path, patterns: Sequence[str]) -> int:
    """Fetch the bucket's files matching ``patterns`` that a staging folder lacks; return how many came."""
    url = url_of(out)
    if url is None or not patterns:
        return 0
    fs, inner = remote_fs(url)
    return sum(_refresh(fs, inner, rel, info, out) for rel, info in sorted(_listed(fs, inner, patterns).items()))


def share_reads(out: Path, patterns: Sequence[str]) -> tuple[int, int]:
    """Before shards run, the files matching ``patterns`` that they read, on both sides of a staging folder: upload
    those of the folder that its bucket lacks or holds at another size (what the driver wrote for the shards: nodes
    that share nothing but the bucket fetch them), then fetch those of the bucket the folder lacks (an earlier run's,
    :func:`ensure_local`), from one listing; returns (uploaded, fetched). A no-op for an ordinary folder."""
    url = url_of(out)
    if url is None or not patterns:
        return 0, 0
    fs, inner = remote_fs(url)
    there = _listed(fs, inner, patterns)
    mine = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    mine = [rel for rel in mine if _matches(rel, patterns) and not _hidden(rel)]
    sent = [rel for rel in mine if rel not in there or _size(there[rel]) != (out / rel).stat().st_size]
    push_outputs(out, sent)
    return len(sent), sum(_refresh(fs, inner, rel, info, out) for rel, info in sorted(there.items()) if rel not in sent)


def fetch(out: Path, rel: str) -> Path:
    """``out / rel``, downloaded first when ``out`` is a staging folder that lacks it (the file of an earlier step
    a shard reads on a node that did not write it)."""
    dest = out / rel
    url = url_of(out)
    if url is not None and not dest.exists():
        fs, inner = remote_fs(url)
        try:
            get_file(fs, f"{inner}/{rel}", dest)
        except FileNotFoundError:
            raise UserError(f"{url}/{rel}: missing in the bucket; was it deleted while the run went on?") from None
    return dest


def fetch_marker(out: Path, rel: str) -> None:
    """Bring one marker (``_shards/<stage>/<shard>.json``) a worker pushed into a staging folder that lacks it."""
    fetch(out, rel)


def _each_remote(out: Path, files: Sequence[str]) -> Iterator[tuple[Any, str, str]]:
    """``(filesystem, remote path, relative path)`` of each file of a staging folder (none for an ordinary folder)."""
    url = url_of(out)
    if url is None:
        return
    fs, inner = remote_fs(url)
    for rel in files:
        yield fs, f"{inner}/{rel}", rel


def push_files(out: Path, files: Sequence[str]) -> None:
    """Upload files of a staging folder, in the order given (no-op for an ordinary folder)."""
    for fs, remote, rel in _each_remote(out, files):
        fs.put_file(str(out / rel), remote)


def drop_files(out: Path, files: Sequence[str]) -> None:
    """Delete files of a staging folder's bucket that the run no longer needs (no-op for an ordinary folder)."""
    for fs, remote, _ in _each_remote(out, files):
        if fs.exists(remote):
            fs.rm_file(remote)


def drop_prefix(out: Path) -> None:
    """Delete every object under the URL a staging folder (or a folder inside one) stands for (no-op elsewhere)."""
    url = url_of(out)
    if url is None:
        return
    fs, inner = remote_fs(url)
    fs.invalidate_cache(inner)
    if fs.exists(inner):
        fs.rm(inner, recursive=True)


def push_shard(out: Path, files: Sequence[str], marker: Path) -> None:
    """Upload one finished shard of a staging folder: its files (at once, on the filesystem's concurrent transfers),
    then its marker (no-op elsewhere)."""
    push_outputs(out, files)
    push_files(out, [marker.relative_to(out).as_posix()])


def push_outputs(out: Path, files: Sequence[str]) -> None:
    """Upload files of a staging folder at once, on the filesystem's concurrent transfers (no-op elsewhere); a
    shard's marker goes after them, on its own (:func:`push_shard`)."""
    url = url_of(out)
    if url is None or not files:
        return
    fs, inner = remote_fs(url)
    if len(files) > 1:
        fs.put([str(out / rel) for rel in files], [f"{inner}/{rel}" for rel in files])
    else:
        fs.put_file(str(out / files[0]), f"{inner}/{files[0]}")


def drop_local(out: Path, files: Sequence[str], keep: Sequence[str] | None) -> int:
    """Delete a pushed shard's files from a staging folder, except those matching ``keep`` (None: keep all) and
    its rejects under ``_shards/``; no-op for an ordinary folder. Returns how many were deleted."""
    if keep is None or url_of(out) is None:
        return 0
    gone = [rel for rel in files if not rel.startswith(SHARDS + "/") and not _matches(rel, keep)]
    for rel in gone:
        (out / rel).unlink(missing_ok=True)
    return len(gone)


def _md5_matches(path: Path, info: dict[str, Any]) -> bool:
    """Whether the object's checksum (S3 single-part ETag, GCS md5Hash) equals the local file's MD5."""
    etag = str(info.get("ETag") or info.get("etag") or "").strip('"')
    md5_b64 = info.get("md5Hash")
    if not md5_b64 and not (len(etag) == 32 and "-" not in etag):
        return False
    digest = hashlib.md5(path.read_bytes(), usedforsecurity=False).digest()
    return md5_b64 == base64.b64encode(digest).decode() if md5_b64 else etag == digest.hex()


def _hidden(rel: str) -> bool:
    return rel.startswith(SKIP) or any(part.startswith(".") for part in rel.split("/")) or \
        Path(rel).name.startswith("_lock")


#: Up to this many files, :func:`push` asks for each object's info instead of listing the whole prefix.
FEW = 64


def _infos(fs: Any, inner: str, files: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The bucket's info of each of ``files`` it holds (a listing of the prefix, or one request each when few)."""
    if len(files) > FEW:
        return listing(fs, inner)
    found = {}
    for rel in files:
        fs.invalidate_cache(f"{inner}/{rel}")  # its folder's listing too: an older find (ensure_local) cached it
        try:
            info = fs.info(f"{inner}/{rel}")
        except FileNotFoundError:
            continue
        if info.get("type") != "directory":
            found[rel] = info
    return found


def push(url: str, local: Path) -> int:
    """Upload what the bucket lacks or holds with other bytes: outputs, then markers, then ``stats.json`` (each
    group once the group before is in the bucket).

    Files a marker lists (shard outputs, written once) count as present at the same size; other files
    are compared by checksum, so a rerun uploads only what it changed. Returns how many were uploaded.
    """
    fs, inner = remote_fs(url)
    files = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    files = [f for f in files if not _hidden(f)]
    remote = _infos(fs, inner, files)
    listed: set[str] = set()
    for rel in files:
        if _is_marker(rel):
            try:
                listed.update(json.loads((local / rel).read_text(encoding="utf-8")).get("files", []))
            except (OSError, ValueError):
                pass

    def rank(rel: str) -> int:
        return 2 if rel == "stats.json" else 1 if _is_marker(rel) else 0

    sent = [rel for rel in files if not (
        (info := remote.get(rel)) is not None and _size(info) == (local / rel).stat().st_size
        and (rel in listed or _md5_matches(local / rel, info)))]  # else the same object is there already
    for step in (0, 1, 2):  # each step at once, on the filesystem's concurrent transfers, once the one before is in
        batch = sorted(rel for rel in sent if rank(rel) == step)
        if batch:
            fs.put([str(local / rel) for rel in batch], [f"{inner}/{rel}" for rel in batch])
    return len(sent)


# ---------------------------------------------------------------------------
# Uploads in the background
# ---------------------------------------------------------------------------
# Uploads of finished shards in the background, while the worker makes its next shard (``--out`` in a bucket).
#
# On this machine (the local executor, in-process or in worker processes) a finished shard of a staging
# folder goes to the bucket from a thread of the process that made it: its outputs (:func:`push_outputs`), which
# then leave the local disk (:func:`drop_local`), then its marker. The next shard's outputs start once the
# outputs before are in the bucket (that shard's marker may still be on its way: a marker waits for its own
# shard's outputs only), so the disk holds at most the outputs uploading and the shard being made, and an upload
# error is raised in the worker at its next shard. :func:`finish_uploads` waits for every upload, markers
# included (the executor, before a stage ends); a worker process waits for them when it exits. A process killed
# mid-upload leaves the bucket without that shard's marker: the shard is not done there, and a rerun makes it
# again (readers trust markers only). What a failed upload left on this machine's disk, the driver's final
# :func:`push` uploads, outputs before markers. A Ray node uploads its shard before it reports it (the driver
# fetches the marker at once): no background there.


class _Upload:
    """One shard's upload in a thread: its outputs, then (once they are in the bucket) its marker."""

    def __init__(self, outputs: Callable[[], None], marker: Callable[[], None]) -> None:
        self.outputs_done = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(outputs, marker), name="curate-upload", daemon=True)
        self.thread.start()

    def _run(self, outputs: Callable[[], None], marker: Callable[[], None]) -> None:
        try:
            outputs()
        except BaseException as exc:  # noqa: BLE001 - raised in the thread that waits; no marker without outputs
            self.error = exc
            return
        finally:
            self.outputs_done.set()
        try:
            marker()
        except BaseException as exc:  # noqa: BLE001
            self.error = exc


class _Uploads:
    """The background uploads of this process: a shard's outputs upload while the next shard is made; its marker may
    still be on its way while the next shard's outputs go (at most two shards in flight, one of them a marker)."""

    def __init__(self) -> None:
        self._jobs: list[_Upload] = []
        self._pid = 0  # the process that registered the wait at exit (a forked worker registers its own)

    def submit(self, outputs: Callable[[], None], marker: Callable[[], None]) -> None:
        """Wait until the shard uploading before has its outputs in the bucket, and every shard before it its marker
        (raising their errors), then start ``outputs`` and then ``marker`` in a thread."""
        if self._pid != os.getpid():  # a worker process uploads its last shard before it exits
            from multiprocessing import util

            self._jobs, self._pid = [], os.getpid()  # a forked copy of the driver's: not ours
            util.Finalize(None, self.wait, kwargs={"quiet": True}, exitpriority=20)
        if self._jobs:
            last = self._jobs[-1]
            last.outputs_done.wait()  # the disk holds at most the outputs uploading and the shard being made
            self._join(self._jobs[:-1] + ([last] if last.error is not None else []))
        self._jobs.append(_Upload(outputs, marker))

    def _join(self, jobs: list[_Upload]) -> None:
        """Wait for ``jobs`` to end and forget them; raise the first error among them."""
        for job in jobs:
            job.thread.join()
        self._jobs = [job for job in self._jobs if job not in jobs]
        error = next((job.error for job in jobs if job.error is not None), None)
        if error is not None:
            raise error

    def wait(self, *, quiet: bool = False) -> None:
        """Wait until every shard uploading is in the bucket, markers included; raise the first error (``quiet``: at
        exit, the driver's final :func:`push` uploads what a failed one left on this machine's disk)."""
        try:
            self._join(list(self._jobs))
        except BaseException:
            if not quiet:
                raise


_UPLOADS = _Uploads()
_WARMED: set[tuple[int, str]] = set()


def warm_up(out: Path) -> None:
    """Ready this process's client of the bucket a staging folder stands for, in a thread, while its first shard is
    made: importing the filesystem library and opening its session (about 0.3–0.5 s in a fresh worker) then
    overlap the work instead of delaying the first upload. Once per process and URL; a no-op elsewhere."""
    url = url_of(out)
    key = (os.getpid(), url or "")
    if url is None or key in _WARMED:
        return
    _WARMED.add(key)

    def connect() -> None:
        try:
            fs, inner = remote_fs(url)
            if hasattr(fs, "connect") and hasattr(fs, "set_session"):  # S3: the client, without a request
                fs.connect()
            else:
                fs.exists(f"{inner}/{SHARDS}")
        except Exception:  # noqa: BLE001 - only a head start: the upload itself reports what fails
            pass

    threading.Thread(target=connect, name="curate-connect", daemon=True).start()


def push_shard_later(out: Path, files: Sequence[str], marker: Path, driver_reads: Sequence[str] | None,
                     kept_local: Sequence[str] = ()) -> None:
    """Upload a finished shard's files, delete them from the disk but the task's ``driver_reads`` and ``kept_local``
    (``drop_local``; all kept when ``driver_reads`` is None), then upload its marker, in a thread of this process,
    while the caller goes on (a no-op for an ordinary folder). Waits first until the files of the shard uploading
    before are in the bucket (errors of earlier uploads are raised)."""
    if url_of(out) is None:
        return
    keep = None if driver_reads is None else (*driver_reads, *kept_local)

    def outputs() -> None:
        push_outputs(out, files)
        drop_local(out, files, keep)  # in the bucket: off the disk (the marker is a control file, it stays)

    _UPLOADS.submit(outputs, lambda: push_files(out, [marker.relative_to(out).as_posix()]))


def finish_uploads() -> None:
    """Wait for this process's background uploads (:func:`push_shard_later`) to reach the bucket, markers included;
    raise the first error."""
    _UPLOADS.wait()
