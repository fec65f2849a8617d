"""What a concept vocabulary matches on real captions: old vs new vocabulary, side by side.

Usage:
    python benchmarks/bench_vocab_quality.py --laion test_10000.parquet --chinese coco-cn_ext.icap2020.txt \\
        --vocab old=OLD_500k.txt --vocab new=vocab/500k.txt [--quick] [--t T]

Inputs (not shipped; paths given):

* ``--laion``: LAION alt-texts, a parquet file with a ``TEXT`` (or ``caption``) column, e.g. img2dataset's
  ``tests/test_files/test_10000.parquet``;
* ``--chinese``: Chinese captions, one per line, optionally ``id<TAB>caption``, e.g. COCO-CN's
  ``data/coco-cn_ext.icap2020.txt`` (4,712 human-written captions).

For each vocabulary, ``curate match`` (its default rules, one row per record) tags every caption, and
``curate resample`` balances the tagged records (inverse-frequency weights, half of them; ``--t T``: MetaCLIP's
mode with threshold T). Printed per vocabulary:

* ``function words``: share of all matches whose concept is a function word
  (:func:`curate.balance.vocab.function_words.is_function_word`);
* ``stop words``: the same share by an independent, broader list: stopwords-iso's English and Chinese lists
  (PyPI ``stopwordsiso``, MIT; they also hold content words such as "world", "man", "year", 人);
* ``no concept``: share of captions that match no concept;
* ``multi-word``: share of all matches whose concept is multi-word (words joined by a space or hyphen, or a Chinese
  compound of two dictionary words: :func:`curate.balance.vocab.recipe.is_chinese_compound`);
* ``head 1% before/after``: share of all matches that go to the 1% most matched concepts, over the tagged captions
  and over the resampled ones;
* ``multi-word entries``: share of the vocabulary that is multi-word; ``top``: the most matched concepts.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from curate.balance.match import match  # noqa: E402
from curate.balance.resample import resample  # noqa: E402
from curate.balance.vocab.files import load_vocab  # noqa: E402
from curate.balance.vocab.function_words import is_function_word  # noqa: E402
from curate.balance.vocab.lexicons import read_cedict, read_jieba_dict  # noqa: E402
from curate.balance.vocab.recipe import is_chinese_compound  # noqa: E402


def read_captions(laion: Path, chinese: Path, quick: bool) -> list[dict[str, str]]:
    """The records: LAION alt-texts, then the Chinese captions (``--quick``: the first 2,000 and 1,000)."""
    table = pq.read_table(laion)
    field = "TEXT" if "TEXT" in table.column_names else "caption"
    english = [t for t in table.column(field).to_pylist() if isinstance(t, str) and t.strip()]
    lines = [line.split("\t", 1)[-1].strip() for line in chinese.read_text(encoding="utf-8").splitlines()]
    zh = [line for line in lines if line]
    if quick:
        english, zh = english[:2000], zh[:1000]
    return ([{"id": f"laion{i}", "caption": c} for i, c in enumerate(english)]
            + [{"id": f"zh{i}", "caption": c} for i, c in enumerate(zh)])


def head_share(counts: Counter) -> float:
    """Share of all matches that go to the 1% most matched concepts (at least one concept)."""
    total = sum(counts.values())
    if not total:
        return 0.0
    k = max(1, len(counts) // 100)
    return sum(c for _, c in counts.most_common(k)) / total


def measure(name: str, vocab: Path, records: Path, work: Path, n_records: int, t: int,
            words: set[str], stop: set[str]) -> dict[str, object]:
    """Match, resample and count for one vocabulary."""
    entries = load_vocab(vocab)
    t0 = time.perf_counter()
    match([records], vocab, out=work / name / "match", per="record", text_field="caption")
    tags = pq.read_table(work / name / "match" / "tags.parquet").to_pylist()
    counts: Counter = Counter()
    for row in tags:
        for concept, score in zip(row["concepts"], row["scores"]):
            counts[concept] += int(score)
    total = sum(counts.values())
    tagged = sum(1 for row in tags if row["concepts"])
    multi = {c for c in counts if _multi_word(entries[c], words)}
    if t:
        resample(work / name / "match" / "tags.parquet", out=work / name / "rs", mode="metaclip", t=t, seed=0,
                 plot=False)
    else:
        resample(work / name / "match" / "tags.parquet", out=work / name / "rs", fraction=0.5, seed=0, plot=False)
    chosen = Counter(r["id"] for r in pq.read_table(work / name / "rs" / "selection.parquet").to_pylist())
    after: Counter = Counter()
    for row in tags:
        for concept, score in zip(row["concepts"], row["scores"]):
            after[concept] += int(score) * chosen.get(row["id"], 0)
    n_multi_entries = sum(1 for e in entries if _multi_word(e, words))
    return {
        "vocabulary": name,
        "entries": len(entries),
        "multi_word_entries": n_multi_entries / len(entries),
        "matches": total,
        "function_words": sum(c for k, c in counts.items() if is_function_word(entries[k])) / max(total, 1),
        "stop_words": sum(c for k, c in counts.items() if entries[k].lower() in stop) / max(total, 1),
        "no_concept": 1 - tagged / n_records,
        "multi_word": sum(counts[k] for k in multi) / max(total, 1),
        "head1_before": head_share(counts),
        "head1_after": head_share(after),
        "selected": sum(chosen.values()),
        "top": [entries[k] for k, _ in counts.most_common(12)],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def _multi_word(entry: str, words: set[str]) -> bool:
    return " " in entry or "-" in entry or (not entry.isascii() and is_chinese_compound(entry, words))


def main() -> None:
    """Parse the arguments, measure every vocabulary, print a Markdown table and the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--laion", type=Path, required=True)
    ap.add_argument("--chinese", type=Path, required=True)
    ap.add_argument("--vocab", action="append", required=True, help="NAME=FILE (repeatable)")
    ap.add_argument("--t", type=int, default=0, help="resample in metaclip mode with this threshold (default: "
                                                     "inverse-frequency mode, half of the tagged captions)")
    ap.add_argument("--quick", action="store_true", help="2,000 LAION and 1,000 Chinese captions")
    args = ap.parse_args()
    records = read_captions(args.laion, args.chinese, args.quick)
    words = {e.simplified for e in read_cedict()} | {w for w, _ in read_jieba_dict()}
    import stopwordsiso  # requirements/vocab.txt

    stop = set(stopwordsiso.stopwords(["en", "zh"]))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        path = work / "captions.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        rows = []
        for spec in args.vocab:
            name, _, file = spec.partition("=")
            rows.append(measure(name, Path(file), path, work, len(records), args.t, words, stop))
    print(f"{len(records)} captions ({sum(r['id'].startswith('laion') for r in records)} LAION, "
          f"{sum(r['id'].startswith('zh') for r in records)} Chinese); resample: "
          f"{f'metaclip t={args.t}' if args.t else 'inverse frequency, fraction 0.5'}\n")
    print("| vocabulary | entries | multi-word entries | matches | function words | stop words | no concept "
          "| multi-word matches | head 1% before | head 1% after |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['vocabulary']} | {r['entries']:,} | {r['multi_word_entries']:.1%} | {r['matches']:,} | "
              f"{r['function_words']:.1%} | {r['stop_words']:.1%} | {r['no_concept']:.1%} | {r['multi_word']:.1%} | "
              f"{r['head1_before']:.1%} | {r['head1_after']:.1%} |")
    for r in rows:
        print(f"\n{r['vocabulary']} top: {', '.join(r['top'])}")
    print("\n" + json.dumps(rows, ensure_ascii=False))


if __name__ == "__main__":
    main()
