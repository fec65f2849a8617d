"""Outputs in object storage (``--out s3://bucket/prefix``, ``gs://...``) through fsspec.

A stage never writes to a bucket directly: it runs in a local staging folder that mirrors the
URL (``$CURATE_CACHE/remote/<hash>``), and the shard contract is kept on the bucket's side
without atomic rename (the transfers are :mod:`curate.core.remote_sync`):

* :func:`output` checks the bucket is reachable (one line naming the URL, before any work),
  brings down only the control files (shard markers, stage settings, ``history.json``), so a
  rerun, on this machine or another, resumes from the shards whose **markers** are in the bucket
  without downloading their data, and registers the mapping in the environment, so worker
  processes and a local Ray cluster inherit it;
* each finished shard's outputs, then its marker, are uploaded once, as soon as the shard is done,
  from whichever worker ran it (:func:`curate.core.shards.execute_shard`);
* :func:`curate.executors.run_stage` fetches only the shard files the stage's driver reads
  (``ShardTask.driver_reads``) and, before shards run, the files of earlier steps they read
  (``ShardTask.reads_out``);
* at the end :func:`output` uploads what the bucket lacks or holds with other bytes: outputs, then
  markers, then ``stats.json``, so a reader that trusts only markers and ``stats.json`` never sees
  a half run.

Credentials and endpoints come from each filesystem's usual environment and config: for S3
(``curate[s3]``) ``AWS_*`` variables, ``~/.aws``, ``AWS_ENDPOINT_URL`` / ``FSSPEC_S3_ENDPOINT_URL``;
for GCS (``curate[gcs]``) ``GOOGLE_APPLICATION_CREDENTIALS`` or gcloud's login,
``STORAGE_EMULATOR_HOST`` for an emulator, ``FSSPEC_GS_TOKEN=anon`` for anonymous access.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from curate.core.environ import environ
from curate.core.errors import UserError
from curate.core.io import as_path, curate_cache, is_url
from curate.core.remote_sync import ENV, get_file, mapping, pull, pull_control, push, remote_fs, url_of

__all__ = ["output", "input_file", "local_copy", "remote_out", "cli_args", "staging", "check_reachable", "url_of"]


def staging(url: str) -> Path:
    """The local folder that mirrors ``url`` on this machine."""
    return curate_cache("remote") / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]


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
def output(out: str | os.PathLike[str]) -> Iterator[Path]:
    """The local folder a stage writes into: ``out`` itself, or a staging mirror of a URL (see module doc)."""
    text = os.fspath(out)
    if not is_url(text):
        yield Path(as_path(text))
        return
    url = text.rstrip("/")
    check_reachable(url)
    local = staging(url)
    local.mkdir(parents=True, exist_ok=True)
    pull_control(url, local)
    with environ({ENV: json.dumps({**mapping(), str(local.absolute()): url})}):
        yield local
        n = push(url, local)
        print(f"outputs in {url} (uploaded {n} objects from the local mirror {local})", file=sys.stderr)


def input_file(path: str | os.PathLike[str] | None) -> Path | None:
    """A local copy of an input file given as a URL (``--vocab``, ``--embeddings``, ``--tags``, ``--lengths``)."""
    if path is None:
        return None
    text = os.fspath(path)
    if not is_url(text):
        return Path(as_path(text))
    check_reachable(text)
    fs, inner = remote_fs(text)
    try:
        info = fs.info(inner)
    except FileNotFoundError:
        raise UserError(f"{text}: no such object") from None
    dest = staging(text) / Path(inner).name
    if info.get("type") == "directory":
        pull(text, dest)
    elif not (dest.is_file() and dest.stat().st_size == int(info.get("size") or -1)):
        get_file(fs, inner, dest)
    return dest


def local_copy(url: str | os.PathLike[str], exclude: Sequence[str] = ()) -> Path:
    """A read-only, exact local mirror of a folder (a pack output for ``verify``): pulled, never pushed;
    objects matching ``exclude`` (e.g. ``shards/*.tar``, read in place) are left in the bucket."""
    text = os.fspath(url)
    if not is_url(text):
        return Path(as_path(text))
    text = text.rstrip("/")
    check_reachable(text)
    local = staging(text)
    local.mkdir(parents=True, exist_ok=True)
    pull(text, local, prune=True, exclude=exclude)
    return local


def _out_slot(sig: Any, bound: Any, arg: str) -> tuple[str, Any]:
    """Where a call holds its output folder: the parameter itself, ``**settings`` or ``config.out``."""
    params = bound.arguments
    if params.get(arg) is not None:
        return "param", params[arg]
    varkw = next((p.name for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD), None)
    if varkw and params.get(varkw, {}).get(arg) is not None:
        return "settings", params[varkw][arg]
    config = params.get("config")
    if config is not None and getattr(config, arg, None) is not None:
        return "config", getattr(config, arg)
    return "none", None


def remote_out(arg: str = "out", position: int | None = None) -> Any:
    """Decorate a stage function so that its ``arg`` (``--out``) may be a URL (see :func:`output`).

    The output folder is found by name wherever the call gives it: as the parameter (by keyword
    or position), among ``**settings``, or as the field of a ``config`` dataclass (``PackConfig(out=URL)``);
    the stage then runs on the local mirror. ``position`` is accepted for older callers and unused.
    """
    import dataclasses
    import functools
    import inspect

    del position

    def deco(fn: Any) -> Any:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = sig.bind_partial(*args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)  # let the function raise its own error
            where, value = _out_slot(sig, bound, arg)
            if value is None or not is_url(os.fspath(value)):
                return fn(*args, **kwargs)
            with output(value) as local:
                if where == "param":
                    bound.arguments[arg] = local
                elif where == "settings":
                    varkw = next(p.name for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD)
                    bound.arguments[varkw] = {**bound.arguments[varkw], arg: local}
                else:
                    bound.arguments["config"] = dataclasses.replace(bound.arguments["config"], **{arg: local})
                return fn(*bound.args, **bound.kwargs)
        return wrapper
    return deco


#: Flags whose value is an output folder, and flags whose value is an input file, on the command line.
OUT_FLAGS = ("--out",)
IN_FLAGS = ("--vocab", "--embeddings", "--tags", "--lengths", "--concepts")


@contextmanager
def cli_args(args: Sequence[str]) -> Iterator[list[str]]:
    """The command line with URLs of ``--out`` and input-file flags replaced by local folders and copies.

    ``curate verify URL`` reads a local mirror of the pack output. The ``--out`` mirror is pushed
    when the command succeeds (each finished shard was already pushed as it finished).
    """
    from contextlib import ExitStack

    out = list(args)
    with ExitStack() as stack:
        for i, token in enumerate(out):
            flag, eq, value = token.partition("=")
            if not eq:
                flag, value = token, (out[i + 1] if i + 1 < len(out) else "")
            if flag not in OUT_FLAGS + IN_FLAGS or not is_url(value):
                continue
            local = str(stack.enter_context(output(value)) if flag in OUT_FLAGS else input_file(value))
            if eq:
                out[i] = f"{flag}={local}"
            else:
                out[i + 1] = local
        if out and out[0] == "verify":
            out = [local_copy(t).as_posix() if not t.startswith("-") and is_url(t) else t for t in out]
        yield out
