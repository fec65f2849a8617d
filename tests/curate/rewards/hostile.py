"""A deterministic corpus of hostile model outputs for the fuzz test and the benchmark."""

from __future__ import annotations

import json
import random

SVG_NS = 'xmlns="http://www.w3.org/2000/svg"'

BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10))
    + f"]><svg {SVG_NS}><text>&lol9;</text></svg>"
)


def _use_bomb(levels: int) -> str:
    defs = [f'<g id="l0"><rect width="1" height="1"/></g>']
    for i in range(1, levels):
        defs.append(f'<g id="l{i}"><use href="#l{i - 1}"/><use href="#l{i - 1}" x="1"/></g>')
    return f'<svg {SVG_NS} width="100" height="100"><defs>{"".join(defs)}</defs><use href="#l{levels - 1}"/></svg>'


SLOW_MATH = [
    "9^{9^{9^{9}}}",
    "10^{10^{10^{10}}}",
    "\\prod_{i=1}^{10^{9}} i",
    "x^{x^{x^{x^{x^{x}}}}}",
    "(2^{2^{2^{2^{2^{2}}}}})!",
    "\\sum_{n=1}^{10^{12}} n^{n}",
]

CODE = [
    "while True:\n    pass",
    "import os\nwhile True:\n    os.fork()",
    "import socket\nsocket.create_connection(('127.0.0.1', 9))",
    "open('/tmp/curate-fuzz-escape', 'w').write('x')",
    "x = bytearray(10 ** 10)",
    "while True:\n    print('y' * 100000)",
    "import time\ntime.sleep(100)",
    "def f(n):\n    return f(n + 1)\nf(0)",
]

SVG_HOSTILE = [
    BILLION_LAUGHS,
    _use_bomb(24),
    f'<svg {SVG_NS} width="100000000" height="100000000"><rect width="100%" height="100%"/></svg>',
    f'<svg {SVG_NS}>' + "<g>" * 20000 + "</g>" * 20000 + "</svg>",
    f'<svg {SVG_NS}><image href="file:///etc/passwd" width="10" height="10"/></svg>',
    f'<svg {SVG_NS}><filter id="f"><feGaussianBlur stdDeviation="100000"/></filter><rect width="50" height="50" filter="url(#f)"/></svg>',
    f'<svg {SVG_NS} width="10" height="10"><rect width="5" height="5"',
]

BOXES = [
    '{"bbox_2d": [1, 2,',
    "[" * 5000 + "]" * 5000,
    '{"bbox_2d": "abc", "label": 5}',
    "[NaN, 1, 2, 3]",
    "[1e999, 0, 1e999, 1]",
    "[-1e308, -1e308, 1e308, 1e308]",
    json.dumps([{"bbox_2d": [i, i, i + 5, i + 5], "label": "cat"} for i in range(1000)]),
    json.dumps([{"bbox_2d": [0, 0, 10, 10], "label": "x" * 10000}] * 50),
    "[[0, 0, 0, 0], [5, 5, 1, 1], [1, 1, 1, 1]]",
    '{"bbox_2d": [true, false, null, 3]}',
]


def _garbage(rng: random.Random, n: int) -> str:
    return bytes(rng.getrandbits(8) for _ in range(n)).decode("latin-1")


def _printable(rng: random.Random, n: int) -> str:
    alphabet = "abcXYZ019 {}[]()<>/\\^_$,.;:=+-*\"'\n\t#%&!?`|~" + "αβ∑√∞表示\u200f\u200d\u0301"
    return "".join(rng.choice(alphabet) for _ in range(n))


def hostile_outputs(n: int = 10_000, seed: int = 0) -> list[str]:
    """``n`` hostile outputs (deterministic for ``seed``); the fixed cases come first."""
    rng = random.Random(seed)
    fixed: list[str] = []
    fixed += [f"<answer>{m}</answer>" for m in SLOW_MATH]
    fixed += [f"<answer>\n```python\n{c}\n```\n</answer>" for c in CODE]
    fixed += [f"<answer>{s}</answer>" for s in SVG_HOSTILE]
    fixed += [f"<answer>{b}</answer>" for b in BOXES]
    mb = 1_000_000
    fixed += [
        "a" * mb,
        "<answer>" + "x" * mb + "</answer>",
        "{" * mb,
        "\\boxed{" + "9" * mb + "}",
        "<answer>" * (mb // 8),
        "</answer>" * (mb // 9),
        "<think>" * (mb // 7),
        "\\boxed{" * (mb // 7),
        f"<answer><svg {SVG_NS}>" + "<g>" * (mb // 3) + "</answer>",
        _printable(rng, mb),
        "<answer>" + "\\frac{" * 100_000 + "1" + "}{2}" * 100_000 + "</answer>",
        "<answer>" + "(" * 200_000 + ")" * 200_000 + "</answer>",
        "<answer>" + "9" * 100_000 + "</answer>",
        "<answer>1e99999</answer>",
        "<answer>-0</answer>",
        "<answer>NaN</answer>",
        "<answer>\ud800\udfff</answer>",
        "<answer>" + "\u0301" * 10_000 + "</answer>",
        "<answer><!--" * 10_000,
        "<answer>" + "<html>" * 50_000 + "</answer>",
    ]
    out = list(fixed)
    while len(out) < n:
        kind = rng.random()
        if kind < 0.3:
            out.append(_garbage(rng, rng.randint(0, 2000)))
        elif kind < 0.5:
            out.append(f"<answer>{_printable(rng, rng.randint(0, 300))}</answer>")
        elif kind < 0.6:
            out.append("\\boxed{" + _printable(rng, rng.randint(0, 300)) + "}")
        elif kind < 0.7:
            depth = rng.randint(20, 3000)
            out.append("<answer>" + "\\frac{" * depth + "1" + "}{2}" * depth + "</answer>")
        elif kind < 0.8:
            out.append("<think>" + _printable(rng, rng.randint(0, 500)) + "</think>" + _printable(rng, rng.randint(0, 50)))
        elif kind < 0.9:
            out.append("<answer>" + rng.choice(BOXES[:6] + BOXES[8:]) + _printable(rng, rng.randint(0, 20)) + "</answer>")
        else:
            out.append(_garbage(rng, rng.randint(0, 40)) + "<answer>" + _garbage(rng, rng.randint(0, 40)) + "</answer>")
    return out[:n]
