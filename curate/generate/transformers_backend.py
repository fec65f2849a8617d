"""The ``transformers`` backend: a local checkpoint folder (``--model ckpt/``).

The checkpoint loads with ``AutoProcessor`` and ``AutoModelForImageTextToText``
(Qwen2-VL, Qwen2.5-VL and the other image-text-to-text models of transformers;
``trust_remote_code`` for models that ship their own code). Prompts go through
the model's own chat template and processor; images are decoded with
:func:`curate.core.images.decode`. Several prompts are batched with left padding and
sampled with ``num_return_sequences``.

Reproducibility: every answer ``i`` of a request has its own random stream,
seeded by ``derive_seed(sampling.seed, key, i)``; a logits processor draws each
token from that stream (inverse-CDF sampling after temperature and top-p), so
an answer depends on neither the batch it ran in nor the global torch RNG.
What is *not* guaranteed: identical answers across devices, dtypes or library
versions, and, in float32 or lower precision, across batch compositions. A batch
of other shape (more rows, left padding) runs other matrix kernels, which change
the logits in the last bits (about 3e-6 on the tiny test model on the CPU); a draw
whose uniform falls that close to a cumulative-probability boundary (or a token
whose mass sits that close to the top-p cut) then picks another token, and the
rest of the answer differs. Measured on the tiny model, 10 tokens × 9 answers: 3 of
10 seeds differ between batch size 3 and 1 in float32, none in float64.
``--dtype float64`` (CPU) is the setting for audits that need answers independent
of the batch; the sampler computes in the logits' precision.

Sampling uses the request's temperature and top-p only: the checkpoint's
``top_k``/``min_p``/``typical_p`` are not applied, while its logits processors
(``repetition_penalty``, ``suppress_tokens``, ...) are.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from curate.core import validate as v
from curate.core.errors import UserError
from curate.generate.base import GenerationBackend, GenerationRequest, GenerationResult, PromptError
from curate.generate.base import content_parts, derive_seed, error_result
from curate.core.images import ImageError, decode
from curate.core.limits import image_limits, CHARS_PER_TOKEN_BOUND, MAX_PROMPT_TOKENS, TOO_LONG, over, total_chars
from curate.generate.checks import DTYPES

DEVICES = ("auto", "cpu", "cuda")


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a GPU is visible, else ``cpu``; ``cuda:1`` etc. pass through."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.split(":")[0] not in ("cpu", "cuda", "mps", "xpu"):
        raise UserError(f"--device {device}: use one of auto, cpu, cuda (or cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {device}: no CUDA device is visible; use --device cpu")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto`` → bfloat16 on CUDA, float32 elsewhere; otherwise the named torch dtype."""
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype}: use one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)


class SeededSampler:
    """Logits processor that samples each row from its own seeded stream.

    Row ``r`` of a batch (prompt ``r // n``, answer ``r % n``) gets ``max_new_tokens``
    uniforms drawn up front from ``torch.Generator().manual_seed(seed_r)``; at step
    ``t`` the token is the inverse CDF of the row's tempered, nucleus-filtered
    distribution at uniform ``t``. The processor returns logits that are ``-inf``
    everywhere except the chosen token, so the generation loop's own sampling (or
    any warper after it) can only pick that token.
    """

    def __init__(self, seeds: Sequence[int], prompt_len: int, max_new_tokens: int, temperature: float,
                 top_p: float, device: Any) -> None:
        import torch

        self.prompt_len = prompt_len
        self.temperature = temperature
        self.top_p = top_p
        rows = []
        for s in seeds:
            gen = torch.Generator().manual_seed(int(s))
            rows.append(torch.rand(max_new_tokens, generator=gen))
        # u <= 1 - 2**-20 keeps u·total below total in float32 rounding: the search never lands
        # past the last token with probability > 0 (zero-probability tokens add no CDF step).
        self.uniforms = torch.stack(rows).clamp_(max=1.0 - 2.0**-20).to(device)
        self._uniforms_by_dtype: dict[Any, Any] = {}

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        step = input_ids.shape[1] - self.prompt_len
        if self.temperature == 0:
            chosen = scores.argmax(dim=-1, keepdim=True)
            return torch.full_like(scores, float("-inf")).scatter_(1, chosen, 0.0)
        logits = scores if self.temperature == 1.0 else scores / self.temperature
        dtype = torch.promote_types(scores.dtype, torch.float32)  # float64 logits stay float64
        probs = torch.softmax(logits, dim=-1, dtype=dtype)
        order = None
        if self.top_p < 1.0:
            probs, order = probs.sort(dim=-1, descending=True)
            before = probs.cumsum(dim=-1) - probs  # mass strictly before each token
            probs.masked_fill_(before >= self.top_p, 0.0)
        cdf = probs.cumsum_(dim=-1)
        uniforms = self._uniforms_by_dtype.get(dtype)
        if uniforms is None:
            uniforms = self._uniforms_by_dtype[dtype] = self.uniforms.to(dtype)
        target = uniforms[:, step : step + 1] * cdf[:, -1:]
        chosen = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[-1] - 1)
        if order is not None:
            chosen = order.gather(1, chosen)
        return cdf.fill_(float("-inf")).scatter_(1, chosen, 0.0)  # reuse the buffer: one token left


class TransformersBackend(GenerationBackend):
    """Generate with a local checkpoint through transformers.

    Args:
        model: Checkpoint folder (or a hub id, for users with a network).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``.
        batch_size: Prompts per ``generate`` call (rows = prompts × n).
        trust_remote_code: Allow checkpoints that ship their own modelling code.
        chat_template_kwargs: Extra variables for the chat template.
        max_image_pixels, max_image_bytes: the image gate's limits (:class:`curate.core.images.ImageLimits`;
            None: its defaults).
        max_prompt_tokens: Longest prompt (template text, image placeholders unexpanded); longer
            prompts get the error ``too_long`` before the model sees them.
    """

    name = "transformers"

    def __init__(self, model: str | os.PathLike[str], *, device: str = "auto", dtype: str = "auto",
                 batch_size: int = 8, trust_remote_code: bool = False,
                 chat_template_kwargs: dict[str, Any] | None = None, max_image_pixels: int | None = None,
                 max_image_bytes: int | None = None,
                 max_prompt_tokens: int = MAX_PROMPT_TOKENS) -> None:
        super().__init__()
        v.at_least("--max-prompt-tokens", max_prompt_tokens, 1)
        v.at_least("--batch-size", batch_size, 1)
        self.max_prompt_tokens = max_prompt_tokens
        self.model_path = str(model)
        path = Path(self.model_path).expanduser()
        looks_local = path.exists() or self.model_path.startswith((".", "/", "~")) or self.model_path.endswith("/")
        if looks_local:
            if not path.is_dir():
                raise UserError(f"--model {model}: no such checkpoint folder")
            if not (path / "config.json").is_file():
                raise UserError(f"--model {model}: not a transformers checkpoint (config.json missing)")
            self.model_path = str(path.resolve())
        else:  # a hub id: in the cache, or the hub reachable (checked at once; offline: one line, no retries)
            from curate.models.hub import locate

            looks_local = locate(self.model_path, "--model").local_only
        self.batch_size = batch_size
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.max_image_pixels = max_image_pixels
        self.limits = image_limits(max_image_bytes, max_image_pixels)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        try:
            from transformers import AutoModelForImageTextToText, AutoProcessor

            self.processor = AutoProcessor.from_pretrained(self.model_path, trust_remote_code=trust_remote_code,
                                                           local_files_only=looks_local)
            self.model = AutoModelForImageTextToText.from_pretrained(
                self.model_path, dtype=self.dtype, trust_remote_code=trust_remote_code, local_files_only=looks_local
            )
            self.processor.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": "probe"}]}],
                                               tokenize=False, add_generation_prompt=True)  # a template that parses
        except Exception as exc:  # noqa: BLE001 - truncated weights, a config or template that does not parse:
            # transformers, safetensors, torch and jinja each raise their own types
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise UserError(f"--model {model}: cannot load it with AutoProcessor/AutoModelForImageTextToText, "
                            f"or render its chat template ({type(exc).__name__}: {first})") from None
        self.model.to(self.device).eval()
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.tokenizer.padding_side = "left"  # batched generation continues every row from its last token
        gen_cfg = self.model.generation_config
        eos = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = sorted({int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]) if e is not None})
        if not self.eos_ids:
            raise UserError(f"--model {model}: neither the generation config nor the tokenizer names an EOS token")
        pad = gen_cfg.pad_token_id if gen_cfg.pad_token_id is not None else self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.eos_ids[0])

    def describe(self) -> dict[str, Any]:
        """Backend, model folder, device, dtype, batch size."""
        return {"backend": self.name, "model": self.model_path, "device": self.device,
                "dtype": str(self.dtype).replace("torch.", ""), "batch_size": self.batch_size}

    @property
    def model_name(self) -> str:
        """The checkpoint folder's name (or the hub id)."""
        return Path(self.model_path).name or self.model_path

    # -- prompt preparation ---------------------------------------------------

    def _prepare(self, request: GenerationRequest) -> tuple[str, list[Any]]:
        """Chat-templated text and decoded images; raises PromptError or ImageError."""
        messages = content_parts(request, lambda i: {"type": "image"})
        chars = total_chars(m.get("content") for m in request.messages)
        long = over(chars, self.max_prompt_tokens * CHARS_PER_TOKEN_BOUND, "characters of prompt")
        if long:  # certainly over the token limit: never rendered nor tokenized
            raise PromptError(TOO_LONG, long)
        images = [decode(p, self.limits) for p in request.images]
        try:
            text = self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                      **self.chat_template_kwargs)
        except Exception as exc:  # noqa: BLE001 - jinja raises several types; a bad prompt must not stop the run
            raise PromptError("prompt_error:template", f"{type(exc).__name__}: {exc}") from None
        long = over(len(self.tokenizer(text, add_special_tokens=False)["input_ids"]), self.max_prompt_tokens,
                    "prompt tokens")
        if long:
            raise PromptError(TOO_LONG, long)
        return text, images

    # -- generation -------------------------------------------------------------

    def _run_batch(self, batch: list[tuple[int, GenerationRequest, str, list[Any]]]) -> list[GenerationResult]:
        """One ``generate`` call for prompts with identical sampling settings and ``n``."""
        import torch

        sp = batch[0][1].sampling
        n = batch[0][1].n
        texts = [text for _, _, text, _ in batch]
        images = [img for _, _, _, imgs in batch for img in imgs]
        inputs = self.processor(text=texts, images=images or None, return_tensors="pt", padding=True)
        inputs = inputs.to(self.device)
        prompt_len = int(inputs["input_ids"].shape[1])
        seeds = [derive_seed(req.sampling.seed, req.key, i) for _, req, _, _ in batch for i in range(n)]
        sampler = SeededSampler(seeds, prompt_len, sp.max_new_tokens, sp.temperature, sp.top_p, self.device)
        with torch.inference_mode():
            out = self.model.generate(
                **inputs, do_sample=True, num_return_sequences=n, max_new_tokens=sp.max_new_tokens,
                temperature=1.0, top_p=1.0, top_k=0, logits_processor=[sampler],
                eos_token_id=self.eos_ids, pad_token_id=self.pad_id,
            )
        new = out[:, prompt_len:].cpu().tolist()
        eos = set(self.eos_ids)
        results = []
        for b, (_, req, _, _) in enumerate(batch):
            texts_b, trunc_b = [], []
            for i in range(req.n):
                row = new[b * n + i]
                end = next((j for j, t in enumerate(row) if t in eos), None)
                texts_b.append(self.tokenizer.decode(row if end is None else row[:end], skip_special_tokens=True))
                trunc_b.append(end is None)
            results.append(GenerationResult(key=req.key, responses=texts_b, truncated=trunc_b, attempts=1))
        return results

    def _generate_group(self, batch: list[tuple[int, GenerationRequest, str, list[Any]]]
                        ) -> Iterator[tuple[int, GenerationResult]]:
        """Run a batch; if it fails, run its prompts one by one to isolate the failure."""
        try:
            for (index, _, _, _), result in zip(batch, self._run_batch(batch)):
                yield index, result
            return
        except Exception as exc:  # noqa: BLE001 - a failing prompt must not kill the run
            if len(batch) == 1:
                index, req, _, _ = batch[0]
                yield index, error_result(req, f"generation_error:{type(exc).__name__}", str(exc), attempts=1)
                return
        for item in batch:
            for index, result in self._generate_group([item]):
                result.attempts += 1
                result.retries += 1
                result.retry_reasons.append("batch_failed")
                yield index, result

    def _stream(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, GenerationResult]]:
        groups: dict[tuple[float, float, int, int], list[tuple[int, GenerationRequest, str, list[Any]]]] = {}
        for index, req in enumerate(requests):
            try:
                text, images = self._prepare(req)
            except PromptError as exc:
                yield index, error_result(req, exc.reason, exc.detail)
                continue
            except ImageError as exc:
                yield index, error_result(req, exc.reason, exc.detail)
                continue
            sp = req.sampling
            group = groups.setdefault((sp.temperature, sp.top_p, sp.max_new_tokens, req.n), [])
            group.append((index, req, text, images))
            if len(group) == self.batch_size:
                yield from self._generate_group(group)
                group.clear()
        for group in groups.values():
            if group:
                yield from self._generate_group(group)

    def close(self) -> None:
        """Drop the model (frees its memory once nothing else holds it)."""
        self.model = None
        self.processor = None

