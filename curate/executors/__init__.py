"""Executors run a :class:`~curate.core.shards.ShardTask` over shards; the task never knows which one.

* ``local`` (default): in this process (``--workers 1``) or a pool of worker
  processes, each calling ``task.setup()`` once; a progress bar in the driver.
* ``ray``: Ray Data on a local or remote cluster (``curate.executors.ray``).

:func:`run_stage` is the one entry point stages use: it checks the run's
settings, cleans work folders of killed runs, runs the pending shards, and
merges the shard stats (and rejects) in shard order.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curate.core.errors import UserError

if TYPE_CHECKING:  # imported where shards run, so `curate VERB --help` (which reads EXECUTORS) loads no numpy/pyarrow
    from curate.core.shards import Shard, ShardTask
    from curate.core.stats import StageStats

EXECUTORS = ("local", "ray")


class Executor(ABC):
    """Runs shards of a task and returns their completion markers."""

    name = "executor"

    @property
    def in_process(self) -> bool:
        """Whether shards run one after the other in this process (then a caller may as well run work inline)."""
        return False

    @abstractmethod
    def run(self, task: ShardTask, shards: Sequence[Shard], out: Path, seed: int,
            desc: str) -> list[dict[str, Any]]:
        """Run ``shards`` (those without a marker, chosen by :func:`run_stage`); return their markers."""


def get_executor(name: str = "local", *, workers: int = 1, ray_address: str | None = None,
                 num_gpus: float = 0.0, concurrency: int | None = None, num_cpus: float | None = None) -> Executor:
    """Build an executor from CLI flags (``workers=0`` on Ray: as many actors as the cluster holds)."""
    if name == "local":
        from curate.executors.local import LocalExecutor
        return LocalExecutor(workers=workers)
    if name == "ray":
        try:
            from curate.executors.ray import RayExecutor
        except ImportError as exc:
            raise UserError(f"--executor ray needs Ray: pip install 'curate[ray]' ({exc})") from None
        return RayExecutor(address=ray_address, num_gpus=num_gpus, concurrency=concurrency or workers or None,
                           num_cpus=num_cpus)
    raise UserError(f"unknown executor {name!r}; use local or ray")


def run_stage(task: ShardTask, shards: Sequence[Shard], out: Path, *, executor: Executor | None = None,
              seed: int = 0, desc: str | None = None, settings: dict[str, Any] | None = None) -> StageStats:
    """Run ``task`` over ``shards`` into ``out`` and return the merged stats.

    Shards whose completion marker exists are not run again. ``settings`` (by
    default ``task.settings()``), the seed, the shard plan (:func:`plan_hash`:
    inputs and row ranges) and the reader's version (``READER_VERSION``) are recorded
    on the first run and must match on reruns, so a rerun with other inputs or another
    reader never reuses old shards. The run holds the lock on
    ``out`` (:func:`curate.core.io.out_lock`), so a second live run into it stops with one line.

    With ``out`` the staging folder of a bucket (:mod:`curate.core.remote`), the settings reach the
    bucket before any shard's marker, the files shards read (``task.reads_out``) are uploaded when the
    driver wrote them and fetched when this machine lacks them, before they run (nodes that share
    nothing but the bucket fetch them too), and of the finished shards' files only those the driver
    reads (``task.driver_reads``) and their rejects are fetched, once.
    """
    from curate.core.io import out_lock
    from curate.core.remote import finish_uploads, pull_listed, push_files, share_reads
    from curate.core.records import READER_VERSION
    from curate.core.shards import (SHARDS_DIR, TMP_DIR, WORKERS_GONE_WAIT, check_settings, clean_tmp,
                                     marker_path, merge_shards, plan_hash, read_marker)

    out = Path(out)
    with out_lock(out):  # one run per folder (curate.core.io.out_lock): a second one stops here with one line
        recorded = {"seed": seed, "plan": plan_hash(shards), "reader": READER_VERSION,
                    **(settings if settings is not None else task.settings())}
        check_settings(out, task.stage, recorded)
        clean_tmp(out, task.stage, wait=WORKERS_GONE_WAIT)  # workers of a killed run: their shard ends or they stop
        todo: list[Shard] = []
        markers: list[dict[str, Any]] = []
        for shard in shards:  # each marker read once
            content = read_marker(marker_path(out, task.stage, shard.id))
            if content is None:
                todo.append(shard)
            else:
                markers.append(content)
        if todo:
            push_files(out, [f"{SHARDS_DIR}/{task.stage}/settings.json"])  # a bucket: settings before any marker
            share_reads(out, task.reads_out)  # a bucket: what the driver wrote for the shards, for nodes that lack it
            executor = executor or get_executor("local")
            try:
                markers += executor.run(task, todo, out, seed, desc or task.stage)
            except BaseException:  # the workers are gone: their work folders go too (a full disk stays usable)
                clean_tmp(out, task.stage)
                with contextlib.suppress(OSError):
                    (out / TMP_DIR).rmdir()  # when no other stage works there
                raise
            finish_uploads()  # shards run here upload in the background: all in the bucket before the stage ends
            clean_tmp(out, task.stage)  # what workers of a killed run, spared above, left when they stopped
        pull_listed(out, markers, task.driver_reads)  # a bucket: what the driver reads of shards done elsewhere
        return merge_shards(out, task.stage, markers)


def pending(task: ShardTask, shards: Sequence[Shard], out: Path) -> list[Shard]:
    """Shards of ``task`` that have no completion marker in ``out``."""
    from curate.core.shards import is_complete, marker_path

    return [s for s in shards if not is_complete(marker_path(out, task.stage, s.id))]
