"""Benchmark of the reward verifiers: scored responses per second and p99 latency.

Per verifier, on realistic responses (right and wrong answers, both prompt styles):

- ``score`` : one ``curate.rewards.score`` call at a time (latency p50/p99);
- ``batch`` : ``score_many`` over prompts of 16 samples (the rl-filter pattern), in one
  process and in ``--procs`` processes (default 2, one per core);
- ``base``  : a bare baseline measured in the same run: the anchor's regex extraction
  plus a direct comparison (string equality, ``float``, rapidfuzz), or math-verify
  called in-process without isolation or time limits; ``ratio`` = batch / base;
- ``http``  : through the FastAPI service started on loopback (2 server processes), 16
  samples per request and 8 concurrent clients (throughput and request p99), and with
  256 items per request and 4 clients (``http@256``). Client and server share the 2 cores.

Usage: ``.venv/bin/python benchmarks/bench_rewards.py [--quick] [--procs 2] [--no-http]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

SAMPLES = 16
THOUGHT = "<think>" + "I look at the image, compare the candidates and check my reasoning twice. " * 3 + "</think>\n"


def _wrap(rng: random.Random, answer: str) -> tuple[str, str]:
    """A response and its prompt type (half answer-only, half think)."""
    if rng.random() < 0.5:
        return f"<answer>{answer}</answer>", "normal"
    return f"{THOUGHT}<answer>{answer}</answer>", "think"


def make_items(verifier: str, n_prompts: int, seed: int = 0) -> list[tuple[dict, str]]:
    """``n_prompts`` x 16 realistic (record, response) pairs for ``verifier``."""
    rng = random.Random(seed)
    items = []
    for p in range(n_prompts):
        if verifier == "choice":
            gold = rng.choice("ABCD")
            rec = {"answer": gold, "answer_type": "multiple-choice"}
            answers = [rng.choice([gold, f"({gold})", f"{gold}. the red one", f"The answer is {gold}", rng.choice("ABCD")])
                       for _ in range(SAMPLES)]
        elif verifier == "number":
            gold = rng.randint(0, 2000)
            rec = {"answer": str(gold), "answer_type": "number"}
            answers = [rng.choice([str(gold), f"{gold:,}", f"{gold}.0", f"There are {gold + rng.randint(-2, 2)} objects"])
                       for _ in range(SAMPLES)]
        elif verifier == "boolean":
            gold = rng.choice(["yes", "no"])
            rec = {"answer": gold, "answer_type": "boolean"}
            answers = [rng.choice(["Yes", "No", "yes.", "No, it is not.", "I am not sure"]) for _ in range(SAMPLES)]
        elif verifier == "string":
            gold = rng.choice(["Paris", "a red car", "the left one", "Mount Fuji"])
            rec = {"answer": gold, "answer_type": "any"}
            answers = [rng.choice([gold, gold.upper(), gold + ".", "Lyon", "\\text{" + gold + "}"]) for _ in range(SAMPLES)]
        elif verifier == "ocr":
            gold = " ".join(rng.choice(["invoice", "total", "2024", "Main", "Street", "receipt", "café"]) for _ in range(6))
            rec = {"answer": gold, "answer_type": "ocrtext"}
            answers = [gold if rng.random() < 0.3 else "".join(c if rng.random() > 0.1 else "x" for c in gold)
                       for _ in range(SAMPLES)]
        elif verifier == "critic":
            gold = rng.choice(["correct", "incorrect"])
            rec = {"answer": gold, "answer_type": "critic"}
            answers = [rng.choice(["Correct", "incorrect", "correct."]) for _ in range(SAMPLES)]
        elif verifier == "bbox":
            x, y = rng.randint(0, 500), rng.randint(0, 300)
            rec = {"answer": json.dumps([x, y, x + 100, y + 80]), "answer_type": "bbox", "image_size": [640, 480]}
            answers = [json.dumps({"bbox_2d": [x + rng.randint(-20, 20), y + rng.randint(-20, 20), x + 100, y + 80], "label": "obj"})
                       for _ in range(SAMPLES)]
        elif verifier == "math":
            a, b = rng.randint(1, 30), rng.randint(2, 30)
            rec = {"answer": f"\\frac{{{a}}}{{{b}}}", "answer_type": "math-expressions"}
            answers = [rng.choice([f"\\frac{{{a}}}{{{b}}}", f"{a}/{b}", f"{a / b:.6f}", f"\\frac{{{a + 1}}}{{{b}}}",
                                   f"\\dfrac{{{2 * a}}}{{{2 * b}}}", f"{a}/{b + 1}"]) for _ in range(SAMPLES)]
        elif verifier == "html":
            gold = "<div><h1>Title</h1><p>Some text</p><ul><li>a</li><li>b</li></ul></div>"
            rec = {"answer": gold, "answer_type": "html-code"}
            answers = [gold.replace("Title", rng.choice(["Title", "Heading"])).replace("<li>b</li>", rng.choice(["", "<li>b</li>"]))
                       for _ in range(SAMPLES)]
        elif verifier == "detection":
            boxes = [{"bbox_2d": [i * 60, 10, i * 60 + 50, 60], "label": rng.choice(["cat", "dog"])} for i in range(4)]
            rec = {"answer": json.dumps(boxes), "answer_type": "bbox", "reward": {"verifier": "detection"}}
            answers = [json.dumps([{**b, "bbox_2d": [v + rng.randint(-5, 5) for v in b["bbox_2d"]]}
                                   for b in boxes[: rng.randint(1, 4)]]) for _ in range(SAMPLES)]
        else:
            raise ValueError(verifier)
        for ans in answers:
            response, style = _wrap(rng, ans)
            items.append(({**rec, "id": f"{verifier}-{p}", "prompt_type": style}, response))
    return items


# ---------------------------------------------------------------------------- baselines

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _bare_extract(text: str) -> str:
    m = _ANSWER.findall(text)
    return m[-1].strip() if m else ""


def baseline(verifier: str, items: list[tuple[dict, str]]) -> float:
    """Throughput of a bare scorer (no safety, no normalisation): responses/s."""
    from rapidfuzz.distance import Levenshtein

    t0 = time.perf_counter()
    if verifier == "math":
        import logging

        from math_verify import parse, verify

        logging.getLogger("math_verify").setLevel(logging.CRITICAL)
        for rec, resp in items:
            verify(parse(f"${rec['answer']}$", parsing_timeout=None), parse(f"${_bare_extract(resp)}$", parsing_timeout=None),
                   timeout_seconds=None)
    elif verifier == "ocr":
        for rec, resp in items:
            Levenshtein.normalized_similarity(_bare_extract(resp).lower(), rec["answer"].lower())
    elif verifier == "number":
        for rec, resp in items:
            nums = re.findall(r"[0-9.]+", _bare_extract(resp))
            float(nums[-1] == rec["answer"]) if nums else 0.0
    else:
        for rec, resp in items:
            float(_bare_extract(resp).lower() == str(rec["answer"]).lower())
    return len(items) / (time.perf_counter() - t0)


# ---------------------------------------------------------------------------- measurements


def _p(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def bench_single(items: list[tuple[dict, str]]) -> tuple[float, float, float]:
    """``(responses/s, p50 ms, p99 ms)`` of one ``score`` call at a time."""
    from curate.rewards.registry import score

    lat = []
    t0 = time.perf_counter()
    for rec, resp in items:
        s = time.perf_counter()
        score(rec, resp)
        lat.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    return len(items) / total, 1000 * _p(lat, 0.5), 1000 * _p(lat, 0.99)


def _batch_worker(items: list[tuple[dict, str]]) -> int:
    from curate.rewards.registry import score_many

    for i in range(0, len(items), SAMPLES):
        score_many(items[i : i + SAMPLES])
    return len(items)


def bench_batch(items: list[tuple[dict, str]], procs: int) -> float:
    """Responses/s of ``score_many`` per prompt of 16, in ``procs`` processes."""
    if procs <= 1:
        t0 = time.perf_counter()
        _batch_worker(items)
        return len(items) / (time.perf_counter() - t0)
    prompts = [items[i : i + SAMPLES] for i in range(0, len(items), SAMPLES)]
    chunks = [[it for p in prompts[k::procs] for it in p] for k in range(procs)]
    with ProcessPoolExecutor(procs) as ex:
        list(ex.map(_batch_worker, [c[:SAMPLES] for c in chunks]))  # warm each process
        t0 = time.perf_counter()
        done = sum(ex.map(_batch_worker, chunks))
        return done / (time.perf_counter() - t0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workers: int) -> tuple[subprocess.Popen, str]:
    """Start the reward service on loopback; ``(process, base_url)``."""
    import httpx

    port = _free_port()
    code = f"from curate.rl.serve import serve; serve(host='127.0.0.1', port={port}, workers={workers})"
    proc = subprocess.Popen([sys.executable, "-c", code])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the reward service did not start")


def bench_http(url: str, items: list[tuple[dict, str]], clients: int = 8, per_request: int = SAMPLES) -> tuple[float, float]:
    """``(responses/s, request p99 ms)`` with ``per_request`` items per request and ``clients`` threads."""
    import httpx

    bodies = [{"items": [{"record": r, "response": s} for r, s in items[i : i + per_request]]}
              for i in range(0, len(items), per_request)]
    lat: list[float] = []

    def send(chunk: list[dict]) -> None:
        with httpx.Client(timeout=120) as client:
            for body in chunk:
                s = time.perf_counter()
                r = client.post(url + "/score", json=body)
                r.raise_for_status()
                lat.append(time.perf_counter() - s)

    send(bodies[:2])  # warm
    lat.clear()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        list(ex.map(send, [bodies[k::clients] for k in range(clients)]))
    total = time.perf_counter() - t0
    return len(items) / total, 1000 * _p(lat, 0.99)


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (fewer prompts)")
    ap.add_argument("--procs", type=int, default=2, help="processes for the parallel batch column")
    ap.add_argument("--no-http", action="store_true", help="skip the HTTP service")
    ap.add_argument("--http-workers", type=int, default=2, help="uvicorn server processes")
    args = ap.parse_args()

    from curate.rewards.runtime.limits import warm_up

    warm_up(wait=True)
    scale = 1 if args.quick else 5
    plan = {"choice": 120, "number": 120, "boolean": 120, "string": 120, "ocr": 120, "critic": 120,
            "bbox": 120, "html": 60, "math": 25, "detection": 10}
    server = None
    if not args.no_http:
        server, url = start_server(args.http_workers)
    print(f"curate rewards benchmark ({'quick' if args.quick else 'full'}; {os.cpu_count()} CPUs; "
          f"batch={SAMPLES} samples per prompt)")
    header = (f"{'verifier':<10}{'n':>7}{'score/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'batch/s':>10}"
              f"{'batch/s x' + str(args.procs):>12}{'base/s':>10}{'ratio':>7}{'http/s':>9}{'http p99':>10}{'http@256/s':>12}")
    print(header)
    print("-" * len(header))
    try:
        for name, prompts in plan.items():
            items = make_items(name, prompts * scale, seed=1)
            fresh = make_items(name, prompts * scale, seed=2)  # unseen answers: no cache hits
            single, p50, p99 = bench_single(fresh[: min(len(fresh), 2000)])
            batch = bench_batch(items, 1)
            par = bench_batch(make_items(name, prompts * scale, seed=3), args.procs)
            base = baseline(name, items)
            http, hp99 = bench_http(url, make_items(name, prompts * scale, seed=4)) if server else (float("nan"),) * 2
            big = bench_http(url, make_items(name, prompts * scale, seed=5), clients=4, per_request=256)[0] if server else float("nan")
            print(f"{name:<10}{len(items):>7}{single:>10.0f}{p50:>9.2f}{p99:>9.2f}{batch:>10.0f}{par:>12.0f}"
                  f"{base:>10.0f}{batch / base:>7.2f}{http:>9.0f}{hp99:>10.1f}{big:>12.0f}", flush=True)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
    print("score/s: one call at a time; batch/s: score_many per prompt in one process; batch/s xN: in N processes;\n"
          "base/s: bare anchor-style scorer in this process; ratio: batch/base; http: 16 items per request, 8 clients;\n"
          "http@256: 256 items per request, 4 clients.")


if __name__ == "__main__":
    main()
