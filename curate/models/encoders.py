"""open_clip encoders: loading by spec, precision, device, a fingerprint, and fast encoding.

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
that says how to pass a local checkpoint instead.

Determinism: outputs depend on the weights, the precision and the batch
composition (torch's CPU kernels give bit-identical rows for the same batch on
1 or 2 threads - checked on the tiny model and a ViT-B/32 - but a different
batch size can change the last bits of a row on larger models). Callers keep
batches fixed for a given setting, so reruns give identical bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from curate.core.errors import UserError

DEFAULT_MODEL = "ViT-B-32-quickgelu:metaclip_400m"
PRECISIONS = ("fp32", "bf16", "fp16")
_WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt", ".npz")
_HUB_HOST = "huggingface.co"
_CACHE_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str, str], Encoder] = {}


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


def _cached_hub_file(repo_id: str, filenames: list[str]) -> str | None:
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
        cached = _cached_hub_file(repo, names)
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


# ---------------------------------------------------------------------------
# The encoder
# ---------------------------------------------------------------------------

@dataclass
class Encoder:
    """A loaded open_clip model with its preprocessing and tokenizer.

    Attributes:
        spec: the ``--model`` value it was loaded from.
        device: torch device string.
        precision: ``fp32``, ``bf16`` or ``fp16``.
        dim: embedding width.
        fingerprint: hash of config, weights, preprocessing, tokenizer and precision.
        scripts: scripts the text tower reads (``("latin",)`` for CLIP's English BPE, else ``("all",)``).
    """

    spec: str
    device: str
    precision: str
    model: Any
    preprocess: Any
    tokenizer: Any
    dim: int
    fingerprint: str
    scripts: tuple[str, ...]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def input_dtype(self) -> Any:
        """The dtype image batches are cast to."""
        import torch

        return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[self.precision]

    def prepare_image(self, image: Any) -> Any:
        """The per-image part of the preprocessing, safe to run in decoding threads.

        For open_clip's usual pipeline (PIL resize and crop, then ``ToTensor`` and
        ``Normalize``) this returns the cropped image as a ``uint8`` ``H×W×3`` array;
        :meth:`to_pixels` converts and normalises a whole batch at once (one torch
        op per batch instead of two per image, the same numbers). Any other
        pipeline runs whole here and returns a tensor.
        """
        split = self.info.get("split_preprocess")
        if split is None:
            return self.preprocess(image)
        pil_part, _ = split
        out = pil_part(image)
        if getattr(out, "mode", None) != "RGB":
            return self.preprocess(image)
        return np.asarray(out, dtype=np.uint8)

    def to_pixels(self, items: list[Any]) -> Any:
        """Stack :meth:`prepare_image` outputs into a normalised float batch ``(B, 3, H, W)``."""
        import torch

        split = self.info.get("split_preprocess")
        tensors = [it for it in items if isinstance(it, torch.Tensor)]
        if split is None or len(tensors) == len(items):
            return torch.stack(items)
        _, normalizers = split
        if not tensors and len({it.shape for it in items}) == 1:
            batch = torch.from_numpy(np.stack(items)).permute(0, 3, 1, 2).contiguous().float().div(255)
            for norm in normalizers:
                batch = norm(batch)
            return batch
        out = []
        for it in items:
            if isinstance(it, torch.Tensor):
                out.append(it)
                continue
            x = torch.from_numpy(np.ascontiguousarray(it)).permute(2, 0, 1).contiguous().float().div(255)
            for norm in normalizers:
                x = norm(x)
            out.append(x)
        return torch.stack(out)

    def encode_images(self, pixels: Any) -> np.ndarray:
        """Embed a preprocessed image batch ``(B, 3, H, W)``; returns L2-normalised float32 rows."""
        import torch

        with torch.inference_mode():
            x = pixels.to(self.device, dtype=self.input_dtype, non_blocking=True)
            feats = self.model.encode_image(x).float()
            return _normalise(feats)

    def tokenize(self, texts: list[str]) -> Any:
        """Token ids ``(B, context_length)`` of texts (open_clip's tokenizer)."""
        return self.tokenizer(texts)

    def encode_tokens(self, tokens: Any) -> np.ndarray:
        """Embed token ids; returns L2-normalised float32 rows.

        For standard CLIP text towers (causal mask, pooling at the end-of-text
        token) the batch is cut after its longest text: with a causal mask the
        padding after the end-of-text token cannot change the pooled feature, so
        the result is the same as the full-length forward, several times faster
        for short concept names.
        """
        import torch

        with torch.inference_mode():
            tokens = tokens.to(self.device)
            if self.info.get("truncate_text"):
                feats = _encode_text_truncated(self.model, tokens)
            else:
                feats = self.model.encode_text(tokens)
            return _normalise(feats.float())

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        """Tokenize and embed texts; returns L2-normalised float32 rows."""
        return self.encode_tokens(self.tokenize(texts))


def _normalise(feats: Any) -> np.ndarray:
    import torch

    out = torch.nn.functional.normalize(feats, dim=-1)
    return out.cpu().numpy().astype(np.float32, copy=False)


def _encode_text_truncated(model: Any, tokens: Any) -> Any:
    """open_clip ``CLIP.encode_text`` on tokens cut after the longest text of the batch."""
    import torch

    eot = tokens.argmax(dim=-1)
    length = int(eot.max().item()) + 1
    cast = model.transformer.get_cast_dtype()
    x = model.token_embedding(tokens[:, :length]).to(cast)
    x = x + model.positional_embedding[:length].to(cast)
    x = model.transformer(x, attn_mask=model.attn_mask[:length, :length])
    x = model.ln_final(x)
    x = x[torch.arange(x.shape[0], device=x.device), eot]
    proj = model.text_projection
    if proj is not None:
        x = proj(x) if isinstance(proj, torch.nn.Linear) else x @ proj
    return x


def _can_truncate(model: Any) -> bool:
    """True for open_clip's built-in CLIP text tower with a causal mask and argmax pooling."""
    from open_clip.model import CLIP

    mask = getattr(model, "attn_mask", None)
    if type(model) is not CLIP or mask is None or getattr(model, "text_pool_type", None) != "argmax":
        return False
    n = mask.shape[0]
    causal = bool((mask.triu(1) == float("-inf")).sum() == n * (n - 1) // 2) and bool((mask.tril() == 0).all())
    return causal


def _split_preprocess(preprocess: Any) -> tuple[Any, list[Any]] | None:
    """Split ``Compose([...PIL steps, ToTensor, Normalize...])`` into its PIL part and normalisers."""
    from torchvision.transforms import Compose, Normalize, ToTensor

    steps = getattr(preprocess, "transforms", None)
    if not steps:
        return None
    at = next((i for i, t in enumerate(steps) if isinstance(t, ToTensor)), None)
    if at is None or not all(isinstance(t, Normalize) for t in steps[at + 1:]):
        return None
    return Compose(steps[:at]), list(steps[at + 1:])


def _state_hash(model: Any) -> str:
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _tokenizer_scripts(tokenizer: Any) -> tuple[str, ...]:
    from open_clip.tokenizer import SimpleTokenizer

    return ("latin",) if isinstance(tokenizer, SimpleTokenizer) else ("all",)


def _create(spec: ModelSpec, device: str, precision: str) -> tuple[Any, Any, Any, str]:
    """Build model, preprocess and tokenizer; return them and the open_clip name used."""
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
            if not _cached_hub_file(spec.source or "", ["open_clip_config.json"]) and not _hub_reachable():
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


def load_encoder(spec: str = DEFAULT_MODEL, *, precision: str = "fp32", device: str = "auto",
                 threads: int | None = None, cache: bool = True) -> Encoder:
    """Load an open_clip model for embedding (eval mode, no gradients).

    Args:
        spec: ``ARCH:TAG``, ``ARCH:/path/ckpt``, ``local-dir:FOLDER``, ``hf-hub:ORG/REPO`` or ``ARCH:random``.
        precision: ``fp32``, ``bf16`` or ``fp16`` (fp16 only on a GPU).
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        threads: torch CPU threads for this process (default: torch's choice).
        cache: reuse an encoder already loaded in this process with the same arguments.

    Raises:
        UserError: bad spec, missing file, unknown tag, weights not available offline, fp16 on CPU.
    """
    import torch

    parsed = parse_model_spec(spec)
    device = pick_device(device)
    check_precision(precision, device)
    if threads:
        torch.set_num_threads(max(1, int(threads)))
    key = (parsed.text, precision, device)
    with _CACHE_LOCK:
        if cache and key in _LOADED:
            return _LOADED[key]
    try:
        model, preprocess, tokenizer, name = _create(parsed, device, precision)
    except UserError:
        raise
    except (RuntimeError, OSError, ValueError, KeyError) as exc:
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"--model {spec}: could not load the model ({text[:300]})") from None
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    dim = int(getattr(model, "embed_dim", 0) or _probe_dim(model, preprocess, device, precision))
    cfg = getattr(model, "preprocess_cfg", None) or {}
    import open_clip

    meta = {"model_cfg": open_clip.get_model_config(name), "precision": precision,
            "preprocess": cfg, "tokenizer": type(tokenizer).__name__,
            "context_length": getattr(tokenizer, "context_length", None), "weights": _state_hash(model)}
    fingerprint = hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()[:16]
    enc = Encoder(spec=parsed.text, device=device, precision=precision, model=model, preprocess=preprocess,
                  tokenizer=tokenizer, dim=dim, fingerprint=fingerprint, scripts=_tokenizer_scripts(tokenizer),
                  info={"truncate_text": _can_truncate(model), "name": name,
                        "split_preprocess": _split_preprocess(preprocess)})
    if cache:
        with _CACHE_LOCK:
            _LOADED[key] = enc
    return enc


def _probe_dim(model: Any, preprocess: Any, device: str, precision: str) -> int:
    import torch
    from PIL import Image

    pixels = preprocess(Image.new("RGB", (32, 32))).unsqueeze(0)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    with torch.inference_mode():
        return int(model.encode_image(pixels.to(device, dtype=dtype)).shape[-1])
