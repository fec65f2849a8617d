"""Build the concept vocabulary (``vocab/500k.txt``) used to tag images.

Entries come, in this priority order, from the user's word lists, MetaCLIP's
``metadata.json``, bigrams mined by PMI from a captions file, and wordfreq's
English and Chinese word lists (interleaved by rank). Every candidate goes
through the same filters (see :data:`REASONS` and ``vocab/README.md``); the
first ``size`` accepted entries form the vocabulary. There is no randomness:
the same inputs and package versions give the same file.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import regex

from curate.errors import UserError
from curate.io import atomic_open
from curate.vocab_pmi import (  # noqa: F401 - re-exported: part of the vocabulary API
    DEFAULT_MIN_BIGRAM_COUNT,
    DEFAULT_PMI_THRESHOLD,
    Bigram,
    BigramResult,
    caption_runs,
    iter_captions,
    mine_pmi_bigrams,
)

Script = Literal["latin", "cjk", "other"]

#: Why a candidate was dropped, in the order the checks run.
REASONS: tuple[str, ...] = (
    "control",  # a control, format, private-use or unassigned character
    "whitespace",  # empty once whitespace is normalised
    "too_long",  # more than max_chars characters or max_words words
    "number",  # any numeric character, or only Chinese numerals
    "punctuation",  # anything but letters joined by single ' ', '-', "'" or '·'
    "single_char",  # one grapheme (a single Han character is kept by default)
    "script",  # wordfreq only: not in the language's script
    "clitic",  # wordfreq English only: ends in 's 'm 're 've 'll 'd 't
    "excluded",  # near-duplicate of an entry of an --exclude list
    "duplicate",  # same text as an accepted entry
    "near_duplicate",  # same near-duplicate key as an accepted entry
)

#: wordfreq languages that can be used, with the script their entries must have.
WORDFREQ_SCRIPTS: dict[str, str] = {"en": "latin", "zh": "han"}

DEFAULT_SIZE = 500_000
DEFAULT_MAX_CHARS = 50
DEFAULT_MAX_WORDS = 6

_LATIN = regex.compile(r"\p{Script=Latin}")
_NON_LATIN_LETTER = regex.compile(
    r"(?V1)[\p{L}--\p{Script=Latin}--\p{Script=Common}--\p{Script=Inherited}]"
)
_CJK_CLASS = r"\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}\p{Script=Bopomofo}"
_CJK = regex.compile(rf"[{_CJK_CLASS}]")
_NON_CJK_LETTER = regex.compile(
    rf"(?V1)[\p{{L}}--[{_CJK_CLASS}]--\p{{Script=Common}}--\p{{Script=Inherited}}]"
)
_HAN_ONLY = regex.compile(r"\p{Script=Han}+")
_NUMERIC = regex.compile(r"\p{N}")
_CHINESE_NUMBER = regex.compile(r"第?[零〇一二两三四五六七八九十百千万亿兆]+")
_WELL_FORMED = regex.compile(r"[\p{L}\p{M}]+(?:[ \-'·][\p{L}\p{M}]+)*")
_CLITIC = regex.compile(r"'(?:s|m|re|ve|ll|d|t)$", regex.IGNORECASE)
_GRAPHEME = regex.compile(r"\X")
_BAD_CHAR = regex.compile(r"(?V1)[[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}]--\s]")
_DROP_CONNECTORS = str.maketrans("", "", " -'·")
_TRANSLATE = str.maketrans(
    {
        "\u2019": "'",  # right single quotation mark
        "\u2018": "'",  # left single quotation mark
        "\u02bc": "'",  # modifier letter apostrophe
        "\u2010": "-",  # hyphen
        "\u2011": "-",  # non-breaking hyphen
        "\u30fb": "·",  # katakana middle dot
        "\u2027": "·",  # hyphenation point
    }
)


# ---------------------------------------------------------------------------
# Scripts, normalisation and near-duplicate keys
# ---------------------------------------------------------------------------


def entry_script(text: str) -> Script:
    """Return the script of a vocabulary entry's letters.

    Args:
        text: A vocabulary entry.

    Returns:
        ``'latin'`` when every letter is Latin (``café``, ``golden retriever``),
        ``'cjk'`` when every letter is Han, Hiragana, Katakana, Hangul or Bopomofo
        (``猫``, ``ねこ``), ``'other'`` for any other script, a mix of scripts, or
        no letter at all. Letters of the Common/Inherited scripts (such as the
        long-vowel mark ``ー``) count for neither side.
    """
    if text.isascii():
        return "latin" if any(ch.isalpha() for ch in text) else "other"
    if _LATIN.search(text) and not _NON_LATIN_LETTER.search(text):
        return "latin"
    if _CJK.search(text) and not _NON_CJK_LETTER.search(text):
        return "cjk"
    return "other"


def normalize_entry(text: str) -> str:
    """Normalise an entry: NFKC, one apostrophe/hyphen/middle dot, single spaces.

    Args:
        text: A raw candidate.

    Returns:
        The text written to the vocabulary if the candidate is accepted.
    """
    text = unicodedata.normalize("NFKC", text).translate(_TRANSLATE)
    return " ".join(text.split())


_SIMPLIFY: Any = None


def _simplify_chinese(text: str) -> str:
    global _SIMPLIFY
    if _SIMPLIFY is None:
        try:
            from wordfreq.chinese import simplify_chinese as _SIMPLIFY
        except ImportError:  # pragma: no cover - wordfreq[cjk] is an install extra
            _SIMPLIFY = str
    return _SIMPLIFY(text)


def near_duplicate_key(text: str) -> str:
    """Return the key under which two entries count as near-duplicates.

    The key of a normalised entry is: case-folded; Latin diacritics removed (only
    for entries whose script is Latin, so Japanese voicing marks stay); the
    connectors space, hyphen, apostrophe and middle dot removed; Traditional Han
    characters mapped to Simplified ones (wordfreq's mapping). Plurals, British
    and American spellings and synonyms are *not* folded.

    Args:
        text: A normalised entry (see :func:`normalize_entry`).

    Returns:
        The near-duplicate key.
    """
    if text.isascii():
        return text.lower().translate(_DROP_CONNECTORS)
    key = text.casefold()
    if entry_script(key) == "latin":
        decomposed = unicodedata.normalize("NFD", key)
        key = "".join(ch for ch in decomposed if not unicodedata.category(ch).startswith("M"))
        key = unicodedata.normalize("NFC", key)
    key = key.translate(_DROP_CONNECTORS)
    if _CJK.search(key):
        key = _simplify_chinese(key)
    return key


def _check(text: str, max_chars: int, max_words: int, keep_single_han: bool) -> tuple[str | None, str]:
    """Return (reason or None, normalised text) for the filters of every source."""
    if _BAD_CHAR.search(text):
        return "control", text
    norm = normalize_entry(text)
    if not norm:
        return "whitespace", norm
    if len(norm) > max_chars or norm.count(" ") + 1 > max_words:
        return "too_long", norm
    if _NUMERIC.search(norm) or _CHINESE_NUMBER.fullmatch(norm):
        return "number", norm
    if not _WELL_FORMED.fullmatch(norm):
        return "punctuation", norm
    if (
        len(norm) <= 8
        and len(_GRAPHEME.findall(norm)) == 1
        and not (keep_single_han and _HAN_ONLY.fullmatch(norm))
    ):
        return "single_char", norm
    return None, norm


def filter_reason(
    text: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_words: int = DEFAULT_MAX_WORDS,
    keep_single_han: bool = True,
) -> str | None:
    """Return why a raw candidate fails the filters that apply to every source.

    Args:
        text: A raw candidate (before normalisation).
        max_chars: Longest entry kept, in characters after normalisation.
        max_words: Most space-separated words kept.
        keep_single_han: Keep entries that are one Han character (猫, 树).

    Returns:
        One of ``control``, ``whitespace``, ``too_long``, ``number``,
        ``punctuation``, ``single_char``, or ``None`` when the candidate passes.
    """
    return _check(text, max_chars, max_words, keep_single_han)[0]


# ---------------------------------------------------------------------------
# Reading the sources
# ---------------------------------------------------------------------------


def check_input_file(path: Path, flag: str) -> Path:
    """The path of an input file given with ``flag``; a one-line UserError when it is missing."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file ({flag}); check the path")
    if not path.is_file():
        raise UserError(f"{path}: not a file ({flag}); give a file, not a folder")
    return path


def read_word_list(path: Path, flag: str = "--word-list") -> list[str]:
    """Read a word list: UTF-8, one entry per line (a BOM and CRLF are accepted).

    Args:
        path: The file.
        flag: The command-line flag named in errors.

    Returns:
        The lines, without line ends, blank lines included (they are counted
        as ``whitespace`` drops).

    Raises:
        UserError: The file is missing or a line is not UTF-8.
    """
    path = check_input_file(path, flag)
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    out: list[str] = []
    for number, raw in enumerate(lines, start=1):
        try:
            out.append(raw.decode("utf-8").removesuffix("\r"))
        except UnicodeDecodeError:
            raise UserError(f"{path}:{number}: not UTF-8 ({flag}); save the word list as UTF-8") from None
    return out


def read_metaclip_metadata(path: Path) -> list[str]:
    """Read MetaCLIP's ``metadata.json``: a JSON list of strings.

    Args:
        path: The file.

    Returns:
        The strings, in file order.

    Raises:
        UserError: The file is missing, is not JSON, or is not a list of strings.
    """
    path = check_input_file(path, "--metaclip-metadata")
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 (--metaclip-metadata); expected a JSON list of strings") from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg}) (--metaclip-metadata); "
            "expected a JSON list of strings such as MetaCLIP's metadata.json"
        ) from None
    if not isinstance(data, list):
        raise UserError(
            f"{path}: the JSON is a {type(data).__name__}, not a list (--metaclip-metadata); "
            "expected a JSON list of strings such as MetaCLIP's metadata.json"
        )
    for index, item in enumerate(data):
        if not isinstance(item, str):
            raise UserError(
                f"{path}: item {index} is {json.dumps(item)[:40]} ({type(item).__name__}), not a string "
                "(--metaclip-metadata); expected a JSON list of strings"
            )
    return data


def _tie_break(word: str) -> bytes:
    return hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()


def read_wordfreq(lang: str) -> list[str]:
    """Return wordfreq's large word list for ``lang``, most frequent first.

    wordfreq rounds frequencies into bands and lists each band alphabetically;
    here the words of a band are ordered by their BLAKE2b-64 hash instead, so
    that a cut inside a band does not favour the start of the alphabet.

    Args:
        lang: A wordfreq language code.

    Returns:
        The words, by descending frequency band, then hash.
    """
    try:
        import wordfreq
    except ImportError:  # pragma: no cover - install extra
        raise UserError("wordfreq is not installed; run pip install 'curate[vocab]' or pass --no-wordfreq") from None
    return [w for band in wordfreq.get_frequency_list(lang, "large") for w in sorted(band, key=_tie_break)]


# ---------------------------------------------------------------------------
# Building the vocabulary
# ---------------------------------------------------------------------------


@dataclass
class VocabResult:
    """A built vocabulary and its accounting.

    Attributes:
        entries: The vocabulary, in output order (priority order).
        entry_sources: The source of each entry (parallel to ``entries``).
        available: Entries that passed every filter, before the cut to ``size``.
        read: Candidates read per source.
        accepted: Candidates accepted per source (before the cut to ``size``).
        dropped: Per source, candidates dropped per reason (see :data:`REASONS`).
        kept_per_source: Entries in the vocabulary per source.
        kept_per_script: Entries in the vocabulary per :func:`entry_script`.
        bigram_stats: The mining counts when captions were given.
        params: The parameters of the build.
    """

    entries: list[str]
    entry_sources: list[str]
    available: int
    read: dict[str, int]
    accepted: dict[str, int]
    dropped: dict[str, dict[str, int]]
    kept_per_source: dict[str, int]
    kept_per_script: dict[str, int]
    bigram_stats: dict[str, Any] | None
    params: dict[str, Any] = field(default_factory=dict)

    def stats(self) -> dict[str, Any]:
        """Return a JSON-serialisable summary (no entries)."""
        dropped_total: Counter = Counter()
        for reasons in self.dropped.values():
            dropped_total.update(reasons)
        return {
            "size": len(self.entries),
            "available": self.available,
            "cut_by_size": self.available - len(self.entries),
            "kept_per_script": self.kept_per_script,
            "kept_per_source": self.kept_per_source,
            "read_per_source": self.read,
            "accepted_per_source": self.accepted,
            "dropped_per_source": self.dropped,
            "dropped_per_reason": {r: dropped_total[r] for r in REASONS if dropped_total[r]},
            "bigrams": self.bigram_stats,
            "params": self.params,
        }


class _Selector:
    """Applies the filters and the de-duplication in priority order."""

    def __init__(self, *, max_chars: int, max_words: int, keep_single_han: bool, excluded: set[str]) -> None:
        self.max_chars = max_chars
        self.max_words = max_words
        self.keep_single_han = keep_single_han
        self.excluded = excluded
        self.texts: set[str] = set()
        self.keys: set[str] = set()
        self.entries: list[str] = []
        self.sources: list[str] = []
        self.read: Counter = Counter()
        self.accepted: Counter = Counter()
        self.dropped: dict[str, Counter] = {}

    def _drop(self, source: str, reason: str) -> bool:
        self.dropped.setdefault(source, Counter())[reason] += 1
        return False

    def offer(self, source: str, raw: str, script: str | None = None) -> bool:
        """Offer one candidate; return whether it was accepted."""
        self.read[source] += 1
        reason, text = _check(raw, self.max_chars, self.max_words, self.keep_single_han)
        if reason:
            return self._drop(source, reason)
        if script is not None:
            text = text.lower()  # wordfreq is lower-case; NFKC can add capitals (™ -> TM)
        if script == "latin":
            if not text.isascii() and entry_script(text) != "latin":
                return self._drop(source, "script")
            if _CLITIC.search(text):
                return self._drop(source, "clitic")
        elif script == "han" and not _HAN_ONLY.fullmatch(text.translate(_DROP_CONNECTORS)):
            return self._drop(source, "script")
        key = near_duplicate_key(text)
        if key in self.excluded:
            return self._drop(source, "excluded")
        if text in self.texts:
            return self._drop(source, "duplicate")
        if key in self.keys:
            return self._drop(source, "near_duplicate")
        self.texts.add(text)
        self.keys.add(key)
        self.entries.append(text)
        self.sources.append(source)
        self.accepted[source] += 1
        return True

    def interleave(self, lists: Sequence[tuple[str, Iterable[str], str]]) -> None:
        """Accept from several ranked lists in turn, one accepted entry per turn."""
        active = [(name, iter(items), script) for name, items, script in lists]
        while active:
            for item in list(active):
                name, items, script = item
                while True:
                    raw = next(items, None)
                    if raw is None:
                        active.remove(item)
                        break
                    if self.offer(name, raw, script):
                        break


def _word_list_names(paths: Sequence[Path]) -> list[str]:
    names = [f"word_list:{Path(p).name}" for p in paths]
    if len(set(names)) != len(names):
        names = [f"word_list[{i}]:{Path(p).name}" for i, p in enumerate(paths)]
    return names


def build_vocab(
    *,
    size: int = DEFAULT_SIZE,
    wordfreq_languages: Sequence[str] = ("en", "zh"),
    word_lists: Sequence[Path] = (),
    metaclip_metadata: Path | None = None,
    captions: Path | None = None,
    caption_field: str = "caption",
    pmi_threshold: float = DEFAULT_PMI_THRESHOLD,
    min_bigram_count: int = DEFAULT_MIN_BIGRAM_COUNT,
    max_bigrams: int | None = None,
    exclude: Sequence[Path] = (),
    max_chars: int = DEFAULT_MAX_CHARS,
    max_words: int = DEFAULT_MAX_WORDS,
    keep_single_han: bool = True,
) -> VocabResult:
    """Build a vocabulary of exactly ``size`` unique, filtered entries.

    Candidates are taken in this priority order, and the first ``size`` that
    pass the filters and are not (near-)duplicates of an earlier one are kept,
    in that order: each word list (in the order given, lines in file order);
    MetaCLIP's metadata (in file order); PMI bigrams from ``captions`` (by
    count, then PMI); wordfreq's lists for ``wordfreq_languages``, interleaved
    one accepted entry per language in turn, each in wordfreq's rank order.
    Nothing is random.

    Args:
        size: Number of entries (exactly).
        wordfreq_languages: wordfreq lists to use, among ``en`` and ``zh``; empty
            for none.
        word_lists: User word lists, one entry per line, UTF-8.
        metaclip_metadata: MetaCLIP's ``metadata.json`` (a JSON list of strings).
        captions: Captions file to mine PMI bigrams from.
        caption_field: Caption field of a JSONL captions file.
        pmi_threshold: Minimum PMI (base 2) of a mined bigram.
        min_bigram_count: Minimum count of a mined bigram.
        max_bigrams: Most bigrams offered (the most frequent); ``None`` for all.
        exclude: Word lists of entries never to include (matched by near-duplicate key).
        max_chars: Longest entry kept, in characters.
        max_words: Most space-separated words in an entry.
        keep_single_han: Keep one-character Han entries (猫 cat, 树 tree).

    Returns:
        The vocabulary and its accounting.

    Raises:
        UserError: A bad parameter, a missing or malformed file, or a ``size``
            larger than what the sources give after filtering.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise UserError(f"--size {size!r}: give a positive whole number of entries")
    langs = list(wordfreq_languages)
    for lang in langs:
        if lang not in WORDFREQ_SCRIPTS:
            raise UserError(
                f"--wordfreq-lang {lang}: not supported; use one of {', '.join(sorted(WORDFREQ_SCRIPTS))}"
            )
    if len(set(langs)) != len(langs):
        raise UserError(f"--wordfreq-lang {' '.join(langs)}: a language is given twice")
    if not math.isfinite(pmi_threshold):
        raise UserError(f"--pmi-threshold {pmi_threshold}: give a finite number")
    if min_bigram_count < 1:
        raise UserError(f"--min-bigram-count {min_bigram_count}: give 1 or more")
    if max_bigrams is not None and max_bigrams < 0:
        raise UserError(f"--max-bigrams {max_bigrams}: give 0 or more")
    if max_chars < 1 or max_words < 1:
        raise UserError(f"--max-chars {max_chars} / --max-words {max_words}: give 1 or more")
    # Check every file before any slow work.
    for path in word_lists:
        check_input_file(path, "--word-list")
    for path in exclude:
        check_input_file(path, "--exclude")
    if metaclip_metadata is not None:
        check_input_file(metaclip_metadata, "--metaclip-metadata")
    if captions is not None:
        check_input_file(captions, "--captions")

    excluded: set[str] = set()
    for path in exclude:
        for line in read_word_list(path, "--exclude"):
            norm = normalize_entry(line)
            if norm:
                excluded.add(near_duplicate_key(norm))

    selector = _Selector(
        max_chars=max_chars, max_words=max_words, keep_single_han=keep_single_han, excluded=excluded
    )
    for name, path in zip(_word_list_names(word_lists), word_lists):
        for line in read_word_list(path):
            selector.offer(name, line)
    if metaclip_metadata is not None:
        for item in read_metaclip_metadata(metaclip_metadata):
            selector.offer("metaclip_metadata", item)
    bigram_stats = None
    if captions is not None:
        mined = mine_pmi_bigrams(
            captions,
            pmi_threshold=pmi_threshold,
            min_count=min_bigram_count,
            caption_field=caption_field,
            max_bigrams=max_bigrams,
        )
        bigram_stats = mined.stats
        for bigram in mined.bigrams:
            selector.offer("pmi_bigrams", bigram.text)
    selector.interleave([(f"wordfreq:{lang}", read_wordfreq(lang), WORDFREQ_SCRIPTS[lang]) for lang in langs])

    available = len(selector.entries)
    if size > available:
        per_source = ", ".join(f"{k} {v}" for k, v in selector.accepted.items()) or "none"
        raise UserError(
            f"--size {size}: the sources give only {available} entries after filtering ({per_source}); "
            "lower --size or add sources (--word-list, --metaclip-metadata, --captions)"
        )
    entries = selector.entries[:size]
    sources = selector.sources[:size]
    params = {
        "size": size,
        "wordfreq_languages": langs,
        "word_lists": [str(p) for p in word_lists],
        "metaclip_metadata": str(metaclip_metadata) if metaclip_metadata else None,
        "captions": str(captions) if captions else None,
        "caption_field": caption_field,
        "pmi_threshold": pmi_threshold,
        "min_bigram_count": min_bigram_count,
        "max_bigrams": max_bigrams,
        "exclude": [str(p) for p in exclude],
        "max_chars": max_chars,
        "max_words": max_words,
        "keep_single_han": keep_single_han,
    }
    script_counts = Counter(entry_script(e) for e in entries)
    return VocabResult(
        entries=entries,
        entry_sources=sources,
        available=available,
        read=dict(selector.read),
        accepted=dict(selector.accepted),
        dropped={src: {r: c[r] for r in REASONS if c[r]} for src, c in selector.dropped.items()},
        kept_per_source=dict(Counter(sources)),
        kept_per_script={s: script_counts[s] for s in ("latin", "cjk", "other")},
        bigram_stats=bigram_stats,
        params=params,
    )


# ---------------------------------------------------------------------------
# Writing and reading vocabulary files
# ---------------------------------------------------------------------------


def _atomic_write(path: Path, data: bytes) -> None:
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def write_vocab(result: VocabResult, path: Path) -> None:
    """Write the entries, one per line, UTF-8, ending with a newline (atomically).

    Args:
        result: A built vocabulary.
        path: The output file.
    """
    _atomic_write(Path(path), ("\n".join(result.entries) + "\n").encode("utf-8"))


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"unicode": unicodedata.unidata_version}
    for name in ("curate", "wordfreq", "jieba", "regex"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def write_stats(result: VocabResult, path: Path, *, command: str | None = None) -> None:
    """Write the build's accounting as JSON (see :meth:`VocabResult.stats`).

    Args:
        result: A built vocabulary.
        path: The output file.
        command: The command line that built it, recorded as is.
    """
    stats = {"command": command, "versions": _versions(), **result.stats()}
    text = json.dumps(stats, ensure_ascii=False, indent=2) + "\n"
    _atomic_write(Path(path), text.encode("utf-8"))


def default_stats_path(out: Path) -> Path:
    """Return where the stats of a vocabulary file go: ``NAME.stats.json`` beside it."""
    out = Path(out)
    return out.with_name(out.stem + ".stats.json")


def build_vocab_file(
    out: Path, *, stats_out: Path | None = None, command: str | None = None, **options: Any
) -> VocabResult:
    """Build a vocabulary, write it to ``out`` and its stats beside it.

    Args:
        out: The vocabulary file to write.
        stats_out: The stats file; default ``NAME.stats.json`` beside ``out``.
        command: The command line, recorded in the stats.
        **options: Keyword arguments of :func:`build_vocab`.

    Returns:
        The built vocabulary.
    """
    result = build_vocab(**options)
    write_vocab(result, out)
    write_stats(result, stats_out or default_stats_path(out), command=command)
    return result


def summarize(result: VocabResult) -> str:
    """Return a few lines describing a build, for the command line."""
    s = result.stats()
    lines = [
        f"{s['size']} entries ({', '.join(f'{k} {v}' for k, v in s['kept_per_script'].items())}); "
        f"{s['available']} available after filtering",
        "per source: " + ", ".join(f"{k} {v}" for k, v in s["kept_per_source"].items()),
        "dropped: " + (", ".join(f"{k} {v}" for k, v in s["dropped_per_reason"].items()) or "none"),
    ]
    if result.bigram_stats:
        b = result.bigram_stats
        lines.append(
            f"bigrams: {b['bigrams_passing']} of {b['bigrams_min_count']} with count >= {b['min_count']} "
            f"have PMI >= {b['pmi_threshold']} ({b['tokens']} tokens, {b['captions']} captions)"
        )
    return "\n".join(lines)


def load_vocab(path: Path) -> list[str]:
    """Read a vocabulary file and check it: UTF-8, no blank line, no duplicate.

    Args:
        path: A vocabulary file (one entry per line).

    Returns:
        The entries; line i (1-based) is entry i - 1.

    Raises:
        UserError: The file is missing, not UTF-8, or has a blank or repeated line.
    """
    lines = read_word_list(path, "--vocab")
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise UserError(f"{path}:{number}: blank line (--vocab); a vocabulary has one entry per line")
        if line in seen:
            raise UserError(f"{path}:{number}: repeats line {seen[line]} ({line!r}) (--vocab); entries must be unique")
        seen[line] = number
    return lines
