"""Transfers between a local staging folder and the bucket prefix it stands for (``--out s3://...``, ``gs://...``).

:mod:`curate.core.remote` runs a stage in a staging folder on this machine for an output URL; this
module moves the bytes, and moves as few as it can, and keeps the local disk small:

* :func:`pull_control`: at the start of a run only the control files come down (every shard's
  marker and the stage settings under ``_shards/``, ``history.json``, and the answer journals of
  shards not complete yet); local control files the bucket does not hold are removed (the bucket is
  the truth: a shard is done when its marker is *there*). Finished shards' data stays in the bucket;
* :func:`push_shard`: a finished shard's outputs, then its marker, once, from the worker that ran
  it; then :func:`drop_local` deletes its files from the local disk, except those this machine reads
  again (the driver's ``ShardTask.driver_reads``, a later step's ``ShardTask.kept_local``).
  :mod:`curate.core.uploads` does the same in the background while the worker makes its next shard;
* :func:`pull_listed`: after a stage, the files of finished shards that the stage's driver reads,
  for shards that ran elsewhere or before; :func:`ensure_local` / :func:`fetch`: before or while
  shards run, the files of earlier steps they read (``ShardTask.reads_out``), on whichever node runs
  them; :func:`push_missing`: before shards run, the driver's own files they read;
* :func:`push`: at the end, whatever the bucket lacks or holds with other bytes (outputs, then
  markers, then ``stats.json``), never what is already there.

A staging folder names its URL in a hidden file (:mod:`curate.core.staging`), so every process on the machine (worker
processes, Ray actors) knows where its files go: :func:`url_of`. Every download goes to a hidden
temporary name beside its destination and is renamed into place, so a killed transfer never leaves
a truncated file under a final name.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.core.io import url_fs
from curate.core.lock import pid_alive
from curate.core.staging import url_of

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
    """The objects under ``inner/sub`` (fresh, not from a cache): path relative to ``inner`` → info."""
    root = f"{inner}/{sub}".rstrip("/")
    fs.invalidate_cache(root)
    try:
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
        try:
            remote[rel] = fs.info(f"{inner}/{rel}")
        except FileNotFoundError:
            pass
    for path in [*(local / SHARDS).rglob("*.json"), *(local / rel for rel in CONTROL_TOP)]:
        rel = path.relative_to(local).as_posix()
        if path.is_file() and not path.name.startswith(".") and rel not in remote:
            path.unlink()  # a marker (or settings) the bucket does not hold: that shard is not done there
    drop_partial(local)  # downloads a killed process left behind
    n = sum(_refresh(fs, inner, rel, info, local) for rel, info in sorted(remote.items()))
    # answers journaled by shards that are not complete yet: a rerun asks only what they lack
    return n + sum(_refresh(fs, inner, rel, info, local) for rel, info in sorted(listing(fs, inner, JOURNAL).items())
                   if _unfinished(local, rel))


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


def ensure_local(out: Path, patterns: Sequence[str]) -> int:
    """Fetch the bucket's files matching ``patterns`` that a staging folder lacks; return how many came."""
    url = url_of(out)
    if url is None or not patterns:
        return 0
    fs, inner = remote_fs(url)
    tops = {p.split("/", 1)[0] if "/" in p and not any(c in p.split("/", 1)[0] for c in "*?[") else "" for p in patterns}
    return sum(_refresh(fs, inner, rel, info, out) for top in sorted(tops)
               for rel, info in sorted(listing(fs, inner, top).items()) if _matches(rel, patterns))


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


def push_missing(out: Path, patterns: Sequence[str]) -> int:
    """Upload the files of a staging folder matching ``patterns`` that its bucket lacks or holds at another size
    (what the driver wrote for the shards: nodes that share nothing but the bucket fetch them); return how many."""
    url = url_of(out)
    if url is None or not patterns:
        return 0
    mine = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    mine = [rel for rel in mine if _matches(rel, patterns) and not _hidden(rel)]
    fs, inner = remote_fs(url)
    there = _infos(fs, inner, mine)
    sent = [rel for rel in mine if rel not in there or _size(there[rel]) != (out / rel).stat().st_size]
    push_files(out, sent)
    return len(sent)


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
    url = url_of(out)
    if url is None:
        return
    fs, inner = remote_fs(url)
    if len(files) > 1:
        fs.put([str(out / rel) for rel in files], [f"{inner}/{rel}" for rel in files])
    elif files:
        fs.put_file(str(out / files[0]), f"{inner}/{files[0]}")
    fs.put_file(str(marker), f"{inner}/{marker.relative_to(out).as_posix()}")


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
    """Upload what the bucket lacks or holds with other bytes: outputs, then markers, then ``stats.json``.

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

    n = 0
    for rel in sorted(files, key=lambda r: (rank(r), r)):
        info = remote.get(rel)
        if info is not None and _size(info) == (local / rel).stat().st_size and \
                (rel in listed or _md5_matches(local / rel, info)):
            continue  # the same object is there already
        fs.put_file(str(local / rel), f"{inner}/{rel}")
        n += 1
    return n
