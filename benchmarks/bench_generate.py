"""Benchmark of the transformers generation backend against a bare transformers loop.

Usage:
    python benchmarks/bench_generate.py                   # tiny offline Qwen2-VL, 48 prompts x 8 samples
    python benchmarks/bench_generate.py --quick           # 12 prompts x 4 samples
    python benchmarks/bench_generate.py --model ckpt/ --device cuda --dtype bfloat16

Both sides use the same model object, the same prompts and images, batch size,
``num_return_sequences``, temperature, top-p and ``max_new_tokens``. The bare
loop is what a user would write: chat template, processor with left padding,
``model.generate(do_sample=True, ...)``, ``batch_decode``. The backend adds image
checks (:func:`curate.core.images.decode`), per-sample seeded sampling, truncation
flags and bookkeeping. The two alternate batch by batch (bare then backend on
one batch, the other way round on the next), so load from other processes on a
shared machine hits both alike. Prints prompts/s, answers/s, generated
tokens/s of each and the ratio backend/bare (1.0 = no overhead), overall and
the median over rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from curate.generate.base import GenerationRequest, SamplingParams  # noqa: E402
from curate.generate import make_backend  # noqa: E402


def _images(folder: Path, count: int, seed: int) -> list[str]:
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        h, w = int(rng.integers(56, 400)), int(rng.integers(56, 400))
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        path = folder / f"img{i:03d}.jpg"
        Image.fromarray(img).save(path, quality=90)
        paths.append(str(path))
    return paths


def _bare_loop(model, processor, requests: list[GenerationRequest], batch_size: int, sp: SamplingParams,  # noqa: ANN001
               device: str) -> tuple[int, int]:
    """Generate like a user script would; returns (answers, generated tokens)."""
    import torch
    from PIL import Image

    answers = tokens = 0
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    for start in range(0, len(requests), batch_size):
        batch = requests[start : start + batch_size]
        texts, images = [], []
        for req in batch:
            question = req.messages[0]["content"].replace("<image>", "")
            msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
            texts.append(processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True))
            images.extend(Image.open(p).convert("RGB") for p in req.images)
        inputs = processor(text=texts, images=images, return_tensors="pt", padding=True, padding_side="left").to(device)
        with torch.inference_mode():
            out = model.generate(**inputs, do_sample=True, num_return_sequences=batch[0].n,
                                 max_new_tokens=sp.max_new_tokens, temperature=sp.temperature, top_p=sp.top_p, top_k=0)
        new = out[:, inputs["input_ids"].shape[1] :]
        decoded = processor.batch_decode(new, skip_special_tokens=True)
        answers += len(decoded)
        tokens += int(sum(next((j + 1 for j, t in enumerate(row) if t in eos), len(row)) for row in new.tolist()))
    return answers, tokens


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint folder (default: build the tiny offline Qwen2-VL)")
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts per generate call")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rounds", type=int, default=3, help="passes over all prompts")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="12 prompts x 4 samples, 2 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.n, args.rounds = 12, 4, 2

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory(prefix="bench-generate-")
    root = Path(tmp.name)
    if args.model is None:
        from curate.fixtures.tiny_vlm import build_tiny_vlm

        args.model = str(build_tiny_vlm(root / "tiny-vlm", seed=0))
    paths = _images(root, args.prompts, args.seed)
    sp = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                        seed=args.seed)
    questions = ["What is in the image?", "Describe the picture in one sentence.", "How many objects are there?"]
    requests = [GenerationRequest(key=f"p{i}", messages=[{"role": "user", "content": "<image>\n" + questions[i % 3]}],
                                  images=[p], n=args.n, sampling=sp) for i, p in enumerate(paths)]

    backend = make_backend(model=args.model, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    model, processor = backend.model, backend.processor
    device = backend.device
    backend.generate(requests[: min(2, len(requests))])  # warm-up (first-call allocations)

    # Interleave at the batch level (bare, backend on batch 1; backend, bare on batch 2; ...) so that
    # load from other processes, which drifts over seconds, hits both sides alike.
    chunks = [requests[i : i + args.batch_size] for i in range(0, len(requests), args.batch_size)]
    bare_times, backend_times, ratios = [], [], []
    bare_tokens = backend_answers = 0
    for _ in range(args.rounds):
        t_bare = t_ours = 0.0
        for c, chunk in enumerate(chunks):
            for side in ((0, 1) if c % 2 == 0 else (1, 0)):
                t0 = time.perf_counter()
                if side == 0:
                    _, tokens = _bare_loop(model, processor, chunk, args.batch_size, sp, device)
                    t_bare += time.perf_counter() - t0
                    bare_tokens += tokens
                else:
                    results = backend.generate(chunk)
                    t_ours += time.perf_counter() - t0
                    backend_answers += sum(len(r.responses) for r in results)
                    errors = sum(r.error is not None for r in results)
                    if errors:
                        raise SystemExit(f"{errors} requests failed in the backend")
        bare_times.append(t_bare)
        backend_times.append(t_ours)
        ratios.append(t_bare / t_ours)
    bare, ours = sum(bare_times), sum(backend_times)
    answers = args.prompts * args.n * args.rounds
    prompts = args.prompts * args.rounds
    print(f"model {args.model}  device {device}  dtype {args.dtype}  threads {torch.get_num_threads()}")
    print(f"{args.prompts} prompts x {args.n} samples x {args.rounds} rounds, batch {args.batch_size} prompts, "
          f"max_new_tokens {args.max_new_tokens}, temperature {args.temperature}, top_p {args.top_p}")
    print(f"bare loop : {bare:8.3f} s  {prompts / bare:8.2f} prompts/s  {answers / bare:8.1f} answers/s  "
          f"{bare_tokens / bare:8.1f} tokens/s  (rounds: {', '.join(f'{t:.2f}' for t in bare_times)})")
    print(f"backend   : {ours:8.3f} s  {prompts / ours:8.2f} prompts/s  {backend_answers / ours:8.1f} answers/s"
          f"  (rounds: {', '.join(f'{t:.2f}' for t in backend_times)})")
    print(f"per-round ratios: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"throughput ratio backend/bare: {bare / ours:.3f} overall, {statistics.median(ratios):.3f} median "
          f"round  (target >= 0.9)")
    backend.close()
    tmp.cleanup()


if __name__ == "__main__":
    main()
