"""Where a model's files come from: a local folder, or the Hugging Face hub when it can be reached.

Every verb that loads a model calls :func:`locate` (transformers processors and models) or
:func:`curate.models.specs.check_weights` (open_clip) before any work. Off the network the hub's own client
retries each file for minutes; here a model that is not in the local Hugging Face cache fails at once with one
line naming it and saying how to pass a local folder. The reachability check is bounded by design: one name
lookup and one TCP connection, together at most :data:`CONNECT_TIMEOUT` seconds, no retries, done once per
process. ``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE=1``) skips it: only the local cache is used.
"""

from __future__ import annotations

import os
import re
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from curate.core.errors import UserError

#: Seconds at most that finding out whether the hub can be reached takes (name lookup and connection).
CONNECT_TIMEOUT = 3.0
_DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = ("1", "true", "yes", "on")
#: A hub repository id: NAME or ORG/NAME (letters, digits, ``-``, ``_``, ``.``; at most 96 characters each).
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")
#: Files of a transformers model or processor folder; one of them in the cache means it was downloaded.
TRANSFORMERS_FILES = ("config.json", "preprocessor_config.json", "processor_config.json", "tokenizer_config.json")
_reachable: dict[tuple[str, int], bool] = {}


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is set: the hub is never tried."""
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_address() -> tuple[str, int]:
    """The host and port a connection to the hub goes to first: the HTTPS proxy when one is set, else the hub
    (``HF_ENDPOINT``, default huggingface.co)."""
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        proxy = os.environ.get(key, "").strip()
        if proxy:
            parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            if parts.hostname:
                return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    parts = urlsplit(os.environ.get("HF_ENDPOINT", "").strip() or _DEFAULT_ENDPOINT)
    return parts.hostname or "huggingface.co", parts.port or (80 if parts.scheme == "http" else 443)


def hub_reachable(timeout: float = CONNECT_TIMEOUT) -> bool:
    """Whether a TCP connection to the hub (or its proxy) opens within ``timeout`` seconds; False when offline.

    The name lookup runs in a thread so that a resolver that hangs is bounded too; the answer is kept for the
    process (a verb asks once per model)."""
    if hub_offline():
        return False
    address = hub_address()
    if address not in _reachable:
        result: list[bool] = []

        def connect() -> None:
            try:
                with socket.create_connection(address, timeout=timeout):
                    result.append(True)
            except OSError:
                result.append(False)

        worker = threading.Thread(target=connect, name="curate-hub-check", daemon=True)
        worker.start()
        worker.join(timeout)
        _reachable[address] = bool(result and result[0])
    return _reachable[address]


def hub_unreachable_reason() -> str:
    """Why the hub is not tried, for a message: offline mode, or the address that could not be reached."""
    if hub_offline():
        return "HF_HUB_OFFLINE is set"
    host, port = hub_address()
    return f"{host}:{port} cannot be reached"


def cached_hub_file(repo_id: str, filenames: list[str] | tuple[str, ...]) -> str | None:
    """The path of the first of ``filenames`` of hub repository ``repo_id`` in the local Hugging Face cache."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers and open_clip
        return None
    for name in filenames:
        try:
            found = try_to_load_from_cache(repo_id, name)
        except Exception:  # noqa: BLE001 - a malformed cache (or id) is the same as no cache
            found = None
        if isinstance(found, str) and os.path.isfile(found):
            return found
    return None


def looks_like_path(text: str) -> bool:
    """True for what can only be a path: absolute, ``./``, ``../``, ``~``, a backslash, or more than one ``/``
    (a hub id is ``NAME`` or ``ORG/NAME``)."""
    return (text.startswith(("/", ".", "~")) or "\\" in text or text.count("/") > 1
            or (len(text) > 1 and text[1] == ":"))


@dataclass(frozen=True)
class Source:
    """Where a model loads from: ``name`` is a folder or a hub id; ``local_only`` tells the loader not to ask the
    hub (a folder, offline, or a hub id already in the cache while the hub cannot be reached)."""

    name: str
    local_only: bool


def offline_hint() -> str:
    """The end of an offline message: how to skip trying the hub (nothing when ``HF_HUB_OFFLINE`` is set)."""
    return "" if hub_offline() else "; set HF_HUB_OFFLINE=1 to use only the local cache without trying the hub"


def offline_message(flag: str, spec: str) -> str:
    """The one line of a model that is neither a folder nor in the cache while the hub cannot be reached."""
    hint = offline_hint()
    return (f"{flag} {spec}: no such folder, and not in the local Hugging Face cache while the hub is not "
            f"reachable ({hub_unreachable_reason()}); download it on a machine with a network "
            f"(hf download {spec} --local-dir DIR), then pass {flag} DIR{hint}")


def locate(spec: str | os.PathLike[str], flag: str, files: tuple[str, ...] = TRANSFORMERS_FILES) -> Source:
    """Check, before any work, that a transformers model or processor (``spec``: a folder or a hub id) can be
    loaded, and say how.

    Raises:
        UserError: a path that is not a folder ("no such folder"), a text that is neither a folder nor a hub id,
            or a hub id that is not in the local cache while the hub cannot be reached (offline).
    """
    text = os.fspath(spec).strip()
    if not text:
        raise UserError(f"{flag}: empty; give a model folder (save_pretrained) or a hub id ORG/NAME")
    path = Path(text).expanduser()
    if path.is_dir():
        return Source(str(path), True)
    if path.exists():
        raise UserError(f"{flag} {text}: not a folder; give the folder that holds its config.json (save_pretrained)")
    if looks_like_path(text) or not _REPO_ID.fullmatch(text) or "--" in text or ".." in text:
        raise UserError(f"{flag} {text}: no such folder")
    if not hub_offline() and hub_reachable():
        return Source(text, False)
    if cached_hub_file(text, files):
        return Source(text, True)
    raise UserError(offline_message(flag, text))
