"""The Ray executor: the same shard contract on a Ray cluster, through Ray Data.

How a stage runs here:

* the driver lists the pending shards (no completion marker yet) and makes one
  Ray Data row per shard (``ray.data.from_items``, one block per shard, so a
  shard is never merged with another or split);
* ``map_batches`` with a callable class runs them on an actor pool
  (``ActorPoolStrategy(size=concurrency)``, one shard in flight per actor,
  ``batch_size=1``); each actor unpickles the task and calls ``task.setup()``
  once (the model, processor or index is loaded once per actor), then runs
  shards through :func:`curate.core.shards.execute_shard`: private temp folder,
  rename into place, marker written last, file names chosen by the task (never
  Ray's). A shard that Ray retries after a lost actor is simply written again;
* the driver iterates over the results as they stream back (one small marker
  dict per shard), advances a progress bar, and returns every marker. The order
  in which shards finish does not matter: markers are merged in shard order.
  The input is a materialised list and the actor pool the only operator, so
  Ray has nothing to fuse it with; ``batch_size=1`` on one-row blocks means one
  call per shard.

Errors raised by a task (e.g. :class:`~curate.core.errors.UserError`) are caught in
the actor and re-raised on the driver as the same exception, so the CLI prints
the same one-line message as with the local executor.

Every node must see the code (same ``curate`` install) and the files at the same
paths (inputs, models, OUT: shared storage), or, with the inputs and OUT in a bucket,
nothing but the bucket: an actor is given OUT's URL and works in its own node's staging
folder for it (:mod:`curate.core.remote`), fetching what its shards read from the bucket.
Relative paths are resolved against the driver's working directory, which actors enter
when it exists.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import socket
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from curate.core.threads import CPUS_VAR, cap_threads, task_threads
from curate.core import validate as v
from curate.core.errors import UserError
from curate.executors import Executor
from curate.core.progress import StageProgress, console
from curate.core.io import is_url, staging_folder, url_of
from curate.core.remote import ensure_local, fetch_marker
from curate.core.shards import Shard, ShardTask, execute_shard, marker_path
from curate.core.stats import engine_used

#: Environment variables forwarded to the actors (offline switches, model caches), when set on the driver.
#: ``CURATE_CACHE`` is not: each node keeps its own (its staging folders for outputs in a bucket).
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "HF_HUB_CACHE",
                 "TORCH_HOME", "TOKENIZERS_PARALLELISM",
                 # object storage endpoints; credentials come from each node's own config
                 "AWS_ENDPOINT_URL", "FSSPEC_S3_ENDPOINT_URL", "AWS_DEFAULT_REGION",
                 "STORAGE_EMULATOR_HOST", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT")


class _ShardRunner:
    """Ray Data callable class: one per actor; runs shards under the shard contract.

    Args:
        task_blob: the pickled :class:`ShardTask` (heavy state excluded by its ``__getstate__``).
        out: the output folder's URL (in a bucket: this node works in its own staging folder for it), or its
            absolute path (shared storage).
        seed: the run seed.
        cwd: the driver's working directory (entered if it exists here).
        threads: torch/OpenMP threads of the actor (its reserved CPUs by default; None leaves them).
        cpus: CPUs the actor reserved (told to process pools inside it through ``CURATE_WORKER_CPUS``).
    """

    def __init__(self, task_blob: bytes, out: str, seed: int, cwd: str, threads: int | None = 1,
                 cpus: float = 1.0) -> None:
        from ray import cloudpickle

        cap_threads(threads)  # before the task (and torch) load: the actor uses the CPUs it reserved
        os.environ[CPUS_VAR] = str(max(1, int(cpus)))  # process pools inside the actor (e.g. math verifiers)

        self.born = time.time()
        self.out, self.seed = staging_folder(out) if is_url(out) else Path(out), seed
        self.error: bytes | None = None
        if os.path.isdir(cwd):
            os.chdir(cwd)
        try:
            self.task: ShardTask = cloudpickle.loads(task_blob)
            ensure_local(self.out, self.task.reads_out)  # --out in a bucket: this node's mirror gets what shards read
            self.task.setup()
        except Exception as exc:  # reported with the first shard, re-raised on the driver
            self.error = _pack_error(exc)
        self.ready = time.time()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run each shard of the batch (one with ``batch_size=1``); return its marker or its error."""
        results = []
        for blob in batch["shard"]:
            if self.error is not None:
                results.append(self.error)
                continue
            start = time.time()
            try:
                shard: Shard = pickle.loads(blob)
                marker = execute_shard(self.task, shard, self.out, self.seed, away=True)
                results.append(pickle.dumps({"marker": marker, "actor": f"{socket.gethostname()}:{os.getpid()}",
                                             "born": self.born, "ready": self.ready, "start": start,
                                             "end": time.time()}))
            except Exception as exc:
                results.append(_pack_error(exc))
        return {"index": np.asarray(batch["index"]), "result": np.array(results, dtype=object)}


def _check_reachable(address: str, timeout: float = 10.0) -> None:
    """Fail fast (Ray itself retries for minutes) when a ``HOST:PORT`` address does not answer."""
    if "://" in address or ":" not in address:
        return  # "auto", "local" or a ray:// client address: Ray reports those itself
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        raise UserError(f"no Ray cluster answers at {address} ({exc}); start the head node with "
                        "`ray start --head` and pass the address it prints to --ray-address") from None


def _pack_error(exc: Exception) -> bytes:
    """Pickle an exception with where it happened; fall back to a RuntimeError carrying its text."""
    where = f"{socket.gethostname()} pid {os.getpid()}"
    tb = "".join(traceback.format_exception(exc))
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:
        blob = pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))
    return pickle.dumps({"error": blob, "where": where, "traceback": tb})


class RayExecutor(Executor):
    """Run shards on a Ray cluster through Ray Data (see the module docstring).

    Args:
        address: Ray cluster address (``auto`` for the cluster started on this machine by
            ``ray start``, ``HOST:6379``, ``ray://HOST:10001``). ``None`` uses ``RAY_ADDRESS``
            when set, else starts a private local cluster (stopped when this process ends).
            A Ray session already initialised in this process is used as it is.
        num_gpus: GPUs per actor (fractions share a GPU). CPU-only (0) by default.
        concurrency: actors in the pool; ``None`` means one per CPU of the cluster
            (per GPU when ``num_gpus`` > 0). Never more than the pending shards.
        num_cpus: CPUs reserved per actor (default 1 for CPU actors).
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_gpus: float = 0.0, concurrency: int | None = None,
                 num_cpus: float | None = None) -> None:
        v.at_least("--num-gpus", num_gpus, 0)
        v.at_least("--concurrency", concurrency, 1)
        self.address = address
        self.num_gpus = float(num_gpus)
        self.concurrency = concurrency
        self.num_cpus = num_cpus
        self._connected = False  # this executor called ray.init (and so shuts it down)
        self._started_local = False
        self._remote = False  # connected by address to a cluster started elsewhere
        #: Seconds per phase of the last run (see :func:`breakdown`); ``runs`` keeps one entry per run.
        self.timings: dict[str, float] = {}
        self.runs: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ cluster
    def connect(self) -> None:
        """Connect to the cluster (or start a local one) unless Ray is already initialised here."""
        import ray

        if ray.is_initialized():
            return
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        t0 = time.perf_counter()
        try:
            if address:
                _check_reachable(address)
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                self._remote = True
            else:
                auth_logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
                level = auth_logger.level
                auth_logger.setLevel(logging.ERROR)  # a private local cluster: no need for the auth notice
                try:
                    # "local": a new private cluster, even if another one runs on this machine
                    ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING,
                             log_to_driver=False)
                finally:
                    auth_logger.setLevel(level)
                self._started_local = True
        except (Exception, SystemExit) as exc:  # Ray exits the process when a GCS never answers
            if isinstance(exc, UserError):
                raise
            where = f"at {address}" if address else "on this machine"
            reason = (str(exc).splitlines() or [type(exc).__name__])[0]
            auth = ("; if the cluster uses token authentication, set RAY_AUTH_MODE=token here and give this "
                    "machine the cluster's token (~/.ray/auth_token, or RAY_AUTH_TOKEN)"
                    if address and os.environ.get("RAY_AUTH_MODE") != "token" else "")
            raise UserError(f"could not start or reach a Ray cluster {where} ({reason}); "
                            "start one with `ray start --head`, check --ray-address / RAY_ADDRESS, "
                            f"or use --executor local{auth}") from None
        self._connected = True
        self.timings["cluster_start"] = time.perf_counter() - t0
        atexit.register(self.close)

    def close(self) -> None:
        """Disconnect if this executor connected; stops the cluster only if it started it."""
        if not self._connected:
            return
        import ray

        self._connected = self._started_local = self._remote = False
        if ray.is_initialized():
            ray.shutdown()

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ running
    def run(self, task: ShardTask, shards: Sequence[Shard], out: Path, seed: int,
            desc: str) -> list[dict[str, Any]]:
        """Run the shards on Ray (the driver reads their markers back); return their markers."""
        out = Path(out).resolve()
        self.timings = {}
        if not shards:
            return []
        self.connect()
        engine_used("ray")  # the stage's stats.json lists Ray's version (curate.core.stats.versions)
        return self._run_pending(task, shards, out, seed, desc)

    def _pool_size(self, n_shards: int) -> int:
        """Actors to start: ``concurrency`` (default: what the cluster holds), at most the cluster's
        capacity now and the number of pending shards."""
        import ray

        resources = ray.cluster_resources()
        gpus, cpus = resources.get("GPU", 0.0), resources.get("CPU", 0.0)
        if self.num_gpus > 0:
            if gpus < self.num_gpus:
                raise UserError(f"--num-gpus {self.num_gpus:g} per actor, but the Ray cluster has {gpus:g} GPUs; "
                                "add GPU nodes or run CPU-only with --num-gpus 0")
            capacity = int(gpus // self.num_gpus)
            if self.num_cpus:
                capacity = min(capacity, int(cpus // self.num_cpus))
        else:
            per_actor = self.num_cpus or 1.0
            if cpus < per_actor:
                raise UserError(f"the Ray cluster has {cpus:g} CPUs, fewer than the {per_actor:g} an actor needs")
            capacity = int(cpus // per_actor)
        size = self.concurrency or capacity
        if size > capacity:
            console.print(f"[yellow]note:[/yellow] --concurrency {size} but the Ray cluster holds {capacity} such "
                          f"actors now ({cpus:g} CPUs, {gpus:g} GPUs); starting {capacity}")
            size = capacity
        return max(1, min(size, n_shards))

    def _run_pending(self, task: ShardTask, todo: Sequence[Shard], out: Path, seed: int,
                     desc: str) -> list[dict[str, Any]]:
        import ray
        import ray.data
        from ray import cloudpickle
        from ray.data import ActorPoolStrategy, DataContext
        from ray.util.debug import log_once

        _quiet_ray_data(DataContext.get_current(), log_once)
        size = self._pool_size(len(todo))
        started = time.time()
        task_blob = cloudpickle.dumps(task)
        items = [{"index": s.index, "shard": pickle.dumps(s)} for s in todo]
        by_index = {s.index: s for s in todo}
        resources: dict[str, Any] = {"num_gpus": self.num_gpus} if self.num_gpus > 0 else {}
        if self.num_cpus is not None or self.num_gpus == 0:
            resources["num_cpus"] = self.num_cpus if self.num_cpus is not None else 1.0
        # A local cluster inherits this process's environment; a remote one gets the offline switches and caches.
        env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ} if self._remote else {}
        ds = ray.data.from_items(items, override_num_blocks=len(items))
        ds = ds.map_batches(
            _ShardRunner, batch_size=1, batch_format="numpy", zero_copy_batch=True,
            fn_constructor_args=(task_blob, url_of(out) or str(out), seed, os.getcwd(),
                                 task_threads(task, default=max(1, int(resources.get("num_cpus") or 1))),
                                 resources.get("num_cpus") or 1.0),
            compute=ActorPoolStrategy(size=size, max_tasks_in_flight_per_actor=1),
            runtime_env={"env_vars": env} if env else None, **resources)
        where = "a local Ray cluster" if self._started_local else f"Ray cluster {ray.get_runtime_context().gcs_address}"
        console.print(f"{desc}: {len(todo)} shard{'s' * (len(todo) > 1)} on {where}, starting {size} "
                      f"actor{'s' * (size > 1)}" + (f" × {self.num_gpus:g} GPU" if self.num_gpus else ""))
        markers: list[dict[str, Any]] = []
        timeline: list[dict[str, Any]] = []
        total = sum(task.shard_items(s) for s in todo)
        rows = ds.iter_rows()
        try:
            with StageProgress(desc, total, unit=task.unit) as bar:
                for row in rows:
                    result = pickle.loads(row["result"])
                    if "error" in result:
                        _raise_remote(result, by_index[int(row["index"])])
                    marker = result.pop("marker")
                    path = marker_path(out, task.stage, marker["shard"])
                    fetch_marker(out, path.relative_to(out).as_posix())  # a bucket: the marker only; run_stage pulls files
                    if not path.exists():
                        raise UserError(f"shard {marker['shard']} of '{task.stage}' finished on {result['actor']} but "
                                        f"its files are not visible here under {out}: OUT (and the inputs) must be "
                                        "on storage shared by every node, at the same path")
                    markers.append(marker)
                    timeline.append({**result, "arrived": time.time()})
                    bar.advance(task.shard_items(by_index[int(row["index"])]))
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        self.timings.update(breakdown(timeline, started, time.time()), actors=float(size))
        self.runs.append({"desc": desc, **self.timings})
        missing = {s.id for s in todo} - {m["shard"] for m in markers}
        if missing:  # should not happen: Ray Data returns one row per input row
            raise RuntimeError(f"Ray returned no result for shard(s) {', '.join(sorted(missing))}")
        return markers


def breakdown(timeline: Sequence[dict[str, Any]], started: float, finished: float) -> dict[str, float]:
    """Where the wall time of one Ray run went (seconds; from per-shard wall-clock stamps).

    ``actor_start``: submission to an actor's constructor (worker process, Ray Data actor set-up), mean
    over actors; ``setup``: our constructor (unpickle the task, ``task.setup()``), mean over actors;
    ``compute``: shard work per actor (sum / actors); ``gap_per_shard``: idle time of an actor between
    two shards (scheduling); ``gather_per_shard``: shard end to its result on the driver.
    """
    actors: dict[str, list[dict[str, Any]]] = {}
    for item in timeline:
        actors.setdefault(item["actor"], []).append(item)
    gaps = []
    for items in actors.values():
        items.sort(key=lambda it: it["start"])
        gaps += [b["start"] - a["end"] for a, b in zip(items, items[1:])]
    firsts = [items[0] for items in actors.values()]
    n = max(len(actors), 1)
    return {
        "wall": finished - started,
        "actor_start": sum(f["born"] - started for f in firsts) / n,
        "setup": sum(f["ready"] - f["born"] for f in firsts) / n,
        "first_result": min((it["arrived"] for it in timeline), default=finished) - started,
        "compute": sum(it["end"] - it["start"] for it in timeline) / n,
        "gap_per_shard": sum(gaps) / len(gaps) if gaps else 0.0,
        "gather_per_shard": sum(it["arrived"] - it["end"] for it in timeline) / max(len(timeline), 1),
        "shards": float(len(timeline)),
        "actors_used": float(len(actors)),
    }


def _quiet_ray_data(ctx: Any, log_once: Any) -> None:
    """Our progress bar replaces Ray Data's; keep its per-run INFO lines out of the user's way."""
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    log_once("ray_data_progress_manager_disabled")  # consume Ray's one-time "progress bars disabled" notice
    data_logger = logging.getLogger("ray.data")
    if data_logger.getEffectiveLevel() < logging.WARNING:
        data_logger.setLevel(logging.WARNING)


def _raise_remote(result: dict[str, Any], shard: Shard) -> None:
    """Re-raise an exception caught in an actor, as the same type; non-user errors keep the remote traceback."""
    exc = pickle.loads(result["error"])
    if not isinstance(exc, UserError):
        exc.add_note(f"raised on Ray ({result['where']}) while running shard {shard.id}; "
                     f"remote traceback:\n{result['traceback']}")
    raise exc
