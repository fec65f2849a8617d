"""``--model`` specs for open_clip encoders: parsing, device and precision, and where the weights come from.

A model spec is one of

* ``ARCH:TAG`` - an open_clip architecture and a pretrained tag
  (default ``ViT-B-32-quickgelu:metaclip_400m``); the weights come from the
  Hugging Face hub cache, or are downloaded when the machine is online;
* ``ARCH:/path/weights.{pt,pth,bin,safetensors}`` - a local checkpoint file. ``ARCH``
  is an open_clip architecture, or the name of an ``ARCH.json`` architecture
  config lying next to the checkpoint (registered automatically);
* ``local-dir:FOLDER`` - a folder in open_clip's hub layout (``open_clip_config.json``
  + weights);
* ``hf-hub:ORG/REPO`` - a hub repository in the same layout;
* ``ARCH:random`` - random weights (seed 0), for benchmarks only: tags are meaningless.

Nothing here downloads when the machine is offline: a spec whose weights are
not in the local hub cache fails at once with a one-line :class:`UserError`
that says how to pass a local checkpoint instead. :func:`create_model` builds the
open_clip model; :mod:`curate.models.encoders` wraps it for encoding.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate.core.errors import UserError

DEFAULT_MODEL = "ViT-B-32-quickgelu:metaclip_400m"
PRECISIONS = ("fp32", "bf16", "fp16")
_WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz")
_HUB_HOST = "huggingface.co"



@dataclass(frozen=True)
class ModelSpec:
    """A parsed ``--model`` value.

    ``kind`` is ``tag``, ``file``, ``local-dir``, ``hf-hub`` or ``random``.
    """

    text: str
    kind: str
    arch: str | None
    source: str | None


def parse_model_spec(spec: str) -> ModelSpec:
    """Parse a ``--model`` value (see the module docstring) without loading anything.

    Raises:
        UserError: the spec is empty or has no ``:`` part.
    """
    spec = (spec or "").strip()
    if not spec:
        raise UserError(f"--model is empty; give ARCH:PRETRAINED (e.g. {DEFAULT_MODEL}) or local-dir:FOLDER")
    for prefix, kind in (("local-dir:", "local-dir"), ("hf-hub:", "hf-hub")):
        if spec.startswith(prefix):
            rest = spec[len(prefix):]
            if not rest:
                raise UserError(f"--model {spec}: nothing after {prefix}")
            return ModelSpec(spec, kind, None, rest)
    arch, sep, pretrained = spec.partition(":")
    if not sep or not arch or not pretrained:
        raise UserError(f"--model {spec}: give ARCH:PRETRAINED (e.g. {DEFAULT_MODEL}), "
                        "ARCH:/path/checkpoint.pt or local-dir:FOLDER")
    if pretrained == "random":
        return ModelSpec(spec, "random", arch, None)
    looks_like_path = (os.sep in pretrained or pretrained.startswith(".") or pretrained.startswith("~")
                       or pretrained.lower().endswith(_WEIGHT_SUFFIXES) or Path(pretrained).exists())
    if looks_like_path:
        return ModelSpec(spec, "file", arch, str(Path(pretrained).expanduser()))
    return ModelSpec(spec, "tag", arch, pretrained)


def pick_device(device: str = "auto") -> str:
    """Resolve ``auto`` to ``cuda`` when a GPU is visible, else ``cpu``; check explicit choices."""
    import torch

    device = (device or "auto").strip()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {device}: no CUDA GPU is visible; use --device cpu (or auto)")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UserError("--device mps: Metal is not available here; use --device cpu (or auto)")
    if device != "cpu" and not device.startswith(("cuda", "mps")):
        raise UserError(f"--device {device}: use auto, cpu, cuda, cuda:N or mps")
    return device


def check_precision(precision: str, device: str) -> str:
    """Validate a precision for a device: fp16 needs a GPU."""
    if precision not in PRECISIONS:
        raise UserError(f"--precision {precision}: use one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and not device.startswith("cuda"):
        raise UserError(f"--precision fp16 needs a CUDA GPU (device is {device}); on the CPU use bf16 (about 2x "
                        "faster than fp32) or fp32")
    return precision


# ---------------------------------------------------------------------------
# Hub access without hanging offline
# ---------------------------------------------------------------------------

def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    try:
        with socket.create_connection((_HUB_HOST, 443), timeout=timeout):
            return True
    except OSError:
        return False


def cached_hub_file(repo_id: str, filenames: list[str]) -> str | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub comes with open_clip
        return None
    for name in filenames:
        try:
            found = try_to_load_from_cache(repo_id, name)
        except Exception:  # noqa: BLE001 - a malformed cache is the same as no cache
            found = None
        if isinstance(found, str) and os.path.isfile(found):
            return found
    return None


def _offline_error(spec: str, what: str) -> UserError:
    return UserError(f"--model {spec}: {what} not in the local Hugging Face cache, and the hub is unreachable "
                     "(offline); download the weights on a machine with a network and pass --model ARCH:/path/to/"
                     "open_clip_model.safetensors or --model local-dir:FOLDER")


def _resolve_tag(spec: ModelSpec) -> tuple[str, dict[str, Any]]:
    """Return ``(pretrained, overrides)`` for open_clip: a cached file when possible."""
    import open_clip

    assert spec.arch is not None and spec.source is not None
    cfg = open_clip.get_pretrained_cfg(spec.arch, spec.source)
    if not cfg:
        tags = open_clip.list_pretrained_tags_by_model(spec.arch)
        known = f"known tags: {', '.join(tags)}" if tags else "see open_clip.list_pretrained()"
        raise UserError(f"--model {spec.text}: unknown pretrained tag {spec.source!r} for {spec.arch} ({known})")
    overrides = {k: cfg[k] for k in ("mean", "std", "interpolation", "resize_mode") if cfg.get(k) is not None}
    hub = cfg.get("hf_hub", "")
    if hub:
        repo, filename = os.path.split(hub.rstrip("/")) if not hub.endswith("/") else (hub.rstrip("/"), "")
        names = [filename] if filename else ["open_clip_model.safetensors", "open_clip_pytorch_model.safetensors",
                                             "open_clip_pytorch_model.bin"]
        cached = cached_hub_file(repo, names)
        if cached:
            return cached, overrides
    if not _hub_reachable():
        raise _offline_error(spec.text, f"the {spec.source} weights of {spec.arch} are")
    return spec.source, {}


def _register_arch_beside(spec: ModelSpec) -> None:
    import open_clip

    assert spec.arch is not None and spec.source is not None
    if spec.arch in open_clip.list_models():
        return
    beside = Path(spec.source).parent / f"{spec.arch}.json"
    if beside.is_file():
        open_clip.add_model_config(beside)
        if spec.arch in open_clip.list_models():
            return
    raise UserError(f"--model {spec.text}: unknown architecture {spec.arch!r}; use an open_clip name "
                    f"(e.g. ViT-B-32-quickgelu) or put its config as {beside}")


def create_model(spec: ModelSpec, device: str, precision: str) -> tuple[Any, Any, Any, str]:
    """Build an open_clip model, its preprocess and tokenizer from a parsed spec; return them and the name used."""
    import open_clip
    import torch

    kwargs: dict[str, Any] = {"precision": precision, "device": device}
    if spec.kind in ("local-dir", "hf-hub"):
        if spec.kind == "local-dir":
            folder = Path(spec.source or "").expanduser()
            if not folder.is_dir():
                raise UserError(f"--model {spec.text}: no such folder")
            if not (folder / "open_clip_config.json").is_file():
                raise UserError(f"--model {spec.text}: {folder}/open_clip_config.json is missing; a local-dir: "
                                "folder holds open_clip_config.json and open_clip_model.safetensors")
            name = f"local-dir:{folder.resolve()}"
        else:
            name = spec.text
            if not cached_hub_file(spec.source or "", ["open_clip_config.json"]) and not _hub_reachable():
                raise _offline_error(spec.text, f"the repository {spec.source} is")
        model, _, preprocess = open_clip.create_model_and_transforms(name, **kwargs)
        tokenizer = open_clip.get_tokenizer(name)
        return model, preprocess, tokenizer, name
    assert spec.arch is not None
    if spec.arch not in open_clip.list_models() and spec.kind != "file":
        raise UserError(f"--model {spec.text}: unknown architecture {spec.arch!r} (see open_clip.list_models())")
    if spec.kind == "file":
        path = Path(spec.source or "")
        if not path.is_file():
            raise UserError(f"--model {spec.text}: no such checkpoint file {path}")
        _register_arch_beside(spec)
        pretrained, overrides = str(path), {}
    elif spec.kind == "random":
        pretrained, overrides = None, {}
    else:
        pretrained, overrides = _resolve_tag(spec)
    extra = {f"image_{k}": v for k, v in overrides.items()}
    if spec.kind == "random":
        import logging

        previous = logging.root.manager.disable
        logging.disable(logging.WARNING)  # open_clip warns that the weights are random: that is the point
        try:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                model, _, preprocess = open_clip.create_model_and_transforms(spec.arch, pretrained=None, **kwargs)
        finally:
            logging.disable(previous)
    else:
        model, _, preprocess = open_clip.create_model_and_transforms(spec.arch, pretrained=pretrained, **kwargs,
                                                                     **extra)
    tokenizer = open_clip.get_tokenizer(spec.arch)
    return model, preprocess, tokenizer, spec.arch
