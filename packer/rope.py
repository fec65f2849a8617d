"""Position ids for packed sequences: reset at every sample boundary.

For the Qwen2-VL family the model uses 3-row multimodal rotary positions
(temporal, height, width): text tokens advance all three rows together; the
tokens of an image share one temporal index and take their row and column in the
merged patch grid, offset by the position where the image starts; text after an
image continues from the largest position used so far plus one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def text_positions(length: int) -> np.ndarray:
    """``0 .. length-1``: positions of one sample without multimodal rotary ids."""
    return np.arange(length, dtype=np.int64)


def mrope_positions(input_ids: Sequence[int], image_token_id: int, grids: Sequence[Sequence[int]],
                    merge_size: int) -> np.ndarray:
    """3 × L multimodal rotary position ids of one sample (positions start at 0).

    Args:
        input_ids: the sample's token ids with image placeholders expanded.
        image_token_id: id of the image placeholder token.
        grids: ``[t, h, w]`` patch grid per image, in order of appearance.
        merge_size: the vision merger's spatial merge size (2 for Qwen2-VL).

    Raises:
        ValueError: the image tokens in ``input_ids`` do not match the grids.
    """
    ids = np.asarray(input_ids, dtype=np.int64)
    out = np.empty((3, ids.size), dtype=np.int64)
    is_image = ids == image_token_id
    pos = 0          # where the next token is written
    next_value = 0   # the next free position value
    for t, h, w in grids:
        gh, gw = h // merge_size, w // merge_size
        n = t * gh * gw
        rest = np.flatnonzero(is_image[pos:])
        if rest.size == 0:
            raise ValueError("fewer image tokens in the text than images")
        start = pos + int(rest[0])
        # text before the image
        span = start - pos
        out[:, pos:start] = np.arange(next_value, next_value + span)
        next_value += span
        if start + n > ids.size or not is_image[start:start + n].all():
            raise ValueError(f"an image of grid {[t, h, w]} needs {n} consecutive image tokens")
        tt = np.repeat(np.arange(t), gh * gw)
        hh = np.tile(np.repeat(np.arange(gh), gw), t)
        ww = np.tile(np.arange(gw), t * gh)
        out[0, start:start + n] = tt + next_value
        out[1, start:start + n] = hh + next_value
        out[2, start:start + n] = ww + next_value
        next_value = int(max(tt.max(), hh.max(), ww.max())) + next_value + 1
        pos = start + n
    if is_image[pos:].any():
        raise ValueError("more image tokens in the text than images")
    out[:, pos:] = np.arange(next_value, next_value + ids.size - pos)
    return out
