"""Benchmark of ``curate recaption`` against a bare loop calling the same backend with the same settings.

Usage:
    python benchmarks/bench_recaption.py                 # tiny offline Qwen2-VL, 48 records x en,zh, 5 rounds
    python benchmarks/bench_recaption.py --quick         # 16 records, 3 rounds
    python benchmarks/bench_recaption.py --model ckpt/ --device cuda --dtype bfloat16
    python benchmarks/bench_recaption.py --endpoint http://127.0.0.1:8000/v1 --served-model NAME --concurrency 32

Both sides open the backend (``make_backend``, so model loading counts on both
sides), send the same requests (keys ``<id>#<lang>``, the default prompts, the
same sampling settings and seed, hence the same answers), check every answer
with :func:`curate.recaption.checks.check_caption` and ask once more, under the
key ``<id>#<lang>#retry``, for the answers that fail. The bare loop keeps the
captions in a list; the stage (:func:`curate.recaption.stage.recaption`, as the CLI
calls it, into a fresh folder every round) also reads the records, shards,
journals every answer, and writes captions.parquet, records.jsonl, the rejects
and stats.json. Sides alternate in order from round to round. Prints
captions/s of each and the ratio stage/bare (1.0 = no overhead; target >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from curate.recaption.config import RecaptionConfig
from curate.core.stats import HISTORY  # noqa: E402
from curate.recaption.checks import check_caption  # noqa: E402
from curate.generate.base import GenerationRequest, SamplingParams  # noqa: E402
from curate.generate import make_backend  # noqa: E402
from curate.recaption.config import DEFAULT_PROMPTS  # noqa: E402
from curate.recaption.prompts import caption_key, user_turn  # noqa: E402
from curate.recaption.retries import RETRY  # noqa: E402
from curate.recaption.stage import recaption  # noqa: E402


def _records(folder: Path, count: int, seed: int) -> tuple[Path, list[tuple[str, str]]]:
    """``count`` caption records with random images of 56-224 px; returns the file and (id, image) pairs."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows, pairs = [], []
    for i in range(count):
        h, w = int(rng.integers(56, 224)), int(rng.integers(56, 224))
        path = folder / "images" / f"img{i:04d}.jpg"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path, quality=90)
        rows.append({"id": f"rec{i:04d}", "source": "bench", "image": str(path), "caption": "alt text"})
        pairs.append((f"rec{i:04d}", str(path)))
    src = folder / "records.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return src, pairs


def _bare_loop(backend_args: dict[str, Any], pairs: list[tuple[str, str]], langs: list[str],
               sp: SamplingParams) -> tuple[int, int]:
    """What a user script would do with the backend; returns (captions kept, requests sent)."""
    backend = make_backend(**backend_args)
    try:
        def request(rid: str, image: str, lang: str, suffix: str = "") -> GenerationRequest:
            return GenerationRequest(key=caption_key(rid, lang) + suffix,
                                     messages=[{"role": "user", "content": user_turn(DEFAULT_PROMPTS[lang])}],
                                     images=[image], n=1, sampling=sp)

        items = [(rid, image, lang) for rid, image in pairs for lang in langs]
        first = backend.generate([request(*it) for it in items])
        captions: list[str] = []
        again = []
        for it, res in zip(items, first):
            if res.error is not None:
                continue
            check = check_caption(res.responses[0], it[2], truncated=res.truncated[0])
            if check.ok:
                captions.append(check.caption)
            else:
                again.append(it)
        for it, res in zip(again, backend.generate([request(*it, RETRY) for it in again])):
            if res.error is None:
                check = check_caption(res.responses[0], it[2], truncated=res.truncated[0])
                if check.ok:
                    captions.append(check.caption)
        return len(captions), len(items) + len(again)
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint folder (default: build the tiny offline Qwen2-VL)")
    parser.add_argument("--endpoint", default=None, help="OpenAI-compatible server instead of --model")
    parser.add_argument("--served-model", default=None)
    parser.add_argument("--concurrency", type=int, default=None, help="--endpoint: calls in flight")
    parser.add_argument("--records", type=int, default=48)
    parser.add_argument("--langs", default="en,zh")
    parser.add_argument("--batch-size", type=int, default=8, help="--model: prompts per generate call")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: steadier on a shared machine; 0: torch's choice)")
    parser.add_argument("--shard-size", type=int, default=1000, help="records per shard of the stage (CLI default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="16 records, 16 new tokens, 3 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.max_new_tokens, args.rounds = 16, 16, 3
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory(prefix="bench-recaption-")
    root = Path(tmp.name)
    if args.endpoint:
        backend_args: dict[str, Any] = {"endpoint": args.endpoint, "served_model": args.served_model,
                                        **({"concurrency": args.concurrency} if args.concurrency else {})}
    else:
        if args.model is None:
            from curate.fixtures.tiny_vlm import build_tiny_vlm

            args.model = str(build_tiny_vlm(root / "tiny-vlm", seed=0))
        backend_args = {"model": args.model, "device": args.device, "dtype": args.dtype,
                        "batch_size": args.batch_size}
    langs = [lang.strip() for lang in args.langs.split(",")]
    src, pairs = _records(root / "data", args.records, args.seed)
    sampling = {"temperature": args.temperature, "top_p": args.top_p, "max_new_tokens": args.max_new_tokens}
    sp = SamplingParams(seed=args.seed, **sampling)
    # warm-up of both sides: imports, page cache, first-call allocations
    _bare_loop(backend_args, pairs[:2], langs, sp)
    warm = root / "warm.jsonl"
    warm.write_text("".join(src.read_text(encoding="utf-8").splitlines(keepends=True)[:2]), encoding="utf-8")
    recaption([str(warm)], RecaptionConfig(out=root / "warm", backend=backend_args, langs=langs, **sampling,
                                           seed=args.seed))

    bare_times, stage_times, ratios = [], [], []
    bare_kept = stage_kept = requests = 0
    for r in range(args.rounds):
        t_bare = t_stage = 0.0
        for side in ((0, 1) if r % 2 == 0 else (1, 0)):
            t0 = time.perf_counter()
            if side == 0:
                bare_kept, requests = _bare_loop(backend_args, pairs, langs, sp)
                t_bare = time.perf_counter() - t0
            else:
                stats = recaption([str(src)], RecaptionConfig(out=root / f"out{r}", backend=backend_args, langs=langs,
                                                              **sampling, seed=args.seed, shard_size=args.shard_size))
                t_stage = time.perf_counter() - t0
                stage_kept = stats["captions"]["kept"]
                # backend counters are a run's history, not its stats (stats.json is the same for a resumed run)
                history = json.loads((root / f"out{r}" / HISTORY).read_text(encoding="utf-8"))
                stage_requests = history["recaption"]["generation"]["requests"]
        if stage_kept != bare_kept or stage_requests != requests:
            print(f"warning: stage kept {stage_kept} ({stage_requests} requests), bare loop {bare_kept} "
                  f"({requests} requests): answers differ between the sides")
        bare_times.append(t_bare)
        stage_times.append(t_stage)
        ratios.append(t_bare / t_stage)
    bare, stage = sum(bare_times), sum(stage_times)
    captions = args.records * len(langs) * args.rounds
    where = args.endpoint or f"{args.model}  device {args.device}  dtype {args.dtype}"
    import torch

    print(f"backend {where}  torch threads {torch.get_num_threads()}")
    print(f"{args.records} records x {','.join(langs)} x {args.rounds} rounds, max_new_tokens {args.max_new_tokens}, "
          f"temperature {args.temperature}, top_p {args.top_p}; {requests} requests per round "
          f"({requests - args.records * len(langs)} retries), {bare_kept} captions kept")
    print(f"bare loop : {bare:8.3f} s  {captions / bare:8.2f} captions/s  "
          f"(rounds: {', '.join(f'{t:.2f}' for t in bare_times)})")
    print(f"recaption : {stage:8.3f} s  {captions / stage:8.2f} captions/s  "
          f"(rounds: {', '.join(f'{t:.2f}' for t in stage_times)})")
    print(f"per-round ratios: {', '.join(f'{x:.3f}' for x in ratios)}")
    print(f"throughput ratio recaption/bare: {bare / stage:.3f} overall, {statistics.median(ratios):.3f} median "
          f"round  (target >= 0.9)")
    tmp.cleanup()


if __name__ == "__main__":
    main()
