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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.models.hub import cached_hub_file, hub_reachable, hub_unreachable_reason, offline_hint

__all__ = ["DEFAULT_MODEL", "PRECISIONS", "ModelSpec", "cached_hub_file", "check_precision", "check_weights",
           "create_model", "parse_model_spec", "pick_device"]

DEFAULT_MODEL = "ViT-B-32-quickgelu:metaclip_400m"
PRECISIONS = ("fp32", "bf16", "fp16")
_WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz")



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

def _offline_error(spec: str, what: str) -> UserError:
    return UserError(f"--model {spec}: {what} not in the local Hugging Face cache, and the hub is not reachable "
                     f"({hub_unreachable_reason()}); download the weights on a machine with a network and pass "
                     f"--model ARCH:/path/to/open_clip_model.safetensors or --model local-dir:FOLDER{offline_hint()}")


def _pretrained_table() -> Any:
    """open_clip's table of pretrained tags (``open_clip/pretrained.py``: ``get_pretrained_cfg``...).

    Checking a tag needs only this table; importing open_clip itself costs about 5 s of CPU (torch, torchvision's
    ops), so before any work its ``pretrained`` module is read alone, as a submodule of a stand-in package over
    open_clip's folder (it imports only ``constants``, ``version``, tqdm and huggingface_hub). open_clip itself
    when it is imported already, or when the stand-in fails."""
    import importlib
    import importlib.util
    import sys
    import types

    if "open_clip" in sys.modules:
        return sys.modules["open_clip"]
    name = "_curate_open_clip_tables"
    try:
        if name not in sys.modules:
            found = importlib.util.find_spec("open_clip")
            package = types.ModuleType(name)
            package.__path__ = list(found.submodule_search_locations or [])  # type: ignore[union-attr]
            sys.modules[name] = package
        return importlib.import_module(f"{name}.pretrained")
    except Exception:  # noqa: BLE001 - another layout of open_clip: the whole package
        import open_clip

        return open_clip


def _resolve_tag(spec: ModelSpec) -> tuple[str, dict[str, Any]]:
    """Return ``(pretrained, overrides)`` for open_clip: a cached file when possible."""
    assert spec.arch is not None and spec.source is not None
    cfg = _pretrained_table().get_pretrained_cfg(spec.arch, spec.source)
    if not cfg:
        import open_clip

        if spec.arch not in open_clip.list_models():
            raise UserError(f"--model {spec.text}: unknown architecture {spec.arch!r} (see open_clip.list_models())")
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
    if not hub_reachable():
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


def _weights(spec: ModelSpec) -> tuple[str | None, dict[str, Any]]:
    """Where ``spec``'s weights load from, checked without loading them: ``(name, overrides)``, ``name`` being the
    open_clip model name (``local-dir:``/``hf-hub:`` specs) or the ``pretrained`` argument (None: random)."""
    if spec.kind == "local-dir":
        folder = Path(spec.source or "").expanduser()
        if not folder.is_dir():
            raise UserError(f"--model {spec.text}: no such folder")
        if not (folder / "open_clip_config.json").is_file():
            raise UserError(f"--model {spec.text}: {folder}/open_clip_config.json is missing; a local-dir: "
                            "folder holds open_clip_config.json and open_clip_model.safetensors")
        return f"local-dir:{folder.resolve()}", {}
    if spec.kind == "hf-hub":
        if not cached_hub_file(spec.source or "", ["open_clip_config.json"]) and not hub_reachable():
            raise _offline_error(spec.text, f"the repository {spec.source} is")
        return spec.text, {}
    assert spec.arch is not None
    if spec.kind == "tag":
        return _resolve_tag(spec)
    import open_clip

    if spec.arch not in open_clip.list_models() and spec.kind != "file":
        raise UserError(f"--model {spec.text}: unknown architecture {spec.arch!r} (see open_clip.list_models())")
    if spec.kind == "file":
        path = Path(spec.source or "")
        if not path.is_file():
            raise UserError(f"--model {spec.text}: no such checkpoint file {path}")
        _register_arch_beside(spec)
        return str(path), {}
    return None, {}  # random


def check_weights(spec: str | ModelSpec) -> ModelSpec:
    """Check, before any work, that a ``--model`` spec's weights load from here (a file, a folder, the local
    Hugging Face cache or a reachable hub) without loading them; return the parsed spec.

    Raises:
        UserError: one line naming the model and what to pass instead (offline: a local checkpoint or folder).
    """
    parsed = spec if isinstance(spec, ModelSpec) else parse_model_spec(spec)
    _weights(parsed)
    return parsed


def create_model(spec: ModelSpec, device: str, precision: str) -> tuple[Any, Any, Any, str]:
    """Build an open_clip model, its preprocess and tokenizer from a parsed spec; return them and the name used."""
    import open_clip
    import torch

    kwargs: dict[str, Any] = {"precision": precision, "device": device}
    pretrained, overrides = _weights(spec)
    if spec.kind in ("local-dir", "hf-hub"):
        assert pretrained is not None
        model, _, preprocess = open_clip.create_model_and_transforms(pretrained, **kwargs)
        tokenizer = open_clip.get_tokenizer(pretrained)
        return model, preprocess, tokenizer, pretrained
    assert spec.arch is not None
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
