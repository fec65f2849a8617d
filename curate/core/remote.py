"""Outputs in object storage (``--out s3://bucket/prefix``, ``gs://...``) through fsspec.

A stage never writes to a bucket directly: it runs in a local staging folder that mirrors the
URL (``$CURATE_CACHE/remote/<hash>``), and the shard contract is kept on the bucket's side
without atomic rename:

* :func:`output` checks the bucket is reachable (one line naming the URL, before any work),
  pulls what the prefix already holds (so a rerun, on this machine or another, resumes from the
  shards whose **markers** are in the bucket) and registers the mapping in the environment, so
  worker processes and a local Ray cluster inherit it;
* :func:`push_shard` (called by :func:`curate.core.shards.execute_shard`) uploads a finished
  shard's outputs first and its marker last, as soon as the shard is done, from whichever worker
  ran it;
* :func:`pull_listed` (called by :func:`curate.executors.run_stage`) fetches the files that
  markers list but this machine lacks (shards run on other nodes);
* at the end :func:`output` uploads whatever else changed: outputs, then markers, then
  ``stats.json``, so a reader that trusts only markers and ``stats.json`` never sees a half run.

Credentials come from each filesystem's usual environment and config (``AWS_*`` variables,
``~/.aws``, ``AWS_ENDPOINT_URL`` / ``FSSPEC_S3_ENDPOINT_URL``; ``GOOGLE_APPLICATION_CREDENTIALS``).
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

from curate.core.errors import UserError
from curate.core.io import as_path, is_url, url_fs

_ENV = "CURATE_REMOTE_OUT"  # JSON {local staging folder: URL}
_SKIP = (".tmp/", ".curate.lock")


def _mapping() -> dict[str, str]:
    try:
        return json.loads(os.environ.get(_ENV, "{}"))
    except ValueError:
        return {}


def url_of(local: str | os.PathLike[str]) -> str | None:
    """The URL a local staging folder mirrors, or None for an ordinary folder."""
    return _mapping().get(str(Path(local).absolute()))


def staging(url: str) -> Path:
    """The local folder that mirrors ``url`` on this machine."""
    root = Path(os.environ.get("CURATE_CACHE", Path.home() / ".cache" / "curate")) / "remote"
    return root / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]


def _fs(url: str) -> tuple[Any, str]:
    from curate.core.formats.listing import remote_error

    try:
        fs, inner = url_fs(url)
    except ImportError as exc:
        raise UserError(f"{url}: no filesystem for this URL ({exc}); install curate[s3] or curate[gcs]") from None
    except Exception as exc:  # noqa: BLE001 - bad URLs raise many types
        raise remote_error(url, exc) from None
    return fs, inner.rstrip("/")


def check_reachable(url: str) -> None:
    """Stop with one line naming ``url`` when its bucket cannot be reached or read."""
    from curate.core.formats.listing import remote_error

    fs, inner = _fs(url)
    bucket = inner.split("/", 1)[0]
    try:
        fs.ls(bucket, refresh=True)
    except FileNotFoundError:
        raise UserError(f"{url}: bucket {bucket!r} does not exist (or these credentials cannot see it); "
                        "create it first") from None
    except Exception as exc:  # noqa: BLE001 - botocore/aiohttp raise many types
        raise remote_error(url, exc) from None


def _listing(fs: Any, inner: str) -> dict[str, int]:
    try:
        found = fs.find(inner, detail=True, refresh=True) if fs.exists(inner) else {}
    except FileNotFoundError:
        return {}
    return {path[len(inner) + 1:]: int(info.get("size") or 0) for path, info in found.items() if path != inner}


def pull(url: str, local: Path) -> int:
    """Copy the objects under ``url`` that ``local`` lacks (or holds at another size); return how many."""
    fs, inner = _fs(url)
    n = 0
    for rel, size in sorted(_listing(fs, inner).items()):
        dest = local / rel
        if rel.startswith(_SKIP) or (dest.is_file() and dest.stat().st_size == size):
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.pull")
        fs.get_file(f"{inner}/{rel}", str(tmp))
        os.replace(tmp, dest)
        n += 1
    return n


def _put(fs: Any, inner: str, local: Path, rel: str) -> None:
    fs.put_file(str(local / rel), f"{inner}/{rel}")


def push_shard(out: Path, files: Sequence[str], marker: Path) -> None:
    """Upload one finished shard of a staging folder: its files, then its marker (no-op elsewhere)."""
    url = url_of(out)
    if url is None:
        return
    fs, inner = _fs(url)
    for rel in files:
        _put(fs, inner, out, rel)
    _put(fs, inner, out, str(marker.relative_to(out)))


def pull_listed(out: Path, markers: Sequence[dict[str, Any]]) -> None:
    """Fetch files listed by ``markers`` that a staging folder lacks (shards that ran on other machines)."""
    url = url_of(out)
    if url is None:
        return
    missing = [rel for m in markers for rel in m.get("files", []) if not (out / rel).exists()]
    if missing:
        fs, inner = _fs(url)
        for rel in missing:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(f"{inner}/{rel}", str(out / rel))


def push(url: str, local: Path) -> int:
    """Upload what differs from the bucket: outputs first, then markers, then ``stats.json``; return how many."""
    fs, inner = _fs(url)
    remote = _listing(fs, inner)
    files = sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    files = [f for f in files if not f.startswith(_SKIP) and not Path(f).name.startswith((".", "_lock"))]

    def rank(rel: str) -> int:
        if rel == "stats.json":
            return 2
        return 1 if rel.startswith("_shards/") and rel.endswith(".json") else 0

    n = 0
    for rel in sorted(files, key=lambda r: (rank(r), r)):
        size = (local / rel).stat().st_size
        if remote.get(rel) == size and rank(rel) == 0 and not rel.endswith(".json"):
            continue  # same object already there (shard outputs are written once and never change)
        _put(fs, inner, local, rel)
        n += 1
    return n


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
    pull(url, local)
    previous = os.environ.get(_ENV)
    os.environ[_ENV] = json.dumps({**_mapping(), str(local.absolute()): url})
    try:
        yield local
        n = push(url, local)
        print(f"outputs in {url} (uploaded {n} objects from the local mirror {local})", file=sys.stderr)
    finally:
        if previous is None:
            os.environ.pop(_ENV, None)
        else:
            os.environ[_ENV] = previous


def input_file(path: str | os.PathLike[str] | None) -> Path | None:
    """A local copy of an input file given as a URL (``--vocab``, ``--embeddings``, ``--tags``, ``--lengths``)."""
    if path is None:
        return None
    text = os.fspath(path)
    if not is_url(text):
        return Path(as_path(text))
    check_reachable(text)
    fs, inner = _fs(text)
    if not fs.exists(inner):
        raise UserError(f"{text}: no such object")
    dest = staging(text) / Path(inner).name
    info = fs.info(inner)
    if not (dest.is_file() and dest.stat().st_size == int(info.get("size") or -1)):
        dest.parent.mkdir(parents=True, exist_ok=True)
        if info.get("type") == "directory":
            pull(text, dest)
        else:
            fs.get_file(inner, str(dest))
    return dest


def local_copy(url: str | os.PathLike[str]) -> Path:
    """A read-only local mirror of a folder (a pack output for ``verify``): pulled, never pushed."""
    text = os.fspath(url)
    if not is_url(text):
        return Path(as_path(text))
    text = text.rstrip("/")
    check_reachable(text)
    local = staging(text)
    local.mkdir(parents=True, exist_ok=True)
    pull(text, local)
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


def fetch_shard(out: Path, stage: str, marker: dict[str, Any]) -> None:
    """Bring one shard that finished elsewhere into a staging folder: its files, then its marker."""
    url = url_of(out)
    if url is None:
        return
    pull_listed(out, [marker])
    rel = f"_shards/{stage}/{marker['shard']}.json"
    if not (out / rel).exists():
        fs, inner = _fs(url)
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(f"{inner}/{rel}", str(out / rel))
