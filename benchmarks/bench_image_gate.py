"""The image gate on a web-like mix: header only (the count step before issue 34), header + proof, full decode.

Usage:
    python benchmarks/bench_image_gate.py            # 1,500 images, three interleaved rounds (medians)
    python benchmarks/bench_image_gate.py --quick    # 300 images, one round

Builds a mix shaped like a web crawl from the real photos that scikit-image, scikit-learn and
matplotlib ship: resized to 300-1,600 px on the long side, 88% JPEG (quality 70-95, one in five
progressive), 8% PNG (photos: the costliest PNGs), 3% WEBP, and 1% broken files (a cut JPEG or PNG, a JPEG whose Huffman table
is damaged, a PNG whose compressed stream is cut but whose end chunk is there, a cut BMP). Every
image is read from its file, in one process, by:

* header: :func:`curate.core.images.probe` (the size from the header and an end-marker check);
* proof: :func:`curate.core.images.check` (the gate of ``pack``'s count step and ``verify``);
* decode: :func:`curate.core.images.decode` (what embed and the loader do: pixels, upright RGB).

Prints images/s of each, the ratio decode / proof (target: proof >= 5x cheaper than a full decode)
and how many broken files each accepts (target: the proof accepts none the full decode refuses).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from curate.core.images import ImageError, check, decode, probe  # noqa: E402
from curate.fixtures.sampledata_photos import load_photos  # noqa: E402


def _encode(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _broken(photo: Image.Image, kind: int) -> tuple[str, bytes]:
    jpeg, png = _encode(photo, "JPEG", quality=85), _encode(photo, "PNG")
    if kind == 0:
        return "jpg", jpeg[: len(jpeg) // 2]
    if kind == 1:  # a damaged Huffman table: the header reads fine, libjpeg refuses the scan
        at = jpeg.find(b"\xff\xc4")
        return "jpg", jpeg[:at + 4] + b"\xff" * 17 + jpeg[at + 21:]
    if kind == 2:  # the compressed stream cut, the chunk lengths and IEND kept: the header check passes
        at = png.find(b"IDAT") + 4
        length = int.from_bytes(png[at - 8:at - 4], "big")
        body = bytearray(png[at:at + length])
        body[len(body) // 3:] = bytes(len(body) - len(body) // 3)
        return "png", png[:at] + bytes(body) + png[at + length:]
    if kind == 3:
        return "png", png[: len(png) * 2 // 3]
    bmp = _encode(photo, "BMP")
    return "bmp", bmp[: len(bmp) // 2]


def make_mix(folder: Path, n: int, seed: int = 0) -> tuple[list[Path], set[Path]]:
    """``n`` image files shaped like a crawl; returns them and the broken ones."""
    rng = np.random.default_rng(seed)
    photos = [im.convert("RGB") for _, im in load_photos().values()]
    folder.mkdir(parents=True, exist_ok=True)
    files, broken = [], set()
    for i in range(n):
        photo = photos[int(rng.integers(len(photos)))]
        side = int(rng.integers(300, 1600))
        scale = side / max(photo.size)
        img = photo.resize((max(8, int(photo.width * scale)), max(8, int(photo.height * scale))))
        roll = rng.random()
        if roll < 0.01:
            ext, data = _broken(img, int(rng.integers(5)))
        elif roll < 0.04:
            ext, data = "webp", _encode(img, "WEBP", quality=int(rng.integers(70, 95)))
        elif roll < 0.12:
            ext, data = "png", _encode(img, "PNG")
        else:
            ext, data = "jpg", _encode(img, "JPEG", quality=int(rng.integers(70, 96)), progressive=rng.random() < 0.2)
        path = folder / f"{i:06d}.{ext}"
        path.write_bytes(data)
        files.append(path)
        if roll < 0.01:
            broken.add(path)
    return files, broken


def run(fn, files: list[Path]) -> tuple[float, set[Path]]:  # noqa: ANN001
    """Seconds to pass every file through ``fn``, and the files it accepted."""
    accepted = set()
    t0 = time.perf_counter()
    for path in files:
        try:
            fn(path)
            accepted.add(path)
        except ImageError:
            pass
    return time.perf_counter() - t0, accepted


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--repeat", type=int, default=None, help="interleaved rounds (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    n = 300 if args.quick else args.n
    repeat = args.repeat or (1 if args.quick else 3)
    modes = {"header": probe, "proof": check, "decode": decode}
    with tempfile.TemporaryDirectory() as tmp:
        files, broken = make_mix(Path(tmp) / "mix", n)
        size = sum(p.stat().st_size for p in files)
        print(f"image gate: {n:,} files ({size / 1e6:.0f} MB; {len(broken)} broken), one process; machine: "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        seconds: dict[str, list[float]] = {m: [] for m in modes}
        accepted: dict[str, set[Path]] = {}
        for round_no in range(repeat):
            for mode, fn in modes.items():
                took, accepted[mode] = run(fn, files)
                seconds[mode].append(took)
            if repeat > 1:
                print(f"  round {round_no + 1}: decode / proof {seconds['decode'][-1] / seconds['proof'][-1]:.2f}x")
        for mode in modes:
            took = statistics.median(seconds[mode])
            bad = len(accepted[mode] & broken)
            print(f"  {mode:6s}: {n / took:8,.0f} images/s, accepts {len(accepted[mode]):,} of {n:,} "
                  f"({bad} of the {len(broken)} broken)")
        ratio = statistics.median(seconds["decode"]) / statistics.median(seconds["proof"])
        print(f"  ratio decode / proof time{' (medians)' if repeat > 1 else ''}: {ratio:.2f}x  (target >= 5x)")
        wrong = accepted["proof"] - accepted["decode"]
        print(f"  accepted by the proof but refused by the full decode: {len(wrong)}  (target 0)")


if __name__ == "__main__":
    main()
