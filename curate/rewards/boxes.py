"""Box parsing, coordinate reconciliation and IoU, shared by ``bbox`` and ``detection``.

Boxes are ``[x1, y1, x2, y2]`` (top-left, bottom-right). They are read from JSON
(``{"bbox_2d": [...], "label": ...}``, lists of those, bare or nested lists, ``bbox`` /
``box`` keys) or, failing JSON, from bracketed number quadruples and Qwen2-VL's
``(x1,y1),(x2,y2)`` form. Zero-area, inverted and non-finite boxes are invalid.

Coordinate systems (record or ``reward.parameters`` fields ``box_coords`` for the gold
and ``pred_coords`` for the response, default ``auto``):

- ``pixel``: pixels of the original image; needs ``image_size: [w, h]``.
- ``resized``: pixels of the model input after the processor's resize; needs
  ``resized_size: [w, h]``, or ``image_size`` plus ``min_pixels``/``max_pixels`` (and
  optionally ``patch_size``, ``merge_size``) to compute the Qwen2-VL ``smart_resize``.
- ``norm1``: fractions of the width/height in [0, 1].
- ``norm1000``: Qwen2-VL's 0–1000 grid.

``auto`` for the gold: ``norm1`` when every coordinate is <= 1, else ``pixel`` when the
image size is known and the box fits in it, else ``norm1000`` when it fits in 1000,
else raw pixels. ``auto`` for a prediction tries, in order, ``norm1`` (when every
coordinate is <= 1), the gold's system, ``resized``, ``pixel`` and ``norm1000``, taking
the first whose extent holds the boxes and that converts to the gold's system.
Declare the systems when you know them: ``auto`` cannot tell a 0–1000 box from a
pixel box that fits both.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from curate.rewards.extract import extract_answer, last_code_block
from curate.rewards.verdict import RecordError, VerifierFailure, where

MAX_BOX_TEXT = 200_000
MAX_BOXES = 1_000
MAX_JSON_DEPTH = 16
SYSTEMS = ("pixel", "resized", "norm1", "norm1000")

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_QUAD = re.compile(r"[\[(]\s*(" + _NUM + r")\s*,\s*(" + _NUM + r")\s*,\s*(" + _NUM + r")\s*,\s*(" + _NUM + r")\s*[\])]")
_PAIRS = re.compile(r"\(\s*(" + _NUM + r")\s*,\s*(" + _NUM + r")\s*\)\s*,?\s*\(\s*(" + _NUM + r")\s*,\s*(" + _NUM + r")\s*\)")
_LABEL_KEYS = ("label", "name", "category", "class")
_BOX_KEYS = ("bbox_2d", "bbox", "box", "box_2d")


@dataclass(frozen=True, slots=True)
class Box:
    """One box with an optional label (``x1, y1, x2, y2`` in its source coordinate system)."""

    x1: float
    y1: float
    x2: float
    y2: float
    label: str | None = None

    @property
    def valid(self) -> bool:
        """Finite with positive width and height."""
        vals = (self.x1, self.y1, self.x2, self.y2)
        return all(math.isfinite(v) for v in vals) and self.x2 > self.x1 and self.y2 > self.y1

    def scaled(self, sx: float, sy: float) -> Box:
        """This box with x multiplied by ``sx`` and y by ``sy``."""
        return Box(self.x1 * sx, self.y1 * sy, self.x2 * sx, self.y2 * sy, self.label)


def iou(a: Box, b: Box) -> float:
    """Intersection over union; 0.0 for an invalid (zero-area, inverted, non-finite) box."""
    if not (a.valid and b.valid):
        return 0.0
    iw = min(a.x2, b.x2) - max(a.x1, b.x1)
    ih = min(a.y2, b.y2) - max(a.y1, b.y1)
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    union = (a.x2 - a.x1) * (a.y2 - a.y1) + (b.x2 - b.x1) * (b.y2 - b.y1) - inter
    if not (union > 0 and math.isfinite(union)):
        return 0.0
    return max(0.0, min(1.0, inter / union))


def dynamic_iou_threshold(progress: float | None, default: float = 0.5) -> float:
    """V-Triune's IoU threshold by training progress: 0.85 up to 10 %, 0.95 up to 25 %, then 0.99.

    ``progress`` is the fraction of training steps done; ``None`` (scoring outside training,
    for example data filtering) gives ``default``.
    """
    if progress is None:
        return default
    p = float(progress)
    if p <= 0.10:
        return 0.85
    if p <= 0.25:
        return 0.95
    return 0.99


# ---------------------------------------------------------------------------- parsing


def _as_float(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        f = float(v)
    elif isinstance(v, str) and len(v) < 40:
        try:
            f = float(v)
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


def _label_of(obj: Mapping[str, Any]) -> str | None:
    for k in _LABEL_KEYS:
        v = obj.get(k)
        if isinstance(v, str):
            return v.strip().lower()
    return None


def _walk(obj: Any, out: list[Box], depth: int = 0, label: str | None = None) -> None:
    if len(out) >= MAX_BOXES or depth > MAX_JSON_DEPTH:
        return
    if isinstance(obj, Mapping):
        label = _label_of(obj) or label
        for k in _BOX_KEYS:
            if k in obj:
                _walk(obj[k], out, depth + 1, label)
                return
        return
    if isinstance(obj, (list, tuple)):
        if len(obj) == 4 and all(not isinstance(v, (list, tuple, Mapping)) for v in obj):
            vals = [_as_float(v) for v in obj]
            out.append(Box(*(v if v is not None else math.nan for v in vals), label=label))
            return
        if len(obj) == 2 and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in obj):
            vals = [_as_float(v) for p in obj for v in p]
            out.append(Box(*(v if v is not None else math.nan for v in vals), label=label))
            return
        for item in obj[: MAX_BOXES + 1]:
            _walk(item, out, depth + 1, label)


def parse_boxes(text: str) -> list[Box]:
    """All boxes in ``text`` in order (possibly invalid ones, which score 0)."""
    s = text.strip()
    if len(s) > MAX_BOX_TEXT:
        raise VerifierFailure("answer_too_long")
    fenced = last_code_block(s)
    if fenced is not None:
        s = fenced.strip()
    out: list[Box] = []
    if s and s[0] in "[{":
        try:
            _walk(json.loads(s), out)
        except (ValueError, RecursionError):
            out = []
        if out:
            return out
    for m in _QUAD.finditer(s):
        out.append(Box(*(float(g) for g in m.groups())))
        if len(out) >= MAX_BOXES:
            return out
    if not out:
        for m in _PAIRS.finditer(s):
            out.append(Box(*(float(g) for g in m.groups())))
            if len(out) >= MAX_BOXES:
                break
    return [b if all(math.isfinite(v) for v in (b.x1, b.y1, b.x2, b.y2)) else Box(math.nan, 0, 0, 0) for b in out]


def response_box_text(response: str) -> str | None:
    """Where a response's boxes are: the extracted answer, else its last ```json block."""
    answer = extract_answer(response)
    if answer is not None:
        return answer
    return last_code_block(response, ("json", ""))


def gold_boxes(answer: Any, record_id: Any = None) -> list[Box]:
    """Gold boxes from a record answer (a string, or JSON data already decoded)."""
    if isinstance(answer, str):
        boxes = parse_boxes(answer)
    else:
        boxes = []
        _walk(answer, boxes)
    if any(not b.valid for b in boxes):
        raise RecordError(f"{where(record_id)}: gold box with zero area, inverted or non-finite: {answer!r:.200}")
    return boxes


# ---------------------------------------------------------------------------- coordinates


def smart_resize(width: int, height: int, min_pixels: int, max_pixels: int, factor: int = 28) -> tuple[int, int]:
    """Qwen2-VL's resize: sides rounded to multiples of ``factor``, area within [min, max] pixels.

    Written from the rule's definition (the same numbers as transformers' ``smart_resize``,
    checked in the tests) so that the reward service does not import transformers and torch.

    Returns ``(width, height)`` of the model input.
    """
    h_bar = round(height / factor) * factor  # may be 0 for a thin side: the min_pixels branch then scales up
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return int(w_bar), int(h_bar)


def _size(v: Any, what: str, record_id: Any) -> tuple[float, float] | None:
    if v is None:
        return None
    if isinstance(v, Mapping):
        v = (v.get("width", v.get("w")), v.get("height", v.get("h")))
    try:
        w, h = (float(x) for x in v)
    except (TypeError, ValueError):
        raise RecordError(f"{where(record_id)}: {what} must be [width, height], got {v!r:.80}") from None
    if not (w > 0 and h > 0 and math.isfinite(w) and math.isfinite(h)):
        raise RecordError(f"{where(record_id)}: {what} must be positive, got {v!r:.80}")
    return w, h


@dataclass(frozen=True, slots=True)
class Frame:
    """What is known about the image: its size and the model-input size."""

    image_size: tuple[float, float] | None = None
    resized_size: tuple[float, float] | None = None

    def extent(self, system: str) -> tuple[float, float] | None:
        """Width and height of the coordinate space of ``system`` (``None`` when unknown)."""
        if system == "norm1":
            return 1.0, 1.0
        if system == "norm1000":
            return 1000.0, 1000.0
        if system == "pixel":
            return self.image_size
        if system == "resized":
            return self.resized_size
        return None


def frame_from(record: Mapping[str, Any], params: Mapping[str, Any]) -> Frame:
    """Image and model-input sizes from ``params`` (first) or the record."""

    def get(key: str) -> Any:
        v = params.get(key)
        return record.get(key) if v is None else v

    rid = record.get("id")
    image = _size(get("image_size"), "image_size", rid)
    resized = _size(get("resized_size"), "resized_size", rid)
    if resized is None and image is not None and get("max_pixels") is not None:
        factor = int(get("patch_size") or 14) * int(get("merge_size") or 2)
        w, h = smart_resize(int(image[0]), int(image[1]), int(get("min_pixels") or 56 * 56), int(get("max_pixels")), factor)
        resized = (float(w), float(h))
    return Frame(image, resized)


def _fits(box: Box, extent: tuple[float, float] | None, slack: float = 1.02) -> bool:
    if extent is None:
        return False
    w, h = extent
    lo = -0.02 * max(w, h)
    return min(box.x1, box.y1) >= lo and box.x2 <= w * slack and box.y2 <= h * slack


def _max_coord(boxes: Iterable[Box]) -> float:
    return max((max(b.x1, b.y1, b.x2, b.y2) for b in boxes), default=0.0)


def gold_system(boxes: list[Box], frame: Frame, declared: str | None) -> str:
    """The coordinate system of the gold boxes (declared, or guessed as documented above)."""
    if declared and declared != "auto":
        return declared
    if boxes and _max_coord(boxes) <= 1.0:
        return "norm1"
    if frame.image_size is not None and all(_fits(b, frame.image_size) for b in boxes):
        return "pixel"
    if boxes and all(_fits(b, (1000.0, 1000.0)) for b in boxes):
        return "norm1000"
    return "pixel"


def pred_system(boxes: list[Box], frame: Frame, gold: str, declared: str | None) -> str:
    """The coordinate system of predicted boxes (declared, or guessed as documented above).

    ``auto`` only picks a system that can be converted to the gold's; when the gold's
    extent is unknown, the prediction is compared as it is.
    """
    if declared and declared != "auto":
        return declared
    valid = [b for b in boxes if b.valid]
    if not valid:
        return gold
    gold_extent = frame.extent(gold)
    order = (["norm1"] if _max_coord(valid) <= 1.0 else []) + [gold, "resized", "pixel", "norm1000"]
    for system in order:
        extent = frame.extent(system)
        if extent is None or (gold_extent is None and system != gold):
            if system == gold:
                return gold
            continue
        if all(_fits(b, extent) for b in valid):
            return system
    return gold


def check_system(name: str, what: str, record_id: Any) -> None:
    """Raise :class:`RecordError` for an unknown coordinate-system name."""
    if name not in SYSTEMS and name != "auto":
        raise RecordError(f"{where(record_id)}: {what} {name!r} is not one of {', '.join(SYSTEMS)} or auto")


def convert(boxes: list[Box], src: str, dst: str, frame: Frame) -> list[Box]:
    """Boxes from coordinate system ``src`` to ``dst`` (unchanged when equal).

    Raises:
        VerifierFailure: ``box_size_unknown`` when a needed image size is missing.
    """
    if src == dst:
        return boxes
    se, de = frame.extent(src), frame.extent(dst)
    if se is None or de is None:
        raise VerifierFailure("box_size_unknown")
    sx, sy = de[0] / se[0], de[1] / se[1]
    return [b.scaled(sx, sy) for b in boxes]
