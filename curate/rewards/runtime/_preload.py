"""Imported by the worker factory so that every forked worker starts warm.

Besides importing the heavy libraries, :func:`warm` runs each isolated task once on a
tiny input, so that lazy initialisation (sympy/antlr parsers, cairo, SSIM) happens
once in the factory instead of in every worker's first call.
"""

from __future__ import annotations

import logging

logging.getLogger("math_verify").setLevel(logging.CRITICAL)

import cairosvg  # noqa: E402,F401
import math_verify  # noqa: E402,F401
import numpy  # noqa: E402,F401
import pycocotools.coco  # noqa: E402,F401
import pycocotools.cocoeval  # noqa: E402,F401
import skimage.metrics  # noqa: E402,F401
from PIL import Image  # noqa: E402,F401

from curate.rewards.verifiers import detection, svg  # noqa: E402
from curate.rewards.verifiers import math as math_verifier  # noqa: E402


def warm() -> None:
    """Run each worker task once (output discarded)."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        math_verifier.compare(("\\frac{1}{2}", "x^2+1"), "0.5", 6)
        math_verifier.compare(("(1,2]",), "\\sqrt{4}", 6)
        math_verifier.compare(("x^2+2x+1",), "(x+1)^2", 6)
        math_verifier.compare(("\\sin^2 x + \\cos^2 x",), "1", 6)
        math_verifier.compare(("2",), "\\int_0^1 4x dx", 6)
        svg.render_ssim('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><rect width="4" height="4"/></svg>',
                        '<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><circle r="3"/></svg>', 32)
        detection.coco_map((("a", 0.0, 0.0, 1.0, 1.0),), (("a", 0.0, 0.0, 1.0, 0.5),), None)
    math_verifier.clear_cache()
    svg.clear_cache()
