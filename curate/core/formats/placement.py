"""Where a record's images stand in its conversation: ``<image>`` placeholders, MMMU's numbered ones,
and the images a record's layout implies it has."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from curate.core.formats.conversations import IMAGE_TOKEN
from curate.core.formats.rows import URL_COLUMNS, RecordInvalid

_NUMBERED_PLACEHOLDER = re.compile(r"<image (\d+)>")


def number_placeholders(messages: list[dict[str, str]], images: list[Any],
                        numbers: list[int] | None) -> tuple[list[dict[str, str]], list[Any]]:
    """MMMU's numbered placeholders: in a conversation with no ``<image>``, each ``<image k>`` (in the question
    or its options) becomes ``<image>`` where it stands, and the images follow the placeholders: image ``k``
    at each of its places (twice if it is referred to twice). ``numbers`` are the images' numbers (MMMU's
    ``image_k`` columns, which the row keeps as they are when written back); without them (other layouts,
    whose written-back rows keep their own image order) or without such placeholders nothing changes.

    Raises:
        RecordInvalid: ``image_count_mismatch`` for a placeholder with no such image, or an image that no
            placeholder refers to.
    """
    if numbers is None or not images or count_placeholders(messages) or \
            not any(_NUMBERED_PLACEHOLDER.search(m["content"]) for m in messages):
        return messages, images
    by_number = dict(zip(numbers, images))
    order = [int(k) for m in messages for k in _NUMBERED_PLACEHOLDER.findall(m["content"])]
    missing = next((k for k in order if k not in by_number), None)
    if missing is not None:
        raise RecordInvalid("image_count_mismatch", f"<image {missing}> refers to no image (the row has images "
                                                    f"{', '.join(map(str, numbers))})")
    referred = set(order)
    unused = next((k for k in numbers if k not in referred), None)
    if unused is not None:
        raise RecordInvalid("image_count_mismatch", f"image {unused} is referred to by no <image k> placeholder")
    messages = [{**m, "content": _NUMBERED_PLACEHOLDER.sub(IMAGE_TOKEN, m["content"])} for m in messages]
    return messages, [by_number[k] for k in order]


def place_images(messages: list[dict[str, str]], n_images: int) -> list[dict[str, str]]:
    """Check that ``messages`` hold one ``<image>`` per image; when they hold none, put the
    placeholders (each followed by a newline) at the start of the first user turn.

    Raises:
        RecordInvalid: ``image_count_mismatch`` (other counts, or images but no user turn).
    """
    n_tags = count_placeholders(messages)
    if n_tags == n_images:
        return messages
    if n_images == 0:
        raise RecordInvalid("missing_image", f"{n_tags} {IMAGE_TOKEN} placeholder{'s' if n_tags > 1 else ''} but "
                                             "no image in the record")
    if n_tags == 0 and n_images > 0:
        for i, m in enumerate(messages):
            if m["role"] == "user":
                messages = list(messages)
                messages[i] = {**m, "content": (IMAGE_TOKEN + "\n") * n_images + m["content"]}
                return messages
        raise RecordInvalid("image_count_mismatch", "record has images but no user turn to hold them")
    raise RecordInvalid("image_count_mismatch", f"{n_tags} {IMAGE_TOKEN} placeholders for {n_images} images")


def implied_image(raw: dict[str, Any], layout: str, caption: bool) -> str | None:
    """Why a row without images should have had one (its layout says so), or None: a URL column (an
    image never downloaded) or a caption (it describes an image)."""
    url = next((k for k in URL_COLUMNS if isinstance(raw.get(k), str) and raw[k]), None)
    if url is not None:
        return (f"the row has an image {url} ({raw[url][:120]}) but no image bytes: download the images first "
                "(for example with img2dataset) and pass its output")
    if caption:
        return f"a caption ({layout}) without an image: give the record its image (image or images)"
    return None


def count_placeholders(messages: Iterable[dict[str, str]]) -> int:
    """Number of ``<image>`` placeholders in a conversation."""
    return sum(m["content"].count(IMAGE_TOKEN) for m in messages)
