"""Exact token counts and token ids, as the model's processor would produce them.

:class:`TokenCounter` wraps a transformers processor (a folder or a hub id):

* text: the processor's chat template renders the conversation (images as the
  template's image placeholder), its tokenizer counts the tokens;
* images: for the Qwen2-VL family (an image processor with ``patch_size`` and
  ``merge_size``) the count follows from the image header alone:
  ``h', w' = smart_resize(h, w, patch·merge, min_pixels, max_pixels)`` and
  ``tokens = (h'/(patch·merge)) · (w'/(patch·merge))``; every image placeholder
  in the text becomes that many image tokens.

The same class produces token ids and loss labels for the training loader
(:meth:`TokenCounter.encode`), so counting and training cannot disagree without
:meth:`encode` noticing.

Below it, in sections: :class:`PieceCounter` (a text counted a piece between added tokens at a time, each piece
once) and :func:`reserved_tokens` (the tokens a record's text may not hold).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from curate.core.errors import UserError
from curate.core.records import IMAGE_TOKEN
from curate.models.hub import locate


IGNORE_INDEX = -100
#: Texts on which the fast paths (the backend tokenizer, counting piece by piece) must agree with the tokenizer
#: before they are used: spaces, newlines and combining marks next to special tokens, special tokens side by side
#: or cut short, CJK text.
PROBE_TEXTS = ["<|im_start|>user\nHello, world! 你好<|im_end|>\n", " <|im_end|> ", "\n\n<|im_start|>\n\n",
               "e<|im_end|>\u0301x", "a  <|image_pad|><|image_pad|>  b", "<|im_start|><|im_start|>", "<|im_end", "",
               "plain text, no special token at all", "你好<|vision_start|><|image_pad|><|vision_end|>世界 ",
               "<|im_start|>assistant\n<think>\n\n</think>\n\n answer<|im_end|>"]


@dataclass(frozen=True)
class ImageRule:
    """The Qwen2-VL image-token rule, with the processor's settings."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    min_pixels: int
    max_pixels: int

    def grid(self, height: int, width: int) -> tuple[int, int, int]:
        """The processor's ``image_grid_thw`` for a displayed image size (in patches).

        Computed with transformers' own ``smart_resize``; results are memoised per
        size (datasets repeat sizes a lot).

        Raises:
            ValueError: aspect ratio beyond what the processor accepts (200:1).
        """
        return _grid(self, height, width)

    def tokens(self, height: int, width: int) -> int:
        """Image tokens in the text for one image of this size."""
        _, gh, gw = self.grid(height, width)
        return gh * gw // (self.merge_size * self.merge_size)


@functools.lru_cache(maxsize=65536)
def _grid(rule: ImageRule, height: int, width: int) -> tuple[int, int, int]:
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    factor = rule.patch_size * rule.merge_size
    h, w = smart_resize(height, width, factor=factor, min_pixels=rule.min_pixels, max_pixels=rule.max_pixels)
    return 1, h // rule.patch_size, w // rule.patch_size


def _image_rule(image_processor: Any) -> ImageRule | None:
    patch = getattr(image_processor, "patch_size", None)
    merge = getattr(image_processor, "merge_size", None)
    if not isinstance(patch, int) or not isinstance(merge, int):
        return None
    size = getattr(image_processor, "size", None) or {}
    get = size.get if isinstance(size, dict) else (lambda k, d=None: getattr(size, k, d))
    min_px = get("shortest_edge") or getattr(image_processor, "min_pixels", None)
    max_px = get("longest_edge") or getattr(image_processor, "max_pixels", None)
    if not min_px or not max_px:
        return None
    return ImageRule(patch, merge, int(getattr(image_processor, "temporal_patch_size", 2) or 2), int(min_px), int(max_px))


def _split_images(text: str) -> list[dict[str, str]]:
    parts: list[dict[str, str]] = []
    pieces = text.split(IMAGE_TOKEN)
    for i, piece in enumerate(pieces):
        if i:
            parts.append({"type": "image"})
        if piece:
            parts.append({"type": "text", "text": piece})
    return parts


def to_template_messages(messages: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Canonical messages (``<image>`` placeholders in text) → chat-template content parts."""
    return [{"role": m["role"], "content": _split_images(m["content"])} for m in messages]


#: Conversations on which the direct renderer must agree with transformers' ``render_jinja_template``.
PROBE_CHATS = [[{"role": "user", "content": "<image>\nDescribe the image."}, {"role": "assistant", "content": "A cat."}],
               [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "<image><image> 比较 "},
                {"role": "assistant", "content": "  "}, {"role": "user", "content": "Why?"}]]


def channel_first(image: Any) -> Any:
    """An RGB Pillow image as a ``(3, height, width)`` uint8 array (one band per channel)."""
    import numpy as np

    return np.stack([np.asarray(band) for band in image.split()])


def _direct_renderer(chat_template: str, variables: dict[str, Any]) -> Any:
    """``render(chat, add_generation_prompt)`` with transformers' compiled template and its variables made plain
    once, not per call (what ``render_jinja_template`` does for plain messages and no tools or documents);
    None where this transformers has no such helpers."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template, _plain_template_data
        compiled, plain = _compile_jinja_template(chat_template), _plain_template_data(variables)
    except (ImportError, AttributeError, TypeError):
        return None

    def render(chat: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return compiled.render(messages=chat, tools=None, documents=None, add_generation_prompt=add_generation_prompt,
                               **plain)

    return render


class TokenCounter:
    """Counts tokens and builds token ids exactly as a transformers processor would.

    Args:
        processor: a processor folder or hub id (``AutoProcessor.from_pretrained``).
        min_pixels, max_pixels: override the image processor's pixel bounds (the
            trainer must use the same values).
        trust_remote_code: pass through to transformers for processors that ship code.
    """

    def __init__(self, processor: str | os.PathLike[str], *, min_pixels: int | None = None,
                 max_pixels: int | None = None, trust_remote_code: bool = False) -> None:
        self.spec = str(processor)
        source = locate(self.spec, "--processor")  # a folder, the cache or a reachable hub: else one line at once
        try:
            from transformers import AutoProcessor

            self.processor = AutoProcessor.from_pretrained(source.name, trust_remote_code=trust_remote_code,
                                                           local_files_only=source.local_only)
        except Exception as exc:  # noqa: BLE001 - a truncated or malformed tokenizer or config: each library its type
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise UserError(f"--processor {self.spec}: cannot load a processor ({first}); pass a processor "
                            "folder (save_pretrained) or a hub id reachable from this machine") from None
        ip = getattr(self.processor, "image_processor", None)
        if ip is not None and (min_pixels or max_pixels):
            current = getattr(ip, "size", None)
            size = {k: v for k, v in (dict(current) if isinstance(current, dict) else vars(current or {})).items()
                    if v is not None}
            if min_pixels:
                size["shortest_edge"] = int(min_pixels)
            if max_pixels:
                size["longest_edge"] = int(max_pixels)
            ip.size = type(current)(**size) if current is not None and not isinstance(current, dict) else size
            for attr, value in (("min_pixels", min_pixels), ("max_pixels", max_pixels)):
                if value and hasattr(ip, attr):
                    setattr(ip, attr, int(value))
        self.image_rule = _image_rule(ip) if ip is not None else None
        #: Settings of the full processor's runs (:meth:`count_exact`): the Qwen2-VL family's grids and token counts
        #: follow from the resized size alone, so the pixel arithmetic that follows the resize is skipped.
        self.pixel_kwargs: dict[str, bool] = {k: False for k in ("do_rescale", "do_normalize")
                                              if self.image_rule is not None and getattr(ip, k, None) is not None}
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.chat_template = getattr(self.processor, "chat_template", None) or getattr(self.tokenizer, "chat_template", None)
        if not self.chat_template:
            raise UserError(f"--processor {self.spec}: has no chat template; the trainer's template is needed to count tokens")
        self.image_token = getattr(self.processor, "image_token", None)
        self.image_token_id = getattr(self.processor, "image_token_id", None)
        if self.image_token and self.image_token_id is None:
            self.image_token_id = self.tokenizer.convert_tokens_to_ids(self.image_token)
        self._template_vars = dict(getattr(self.tokenizer, "special_tokens_map", {}) or {})
        try:
            self._render_whole(to_template_messages(PROBE_CHATS[0]), False)
        except Exception as exc:  # noqa: BLE001 - jinja's syntax and runtime errors, a template raising on purpose
            raise UserError(f"--processor {self.spec}: its chat template does not render ({type(exc).__name__}: "
                            f"{(str(exc).strip().splitlines() or [''])[0][:200]})") from None
        self._direct = _direct_renderer(self.chat_template, self._template_vars)
        if self._direct is not None and any(self._direct(chat, gen) != self._render_whole(chat, gen)
                                            for chat in map(to_template_messages, PROBE_CHATS) for gen in (False, True)):
            self._direct = None  # the compiled template must render what render_jinja_template renders
        #: Tokens a record's text may not hold (:mod:`packer.tokens`): such a record is errored ``special_token``.
        self.reserved = ReservedTokens(reserved_tokens(self.processor, self.tokenizer, self.render))
        self._backend = getattr(self.tokenizer, "backend_tokenizer", None)
        self._pieces = None
        if self._backend is not None:
            whole = self.tokenizer(PROBE_TEXTS, add_special_tokens=False)["input_ids"]
            if self.text_ids(PROBE_TEXTS) != whole:
                self._backend = None  # the fast path must give the tokenizer's own ids
            else:
                self._pieces = PieceCounter.of(self._backend)
                if self._pieces is not None and self._pieces.lengths(PROBE_TEXTS) != [len(ids) for ids in whole]:
                    self._pieces = None  # counting piece by piece must give the whole text's count
        #: How RGB images reach the processor in :meth:`count_exact`: :func:`channel_first` where the probe agrees.
        self.layout = channel_first if self.image_rule is not None and self.layout_agrees(channel_first) else None
        self.fingerprint = self._fingerprint()
        self.text_fingerprint = self._text_fingerprint()

    # -- identity -----------------------------------------------------------------
    def _fingerprint(self) -> str:
        h = hashlib.sha256()
        ip = getattr(self.processor, "image_processor", None)
        if ip is not None:
            cfg = ip.to_dict()
            cfg.pop("processor_class", None)
            h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        h.update(backend.to_str().encode() if backend is not None else json.dumps(self.tokenizer.get_vocab(), sort_keys=True).encode())
        h.update(str(self.chat_template).encode())
        return "sha256:" + h.hexdigest()[:16]

    def _text_fingerprint(self) -> str:
        """What text counts depend on: the tokenizer and the chat template (not the image settings)."""
        h = hashlib.sha256()
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        h.update(backend.to_str().encode() if backend is not None else json.dumps(self.tokenizer.get_vocab(), sort_keys=True).encode())
        h.update(str(self.chat_template).encode())
        h.update(json.dumps(self._template_vars, sort_keys=True, default=str).encode())
        return "sha256:" + h.hexdigest()[:16]

    # -- text -----------------------------------------------------------------------
    def render(self, messages: list[dict[str, str]], *, add_generation_prompt: bool = False) -> str:
        """The chat-template text of a canonical conversation (one image placeholder per image).

        Renders with transformers' own template renderer and the same variables
        as ``processor.apply_chat_template`` (checked by :meth:`render_reference`
        on verified records), without the per-call overhead of the processor.
        """
        chat = to_template_messages(messages)
        if self._direct is not None:
            return self._direct(chat, add_generation_prompt)
        return self._render_whole(chat, add_generation_prompt)

    def _render_whole(self, chat: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, _ = render_jinja_template(conversations=[chat], chat_template=self.chat_template,
                                            add_generation_prompt=add_generation_prompt, **self._template_vars)
        return rendered[0]

    def render_reference(self, messages: list[dict[str, str]]) -> str:
        """The processor's own ``apply_chat_template`` text (slow; for checks)."""
        return self.processor.apply_chat_template(to_template_messages(messages), tokenize=False)

    def text_lengths(self, texts: list[str]) -> list[int]:
        """Number of token ids of rendered texts (``len`` of :meth:`text_ids`), each piece between special tokens
        tokenised once per run (:mod:`packer.tokens`) where the tokenizer allows it."""
        if self._pieces is not None:
            return self._pieces.lengths(texts)
        return [len(ids) for ids in self.text_ids(texts)]

    def text_ids(self, texts: list[str]) -> list[list[int]]:
        """Token ids of rendered texts (no special tokens added beyond the template's)."""
        if self._backend is not None:
            encode = getattr(self._backend, "encode_batch_fast", None) or self._backend.encode_batch
            return [e.ids for e in encode(texts, add_special_tokens=False)]
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    # -- images -----------------------------------------------------------------------
    def image_grid(self, height: int, width: int) -> tuple[int, int, int]:
        """``(t, h, w)`` patch grid of an image of the displayed size."""
        if self.image_rule is None:
            raise UserError(f"--processor {self.spec}: image tokens cannot be computed from headers for this "
                            "processor family; use --exact")
        return self.image_rule.grid(height, width)

    def image_tokens(self, height: int, width: int) -> int:
        """Number of image tokens one image of the displayed size becomes."""
        if self.image_rule is None:
            raise UserError(f"--processor {self.spec}: header-based image tokens need a Qwen2-VL-family processor; use --exact")
        return self.image_rule.tokens(height, width)

    def count(self, rendered_ids_len: int, image_tokens: list[int]) -> int:
        """Total tokens: rendered text tokens, each image placeholder replaced by its image tokens."""
        return rendered_ids_len + sum(t - 1 for t in image_tokens)

    def count_exact(self, messages: list[dict[str, str]], images: list[Any]) -> tuple[int, list[list[int]]]:
        """Run the full processor (decoded images) and return (tokens, image grids).

        For the Qwen2-VL family the pixel values are neither rescaled nor normalised
        (:attr:`pixel_kwargs`): that arithmetic changes no shape, so neither the grids nor the
        token count, and it is about a third of the processor's time on a full-size image. RGB
        images are handed over channel first (see :meth:`_process`).
        """
        out = self._process(self.render(messages), images, self.layout)
        grids = out["image_grid_thw"].tolist() if "image_grid_thw" in out else []
        return int(out["input_ids"].shape[1]), [[int(x) for x in g] for g in grids]

    def _process(self, text: str, images: list[Any], layout: Any = None) -> Any:
        """The full processor on one text and its decoded images (:attr:`pixel_kwargs`).

        ``layout`` (e.g. :func:`channel_first`): RGB images go in as the ``(3, height, width)`` uint8 arrays it
        makes, the layout the image processor works in; None: as Pillow images. Given a Pillow image the
        processor makes that layout itself with a strided copy (≈2.5 of ≈12 ms per full-size image here).
        The pixels that reach the resize are the same (checked when the processor loads: :meth:`layout_agrees`).
        """
        if not images:
            return self.processor(text=[text], return_tensors="np")
        extra: dict[str, Any] = {}
        if layout is not None and all(getattr(im, "mode", None) == "RGB" for im in images):
            images, extra = [layout(im) for im in images], {"input_data_format": "channels_first"}
        return self.processor(text=[text], images=images, return_tensors="np", **self.pixel_kwargs, **extra)

    def layout_agrees(self, layout: Any) -> bool:
        """Whether RGB images handed over as ``layout(image)`` arrays give the processor's outputs for Pillow
        images, ids, grids and pixel values, on a small probe image of uneven size and pixels."""
        import numpy as np
        from PIL import Image

        probe = Image.fromarray(np.random.default_rng(0).integers(0, 256, (45, 71, 3), dtype=np.uint8), "RGB")
        text = self.render([{"role": "user", "content": IMAGE_TOKEN + " probe"}])
        try:
            a, b = self._process(text, [probe]), self._process(text, [probe], layout)
        except (TypeError, ValueError):
            return False
        return set(a) == set(b) and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)

    # -- training ids -------------------------------------------------------------------
    def encode(self, messages: list[dict[str, str]], image_tokens: list[int]) -> tuple[list[int], list[int]]:
        """Token ids and labels of one sample, image placeholders expanded.

        Labels are the ids on assistant turns (their content and end-of-turn
        tokens) and :data:`IGNORE_INDEX` everywhere else: system and user turns,
        template tokens, image tokens.

        Raises:
            ValueError: the per-turn tokenization does not reproduce the
                tokenization of the whole conversation (a template this method
                cannot split), or the image placeholder count is wrong.
        """
        ids: list[int] = []
        labels: list[int] = []
        prev = ""
        for i, msg in enumerate(messages):
            if msg["role"] == "assistant":
                head = self.render(messages[:i], add_generation_prompt=True) if i else ""
                if not head.startswith(prev):
                    raise ValueError("chat template is not prefix-stable (generation prompt)")
                full = self.render(messages[: i + 1])
                if not full.startswith(head):
                    raise ValueError("chat template is not prefix-stable (assistant turn)")
                pieces = [(head[len(prev):], False), (full[len(head):], True)]
            else:
                full = self.render(messages[: i + 1])
                if not full.startswith(prev):
                    raise ValueError("chat template is not prefix-stable")
                pieces = [(full[len(prev):], False)]
            for text, train in pieces:
                if not text:
                    continue
                piece_ids = self.text_ids([text])[0]
                ids.extend(piece_ids)
                labels.extend(piece_ids if train else [IGNORE_INDEX] * len(piece_ids))
            prev = full
        whole = self.render(messages)
        if whole != prev or self.text_ids([whole])[0] != ids:
            raise ValueError("per-turn tokenization differs from whole-conversation tokenization")
        return self._expand_images(ids, labels, image_tokens)

    def _expand_images(self, ids: list[int], labels: list[int], image_tokens: list[int]) -> tuple[list[int], list[int]]:
        if not image_tokens:
            return ids, labels
        pad = self.image_token_id
        positions = [i for i, t in enumerate(ids) if t == pad]
        if len(positions) != len(image_tokens):
            raise ValueError(f"{len(positions)} image placeholders in the text for {len(image_tokens)} images")
        out_ids: list[int] = []
        out_labels: list[int] = []
        start = 0
        for pos, n in zip(positions, image_tokens):
            out_ids.extend(ids[start:pos])
            out_labels.extend(labels[start:pos])
            out_ids.extend([pad] * n)
            out_labels.extend([IGNORE_INDEX] * n)
            start = pos + 1
        out_ids.extend(ids[start:])
        out_labels.extend(labels[start:])
        return out_ids, out_labels


# Token counts of rendered chat texts, a piece between special tokens at a time, each piece counted once.
#
# A Hugging Face tokenizer first cuts its input at its added tokens (``<|im_start|>``,
# ``<|image_pad|>`` …): each added token becomes its one id, and every piece between two of
# them is normalised, pre-tokenised and tokenised on its own. So the length of a text is the
# number of added tokens in it plus the lengths of its pieces, and a piece that repeats
# (the system prompt, ``user``, an instruction shared by many records) need not be tokenised
# again. :class:`PieceCounter` keeps the lengths of the pieces it has seen and tokenises only
# new ones, in one batch.
#
# That holds when the tokenizer finds its added tokens as this module does: every added token
# matched on the raw text (``normalized`` false), never absorbing the spaces around it
# (``lstrip``/``rstrip`` false) nor only as a whole word (``single_word`` false), the longest one
# at the leftmost place. :meth:`PieceCounter.of` gives None for any other tokenizer (its texts are
# then tokenised whole), and :class:`~packer.tokens.TokenCounter` checks the two ways agree on
# probe texts before it uses one.
MAX_KEPT = 1 << 16
"""Pieces whose lengths are kept; past it the table starts again (a corpus of unique captions never grows it)."""


class PieceCounter:
    """Counts tokens of texts piece by piece (see the module docstring)."""

    def __init__(self, backend: Any, added: list[str]) -> None:
        self._encode = getattr(backend, "encode_batch_fast", None) or backend.encode_batch
        # longest first: at one place the alternation takes the first that matches, i.e. the longest
        self._split = re.compile("(" + "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True)) + ")")
        self._lengths: dict[str, int] = {"": 0}

    @classmethod
    def of(cls, backend: Any) -> PieceCounter | None:
        """A counter for a ``tokenizers.Tokenizer`` whose added tokens it can find as the tokenizer does, else None."""
        decoder = getattr(backend, "get_added_tokens_decoder", None)
        if decoder is None:
            return None
        tokens = list(decoder().values())
        if not tokens or any(t.normalized or t.lstrip or t.rstrip or t.single_word or not t.content for t in tokens):
            return None
        return cls(backend, [t.content for t in tokens])

    def lengths(self, texts: list[str]) -> list[int]:
        """The number of token ids of each text (``add_special_tokens=False``)."""
        parts = [self._split.split(text) for text in texts]
        known = self._lengths
        wanted = {piece: None for pieces in parts for piece in pieces[::2]}  # distinct, in order
        new = [piece for piece in wanted if piece not in known]
        if new:
            if len(known) + len(new) > MAX_KEPT:
                known.clear()
                known[""] = 0
                new = [piece for piece in wanted if piece not in known]
            for piece, encoding in zip(new, self._encode(new, add_special_tokens=False)):
                known[piece] = len(encoding.ids)
        # re.split with one group: pieces at even places, the added tokens between them (one id each)
        return [sum(known[piece] for piece in pieces[::2]) + len(pieces) // 2 for pieces in parts]


# Tokens a record's text may not hold: the ones the chat template and the processor give a meaning to.
#
# A message whose text holds ``<|image_pad|>`` makes the processor expect one more image than the
# record has (the trainer's processor fails on it, or pairs pixels with the wrong placeholder); one
# holding ``<|im_end|>`` or ``<|im_start|>`` ends a turn or starts a fake one, so the loss labels no longer
# follow the roles. Trainers do not escape such text (they tokenise it as it is), so curate does not
# either: a record whose text holds a reserved token is errored ``special_token``, and what is counted is
# what the loader and the trainer read.
#
# Reserved (:func:`reserved_tokens`): every special token of the tokenizer that the chat template writes
# around the text (its turn markers, found by rendering a probe conversation with an image), the processor's
# image and video placeholders, and the tokenizer's ``bos``/``eos``/``pad``/``unk`` tokens. Other special
# tokens stay text a record may hold: grounding data writes Qwen2-VL's ``<|box_start|>`` and
# ``<|object_ref_start|>`` into its answers on purpose.
#
#: The reason of a record whose text holds a reserved token.
SPECIAL_TOKEN = "special_token"
_PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "<image>\nq"},
          {"role": "assistant", "content": "a"}]


def reserved_tokens(processor: Any, tokenizer: Any, render: Callable[[list[dict[str, str]]], str]) -> list[str]:
    """The reserved tokens of a processor (see the module docstring), longest first."""
    special: set[str] = set()
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    for token in decoder.values():
        if getattr(token, "special", False) and getattr(token, "content", ""):
            special.add(token.content)
    try:
        rendered = render(_PROBE)
    except Exception:  # noqa: BLE001 - a template refusing a system turn: the user/assistant turns alone
        rendered = render(_PROBE[1:])
    reserved = {t for t in special if t in rendered}
    for name in ("image_token", "video_token"):
        value = getattr(processor, name, None)
        if isinstance(value, str) and value:
            reserved.add(value)
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, str) and value:
            reserved.add(value)
    return sorted(reserved, key=lambda t: (-len(t), t))


class ReservedTokens:
    """Finds the first reserved token in a record's messages (a C-speed search, one pattern for all)."""

    def __init__(self, tokens: Sequence[str]) -> None:
        self.tokens = list(tokens)
        self._pattern = re.compile("|".join(map(re.escape, self.tokens))) if self.tokens else None

    def find(self, messages: Sequence[dict[str, Any]]) -> str | None:
        """A description of the first reserved token in the messages' text, or None."""
        if self._pattern is None:
            return None
        for i, message in enumerate(messages):
            content = message.get("content")
            found = self._pattern.search(content) if isinstance(content, str) else None
            if found is not None:
                return (f"{message.get('role', 'turn')} turn {i} holds {found.group()!r}, a token the chat template "
                        "or the processor gives a meaning to (the trainer would read it as one)")
        return None
