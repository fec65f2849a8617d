"""SVG verifier: 0.5 x SSIM of the renderings + 0.25 x token + 0.25 x tag Jaccard.

A normalised exact match scores 1.0; an answer without ``<svg`` scores 0. Both SVGs are
rendered with cairosvg to ``size`` x ``size`` pixels (parameter, default 256) on white,
in a worker process killed after ``time_limit`` seconds (default 10), and compared with
scikit-image's SSIM over the RGB channels (negative SSIM counts as 0). Rendering is
bounded: documents over 200,000 characters are not rendered (image part 0), XML
entities and external resources are refused (defusedxml inside cairosvg, and a URL
fetcher that returns nothing), the output size is fixed whatever the document
declares, and the worker has a memory limit. Unclosed tags of a truncated answer are
closed before rendering. A gold SVG that cannot be rendered is a record error; answers over 300,000 characters are
refused (``answer_too_long``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Mapping

from curate.rewards.verifiers import html
from curate.rewards.verdict import Context, Deferred, RecordError, VerifierFailure, param, where

MAX_CODE_CHARS = 300_000
MAX_RENDER_CHARS = 200_000
DEFAULT_SIZE = 256
DEFAULT_TIME_LIMIT = 10.0
_TOKENS = re.compile(r'\w+|[<>=/"]|#[0-9a-f]+')
_OPEN_TAGS = re.compile(r"<([a-z]+)[^<>]*>")
_ANY_TAG = re.compile(r"<(/?)([A-Za-z][\w:.-]*)[^<>]*?(/?)>")
_EMPTY_SVG = b'<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"></svg>'


def token_set(code: str) -> set[str]:
    """Word, punctuation and hex-colour tokens (lower-cased)."""
    return set(_TOKENS.findall(code.lower()))


def tag_set(code: str) -> set[str]:
    """Names of the opening tags (lower-cased)."""
    return set(_OPEN_TAGS.findall(code.lower()))


def close_tags(svg: str) -> str:
    """Drop a trailing partial tag and close the tags a truncated document left open."""
    lt, gt = svg.rfind("<"), svg.rfind(">")
    if lt > gt:
        svg = svg[:lt]
    stack: list[str] = []
    for m in _ANY_TAG.finditer(svg):
        closing, name, selfclosing = m.group(1), m.group(2), m.group(3)
        if name.startswith(("!", "?")) or selfclosing:
            continue
        if closing:
            if name in stack:
                while stack and stack.pop() != name:
                    pass
        else:
            stack.append(name)
    return svg + "".join(f"</{n}>" for n in reversed(stack))


@lru_cache(maxsize=1024)
def _reference(reference: str) -> tuple[str, frozenset[str], frozenset[str]]:
    return html.normalize(reference), frozenset(token_set(reference)), frozenset(tag_set(reference))


def _no_fetch(url: str, resource_type: str) -> bytes:
    return _EMPTY_SVG


@lru_cache(maxsize=128)
def _render(svg: str, size: int):
    """RGB array of the rendered SVG, or ``None`` when it does not render."""
    import io

    import numpy as np
    from cairosvg.surface import PNGSurface
    from PIL import Image

    doc = svg if svg.rstrip().endswith("</svg>") else close_tags(svg)
    try:
        png = PNGSurface.convert(bytestring=doc.encode("utf-8", "replace"), output_width=size, output_height=size,
                                 background_color="white", unsafe=False, url_fetcher=_no_fetch)
        with Image.open(io.BytesIO(png)) as im:
            im.load()
            return np.asarray(im.convert("RGB"), dtype=np.float64)
    except MemoryError:
        raise
    except Exception:
        return None


def render_ssim(reference: str, code: str, size: int) -> float:
    """SSIM of the two renderings; -1.0 when the reference does not render (worker task)."""
    from skimage.metrics import structural_similarity

    ref = _render(reference, size)
    if ref is None:
        return -1.0
    img = _render(code, size)
    if img is None:
        return 0.0
    return max(0.0, float(structural_similarity(ref, img, channel_axis=2, data_range=255.0)))


def _combine(ssim: float, textual: float, record_id: Any) -> float:
    if ssim < 0:
        raise RecordError(f"{where(record_id)}: the gold SVG does not render")
    return 0.5 * ssim + textual


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float | Deferred:
    """SVG similarity to the first gold (rendering deferred to a worker)."""
    code = html.extract_document(response, "<svg", "</svg>", ("svg", "xml", ""))
    if len(code) > MAX_CODE_CHARS:
        raise VerifierFailure("answer_too_long")
    if "<svg" not in code.lower():
        return 0.0
    reference = golds[0].strip()
    ref_norm, ref_tokens, ref_tags = _reference(reference)
    if html.normalize(code) == ref_norm:
        return 1.0
    tok = html.jaccard(token_set(code), ref_tokens) if ref_tokens else 0.0
    tag = html.jaccard(tag_set(code), ref_tags) if ref_tags else 0.0
    textual = 0.25 * (tok + tag)
    if len(code) > MAX_RENDER_CHARS or len(reference) > MAX_RENDER_CHARS:
        return textual
    size = int(param(params, "size", DEFAULT_SIZE))
    if not 16 <= size <= 1024:
        raise RecordError(f"{where(ctx.record.get('id'))}: svg size must be in [16, 1024], got {size}")
    rid = ctx.record.get("id")
    return Deferred("curate.rewards.verifiers.svg:render_ssim", (reference, code, size),
                    post=(lambda s, t=textual, r=rid: _combine(s, t, r)),
                    limit=float(param(params, "time_limit", DEFAULT_TIME_LIMIT)))


def clear_cache() -> None:
    """Forget the memoised results (a worker warmed up on sample inputs starts clean)."""
    _render.cache_clear()
