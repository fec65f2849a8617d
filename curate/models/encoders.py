"""open_clip encoders: loading by spec, precision, device, a fingerprint, and fast encoding.

The ``--model`` specs (``ARCH:TAG``, ``ARCH:/path.pt``, ``local-dir:FOLDER``,
``hf-hub:ORG/REPO``, ``ARCH:random``) and where the weights come from are in
:mod:`curate.models.specs`; nothing downloads when the machine is offline.

Determinism: outputs depend on the weights, the precision and the batch
composition (torch's CPU kernels give bit-identical rows for the same batch on
1 or 2 threads - checked on the tiny model and a ViT-B/32 - but a different
batch size can change the last bits of a row on larger models). Callers keep
batches fixed for a given setting, so reruns give identical bytes.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from curate.core.errors import UserError
from curate.models.specs import DEFAULT_MODEL, PRECISIONS, check_precision, create_model, parse_model_spec, pick_device

__all__ = ["DEFAULT_MODEL", "PRECISIONS", "Encoder", "load_encoder"]


_CACHE_LOCK = threading.Lock()
_LOADED: dict[tuple[str, str, str], Encoder] = {}


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
        model, preprocess, tokenizer, name = create_model(parsed, device, precision)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - truncated weights, a config of the wrong shape: torch, safetensors,
        # pickle and open_clip each raise their own types
        text = " ".join(str(exc).split())  # one line: "Error(s) in loading state_dict ... size mismatch for ..."
        raise UserError(f"--model {spec}: could not load the model ({type(exc).__name__}: {text[:300]}); "
                        "check the checkpoint and its config (a truncated download?)") from None
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
