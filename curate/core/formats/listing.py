"""Input arguments to files: local paths, folders, brace patterns and object-store URLs.

An unreachable bucket or missing credentials stop the run before any work, with one line
naming the URL (:class:`~curate.core.errors.UserError`).
"""

from __future__ import annotations

import os
from collections.abc import Container
from pathlib import Path
from typing import Any

from curate.core.discovery import JSON_HEAD, json_records, keep_listed, record_suffix, records_files, say_skipped
from curate.core.errors import UserError
from curate.core.formats.containers import ACCEPTED, expand_braces
from curate.core.io import RemotePath, as_path, is_url, text_of, url_fs



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


def _remote(url: str, suffixes: Container[str]) -> list[RemotePath]:
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
            return [RemotePath(p) for p in found]
        if kind == "file":
            return [RemotePath(url)]
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


def list_inputs(item: str | os.PathLike[str], suffixes: Container[str]) -> list[Path | RemotePath]:
    """The input files one argument stands for (a file, a folder, a brace pattern, a URL or URL prefix).

    Args:
        item: the argument as given.
        suffixes: lower-case suffixes of record formats (folders keep only those, hidden paths skipped).
    """
    try:
        return _list_inputs(item, suffixes)
    finally:
        say_skipped()  # one line per folder and reason, once the listing is done


def _list_inputs(item: str | os.PathLike[str], suffixes: Container[str]) -> list[Path | RemotePath]:
    text = text_of(item)  # a path, a URL, a RemotePath or a Location
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
