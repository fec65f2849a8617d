"""PMI bigrams mined from a captions file, for ``curate vocab build --captions``.

PMI = log2(c(ab) · N / (c(a) · c(b))), N the number of tokens (the measure of
NLTK's bigram collocations, which MetaCLIP's metadata builder uses); see
vocab/README.md for the defaults and why MetaCLIP's threshold of 30 does not
carry over to a caption corpus.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

from curate.core.errors import UserError
from curate.balance.vocab.filters import HAN_ONLY, normalize_entry
from curate.balance.vocab.sources import check_input_file

DEFAULT_PMI_THRESHOLD = 6.0
DEFAULT_MIN_BIGRAM_COUNT = 5
_CAPTION_WORD = regex.compile(
    r"(?V1)\p{Script=Han}+|[[\p{L}\p{M}]--\p{Script=Han}]+(?:['\-][[\p{L}\p{M}]--\p{Script=Han}]+)*"
)


@dataclass
class Bigram:
    """A bigram mined from captions.

    Attributes:
        text: The entry: ``"a b"`` for space-separated words, ``"ab"`` for Han words.
        count: c(ab), adjacent occurrences in the captions.
        pmi: log2(c(ab) * N / (c(a) * c(b))), N the number of tokens.
    """

    text: str
    count: int
    pmi: float


@dataclass
class BigramResult:
    """The bigrams that pass and how the captions were read.

    Attributes:
        bigrams: Passing bigrams, by count (descending), then PMI (descending), then text.
        stats: Captions read, bad records per reason, tokens N, distinct bigrams,
            bigrams with count >= min_count, passing bigrams.
    """

    bigrams: list[Bigram]
    stats: dict[str, Any]


def _open_text(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace", newline="")
    return open(path, encoding="utf-8", errors="replace", newline="")


def iter_captions(path: Path, *, caption_field: str = "caption", bad: Counter | None = None) -> Iterator[str]:
    """Yield the captions of a captions file.

    A name ending in ``.jsonl`` (or ``.jsonl.gz``) is read as JSONL with a
    ``caption_field`` string per line; any other file is plain text, one caption
    per line. Blank lines are skipped. Bad records are counted in ``bad``
    (``bad_json``, ``no_caption``) and skipped; bytes that are not UTF-8 are
    replaced by U+FFFD, which breaks words there.

    Args:
        path: The captions file.
        caption_field: The JSON field that holds the caption.
        bad: Counter that receives bad-record reasons.

    Yields:
        One caption at a time.
    """
    path = check_input_file(path, "--captions")
    bad = bad if bad is not None else Counter()
    name = path.name.removesuffix(".gz")
    if name.endswith((".json", ".parquet")):
        raise UserError(
            f"{path}: captions must be JSONL (.jsonl, one object per line) or plain text (one caption "
            "per line) (--captions); convert the file to one of those"
        )
    is_jsonl = name.endswith(".jsonl")
    with _open_text(path) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            if not is_jsonl:
                yield line
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                bad["bad_json"] += 1
                continue
            caption = record.get(caption_field) if isinstance(record, dict) else None
            if not isinstance(caption, str) or not caption.strip():
                bad["no_caption"] += 1
                continue
            yield caption


@functools.cache
def _zh_tokenize() -> Callable[[str, str], list[str]]:
    """wordfreq's tokenizer, imported once (wordfreq[cjk] is an install extra)."""
    import jieba  # imported first so that its start-up messages can be silenced
    import wordfreq

    jieba.setLogLevel(logging.WARNING)
    return wordfreq.tokenize


def _han_words(text: str) -> list[str]:
    return _zh_tokenize()(text, "zh")


def caption_runs(caption: str) -> list[list[str]]:
    """Split a caption into runs of adjacent word tokens.

    Words are maximal runs of letters and marks (hyphens and apostrophes inside
    a word are kept), lower-cased; a run of Han characters is split into words
    by wordfreq's jieba tokenizer. Punctuation, digits and symbols end a run, so
    that no bigram spans them; whitespace does not.

    Args:
        caption: One caption.

    Returns:
        The runs, each a list of tokens.
    """
    text = normalize_entry(caption)
    runs: list[list[str]] = []
    current: list[str] = []
    last_end = 0
    for match in _CAPTION_WORD.finditer(text):
        gap = text[last_end : match.start()]
        if gap.strip() and current:
            runs.append(current)
            current = []
        word = match.group()
        if HAN_ONLY.fullmatch(word):
            current.extend(_han_words(word))
        else:
            current.append(word.lower())
        last_end = match.end()
    if current:
        runs.append(current)
    return runs


def mine_pmi_bigrams(
    captions: Path,
    *,
    pmi_threshold: float = DEFAULT_PMI_THRESHOLD,
    min_count: int = DEFAULT_MIN_BIGRAM_COUNT,
    caption_field: str = "caption",
    max_bigrams: int | None = None,
) -> BigramResult:
    """Mine bigrams whose pointwise mutual information passes a threshold.

    ``PMI(a, b) = log2(c(ab) * N / (c(a) * c(b)))``: N counts every token of
    every caption, c(a) every occurrence of token a, c(ab) the times b directly
    follows a inside a run (see :func:`caption_runs`). This is NLTK's
    ``BigramAssocMeasures.pmi``, which MetaCLIP used for its Wikipedia bigrams
    (threshold 30). Pairs of a Han and a non-Han word are not bigrams.

    Args:
        captions: Captions file (JSONL with ``caption_field`` or plain text).
        pmi_threshold: Keep bigrams with PMI >= this (base 2).
        min_count: Keep bigrams seen at least this many times.
        caption_field: JSON field of the caption in JSONL files.
        max_bigrams: Keep at most this many (the most frequent); ``None`` keeps all.

    Returns:
        The passing bigrams and the counts of the mining.

    Raises:
        UserError: The file is missing or holds no caption.
    """
    bad: Counter = Counter()
    n_captions = 0

    def captions_read() -> Iterator[str]:
        nonlocal n_captions
        for caption in iter_captions(captions, caption_field=caption_field, bad=bad):
            n_captions += 1
            yield caption

    result = mine_pmi_from_texts(captions_read(), pmi_threshold=pmi_threshold, min_count=min_count,
                                 max_bigrams=max_bigrams)
    if n_captions == 0:
        raise UserError(
            f"{captions}: no caption found (--captions); expected JSONL with a '{caption_field}' "
            "string per line (.jsonl) or plain text with one caption per line"
        )
    result.stats = {"captions": n_captions, "bad_records": dict(sorted(bad.items())), **result.stats}
    return result


def mine_pmi_from_texts(texts: Iterable[str], *, pmi_threshold: float = DEFAULT_PMI_THRESHOLD,
                        min_count: int = DEFAULT_MIN_BIGRAM_COUNT, max_bigrams: int | None = None) -> BigramResult:
    """:func:`mine_pmi_bigrams` over texts (WordNet's glosses, say) rather than a captions file.

    Returns:
        The passing bigrams, by count, then PMI, then text; the counts (tokens, distinct bigrams, ...).
    """
    unigrams: Counter = Counter()
    pairs: Counter = Counter()
    for text in texts:
        for run in caption_runs(text):
            unigrams.update(run)
            pairs.update(zip(run, run[1:]))
    total = sum(unigrams.values())
    frequent = 0
    found: list[Bigram] = []
    for (a, b), count in pairs.items():
        a_han, b_han = bool(HAN_ONLY.fullmatch(a)), bool(HAN_ONLY.fullmatch(b))
        if a_han != b_han or count < min_count:
            continue
        frequent += 1
        pmi = math.log2(count * total) - math.log2(unigrams[a] * unigrams[b])
        if pmi >= pmi_threshold:
            found.append(Bigram(a + b if a_han else f"{a} {b}", count, pmi))
    found.sort(key=lambda g: (-g.count, -g.pmi, g.text))
    passing = len(found)
    if max_bigrams is not None:
        found = found[:max_bigrams]
    stats = {
        "tokens": total,
        "distinct_bigrams": len(pairs),
        "bigrams_min_count": frequent,
        "bigrams_passing": passing,
        "bigrams_offered": len(found),
        "pmi_threshold": pmi_threshold,
        "min_count": min_count,
    }
    return BigramResult(found, stats)
