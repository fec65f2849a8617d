"""``curate match``: captions/s per core against the 500K vocabulary, and agreement with brute force.

Usage:
    python benchmarks/bench_match.py            # 1M captions x vocab/500k.txt; end to end on 200K records
    python benchmarks/bench_match.py --quick    # 100K captions; end to end on 20K

Captions are seeded: 80% English (5-25 words drawn Zipf-like from the vocabulary's
Latin-script entries, with commas and periods), 20% Chinese (CJK entries run
together without spaces). Prints:

* the automaton's build and load times;
* matcher captions/s in one process (one core; target >= 20K/s);
* agreement with the brute-force reference matcher (every entry searched with
  ``str.find``) on a seeded sample of captions (target 100%);
* end to end ``curate match`` (JSONL records read, matched, tags written)
  records/s with --workers 1 and 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from curate.balance.matching.automaton import TextMatcher, brute_force_counts  # noqa: E402
from curate.balance.vocab.files import load_vocab  # noqa: E402


def captions(entries: list[str], n: int, seed: int = 0) -> list[str]:
    """Seeded English and Chinese captions built from vocabulary entries."""
    rng = np.random.default_rng(seed)
    latin = [e for e in entries[:200_000] if e and e.isascii() and e.isalpha()]
    cjk = [e for e in entries[:200_000] if e and "\u4e00" <= e[0] <= "\u9fff"]
    cdf_l = np.cumsum(1.0 / np.arange(1, len(latin) + 1) ** 1.05)
    cdf_c = np.cumsum(1.0 / np.arange(1, len(cjk) + 1) ** 1.05)
    is_latin = rng.random(n) < 0.8
    sizes = np.where(is_latin, rng.integers(5, 26, n), rng.integers(3, 12, n))
    draws = rng.random(int(sizes.sum()))
    pick_l = np.searchsorted(cdf_l, draws * cdf_l[-1])
    pick_c = np.searchsorted(cdf_c, draws * cdf_c[-1])
    out = []
    start = 0
    for latin_caption, size in zip(is_latin.tolist(), sizes.tolist()):
        if latin_caption:
            text = " ".join(latin[j] for j in pick_l[start:start + size].tolist()).capitalize()
            out.append(text.replace(" ", ", ", 1) + ".")
        else:
            out.append("".join(cjk[j] for j in pick_c[start:start + size].tolist()) + "。")
        start += size
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--e2e", type=int, default=200_000, help="records for the end-to-end runs")
    ap.add_argument("--sample", type=int, default=40, help="captions checked against brute force")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.e2e, args.sample = 100_000, 20_000, 10
    vocab = ROOT / "vocab" / "500k.txt"
    entries = load_vocab(Path(vocab))
    print(f"match text: {args.n:,} captions x {len(entries):,} entries; machine: {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    t0 = time.perf_counter()
    texts = captions(entries, args.n)
    print(f"  captions made in {time.perf_counter() - t0:.1f} s, mean {np.mean([len(t) for t in texts]):.0f} chars")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        matcher = TextMatcher(entries)
        build = time.perf_counter() - t0
        matcher.save(tmp / "a.bin")
        t0 = time.perf_counter()
        matcher = TextMatcher.load(tmp / "a.bin")
        print(f"  automaton: built in {build:.1f} s, loaded in {time.perf_counter() - t0:.1f} s")
        cpu0, t0 = time.process_time(), time.perf_counter()
        matches = sum(len(matcher.match(t)[0]) for t in texts)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        print(f"  matcher: {args.n / cpu:,.0f} captions/s per core (CPU time; {args.n / wall:,.0f}/s wall), "
              f"{matches / args.n:.1f} matches per caption  (target >= 20,000/s)")
        rng = np.random.default_rng(1)
        sample = rng.choice(len(texts), args.sample, replace=False)
        t0 = time.perf_counter()
        agree = sum(matcher.counts(texts[i]) == brute_force_counts(texts[i], entries) for i in sample)
        print(f"  agreement with brute force: {agree}/{len(sample)} captions ({100 * agree / len(sample):.1f}%; "
              f"brute force took {time.perf_counter() - t0:.0f} s)")
        data = tmp / "records.jsonl"
        with open(data, "w") as fh:
            for i, text in enumerate(texts[:args.e2e]):
                fh.write(json.dumps({"id": f"c{i}", "source": "bench", "caption": text}, ensure_ascii=False) + "\n")
        rates = {}
        for workers in (1, 2):
            out = tmp / f"out{workers}"
            cmd = [sys.executable, "-m", "curate", "match", str(data), "--vocab", str(vocab), "--out", str(out),
                   "--workers", str(workers), "--shard-size", str(args.e2e // 8)]
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
                           stdout=subprocess.DEVNULL)
            rates[workers] = args.e2e / (time.perf_counter() - t0)
            print(f"  curate match --workers {workers}: {rates[workers]:,.0f} records/s end to end "
                  f"({args.e2e:,} JSONL records, process start and automaton included)")
        same = (tmp / "out1" / "tags.parquet").read_bytes() == (tmp / "out2" / "tags.parquet").read_bytes()
        print(f"  --workers 2 / 1: {rates[2] / rates[1]:.2f}x; same tags.parquet bytes: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
