"""Uploads of finished shards in the background, while the worker makes its next shard (``--out`` in a bucket).

On this machine (the local executor, in-process or in worker processes) a finished shard of a staging
folder goes to the bucket from a thread of the process that made it: its outputs, then its marker
(:func:`curate.core.remote_sync.push_shard`), then its files leave the local disk
(:func:`curate.core.remote_sync.drop_local`). One shard uploads at a time per process, so the disk holds
at most the shard uploading and the one being made, and an upload error is raised in the worker at its
next shard. :func:`finish_uploads` waits for the upload (the executor, before a stage ends); a worker
process waits for it when it exits. A process killed mid-upload leaves the bucket without that shard's
marker: the shard is not done there, and a rerun makes it again (readers trust markers only). What a
failed upload left on this machine's disk, the driver's final :func:`curate.core.remote_sync.push`
uploads, outputs before markers. A Ray node uploads its shard before it reports it (the driver fetches
the marker at once): no background there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from curate.core.remote_sync import SHARDS, drop_local, push_shard, remote_fs
from curate.core.staging import url_of


class _Uploads:
    """The background upload of this process: one shard at a time, in a thread, while the next shard is made."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._pid = 0  # the process that registered the wait at exit (a forked worker registers its own)

    def submit(self, work: Callable[[], None]) -> None:
        """Wait for the shard uploading (raising its error), then start ``work`` in a thread."""
        if self._pid != os.getpid():  # a worker process uploads its last shard before it exits
            from multiprocessing import util

            self._thread, self._error, self._pid = None, None, os.getpid()  # a forked copy of the driver's: not ours
            util.Finalize(None, self.wait, kwargs={"quiet": True}, exitpriority=20)
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(work,), name="curate-upload", daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - raised in the thread that waits
            self._error = exc

    def wait(self, *, quiet: bool = False) -> None:
        """Wait until the shard uploading is in the bucket; raise its error (``quiet``: at exit, the driver's final
        :func:`~curate.core.remote_sync.push` uploads what a failed one left on this machine's disk)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None and not quiet:
            raise error


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
            fs.exists(f"{inner}/{SHARDS}")
        except Exception:  # noqa: BLE001 - only a head start: the upload itself reports what fails
            pass

    threading.Thread(target=connect, name="curate-connect", daemon=True).start()


def push_shard_later(out: Path, files: Sequence[str], marker: Path, driver_reads: Sequence[str] | None,
                     kept_local: Sequence[str] = ()) -> None:
    """Upload a finished shard (``push_shard``: its files, then its marker), then delete from the disk all but the
    task's ``driver_reads`` and ``kept_local`` (``drop_local``; all kept when ``driver_reads`` is None), in this
    process's upload thread, while the caller goes on (a no-op for an ordinary folder). Waits first for the shard
    uploading before (its error is raised)."""
    if url_of(out) is None:
        return
    keep = None if driver_reads is None else (*driver_reads, *kept_local)

    def work() -> None:
        push_shard(out, files, marker)
        drop_local(out, files, keep)

    _UPLOADS.submit(work)


def finish_uploads() -> None:
    """Wait for this process's background upload (:func:`push_shard_later`) to reach the bucket; raise its error."""
    _UPLOADS.wait()
