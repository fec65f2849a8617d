"""Build the concept vocabulary (``vocab/500k.txt``) used to tag images.

Entries come, in this priority order, from the user's word lists, MetaCLIP's
``metadata.json``, bigrams mined by PMI from a captions file, and wordfreq's
English and Chinese word lists (interleaved by rank). MetaCLIP's metadata is
taken as published (every entry as written, in order: its numbers 0–99, ``C++``,
``U.S.``, case variants); every other candidate goes through the same filters
(see :data:`curate.balance.vocab.filters.REASONS` and ``vocab/README.md``), and
the metadata too with ``filter_metadata``; the first ``size`` accepted entries
form the vocabulary.
There is no randomness: the same inputs and package versions give the same file.

The filters live in :mod:`curate.balance.vocab.filters`, the readers of the sources in
:mod:`curate.balance.vocab.sources` and the PMI mining in :mod:`curate.balance.vocab.pmi`; this
module selects the entries; :mod:`curate.balance.vocab.files` writes the
vocabulary and its stats and reads a vocabulary file back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.balance.vocab.config import DEFAULT_SIZE, PathLike, VocabBuildConfig  # noqa: F401 (re-exported)
from curate.balance.vocab.filters import (
    REASONS,
    check_candidate,
    entry_script,
    near_duplicate_key,
    normalize_entry,
    script_reason,
)
from curate.balance.vocab.files import (
    default_gloss_path,
    default_stats_path,
    write_glosses,
    write_stats,
    write_vocab,
)
from curate.balance.vocab.pmi import mine_pmi_bigrams
from curate.balance.vocab.recipe import Lexicons, multi_word_counts
from curate.balance.vocab.result import VocabResult
from curate.balance.vocab.sources import read_metaclip_metadata, read_word_list


# ---------------------------------------------------------------------------
# Building the vocabulary
# ---------------------------------------------------------------------------


class _Selector:
    """Applies the filters and the de-duplication in priority order."""

    def __init__(self, *, max_chars: int, max_words: int, keep_single_han: bool, excluded: set[str],
                 drop_function_words: bool = True) -> None:
        self.drop_function_words = drop_function_words
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
        self.lexicons = Lexicons()

    def drop(self, source: str, reason: str) -> bool:
        """Count a dropped candidate of ``source`` under ``reason``; returns False (not accepted)."""
        self.dropped.setdefault(source, Counter())[reason] += 1
        return False

    def check(self, source: str, raw: str, script: str | None = None) -> str | None:
        """Count and filter one candidate (no de-duplication); the normalised text, or None when dropped."""
        self.read[source] += 1
        reason, text = check_candidate(raw, self.max_chars, self.max_words, self.keep_single_han,
                                       self.drop_function_words)
        if reason:
            self.drop(source, reason)
            return None
        if script is not None:
            text = text.lower()  # wordfreq is lower-case; NFKC can add capitals (™ -> TM)
            reason = script_reason(text, script)
            if reason:
                self.drop(source, reason)
                return None
        return text

    def add(self, source: str, text: str) -> bool:
        """Accept a checked text unless it is excluded or a (near-)duplicate of an accepted entry."""
        key = near_duplicate_key(text)
        if key in self.excluded:
            return self.drop(source, "excluded")
        if text in self.texts:
            return self.drop(source, "duplicate")
        if key in self.keys:
            return self.drop(source, "near_duplicate")
        self.texts.add(text)
        self.keys.add(key)
        self.entries.append(text)
        self.sources.append(source)
        self.accepted[source] += 1
        return True

    def offer(self, source: str, raw: str, script: str | None = None) -> bool:
        """Offer one candidate; return whether it was accepted."""
        text = self.check(source, raw, script)
        return text is not None and self.add(source, text)

    def take_as_is(self, source: str, raw: str, where: str) -> None:
        """Take one entry as published (MetaCLIP's metadata): no filter, no merging of variants.

        It still blocks the near-duplicates of later sources, and ``--exclude`` still applies.

        Raises:
            UserError: an entry a vocabulary file cannot hold as it is (blank, a line break, a repeat).
        """
        self.read[source] += 1
        if "\n" in raw or "\r" in raw or not raw.strip():
            raise UserError(f"{where}: {raw!r} is blank or holds a line break (--metaclip-metadata); a vocabulary "
                            "holds one entry per line: remove it, or pass --filter-metadata")
        if raw in self.texts:
            raise UserError(f"{where}: {raw!r} is there twice (--metaclip-metadata); a vocabulary's entries are "
                            "unique: remove the repeat, or pass --filter-metadata")
        key = near_duplicate_key(normalize_entry(raw))
        if key in self.excluded:
            self.drop(source, "excluded")
            return
        self.texts.add(raw)
        self.keys.add(key)
        self.entries.append(raw)
        self.sources.append(source)
        self.accepted[source] += 1

    def interleave(self, lists: Sequence[Iterable[tuple[str, str]]]) -> None:
        """Accept from several ranked lists of checked (source, text) in turn, one accepted entry per turn."""
        active = [iter(items) for items in lists]
        while active:
            for items in list(active):
                while True:
                    item = next(items, None)
                    if item is None:
                        active.remove(items)
                        break
                    if self.add(*item):
                        break


def _word_list_names(paths: Sequence[Path]) -> list[str]:
    names = [f"word_list:{Path(p).name}" for p in paths]
    if len(set(names)) != len(names):
        names = [f"word_list[{i}]:{Path(p).name}" for i, p in enumerate(paths)]
    return names


def build_vocab(config: VocabBuildConfig | None = None, **settings: Any) -> VocabResult:
    """Build a vocabulary of exactly ``size`` unique entries.

    Candidates are taken in this priority order, and the first ``size`` that
    pass the filters and are not (near-)duplicates of an earlier one are kept,
    in that order: each word list (in the order given, lines in file order);
    MetaCLIP's metadata (in file order, **as published**: every entry as written,
    no filter and no merging of case or accent variants, unless
    ``filter_metadata``); PMI bigrams from ``captions`` (by
    count, then PMI); wordfreq's lists for ``wordfreq_languages``, interleaved
    one accepted entry per language in turn, each in wordfreq's rank order.
    Nothing is random.

    Args:
        config: the settings (:class:`~curate.balance.vocab.config.VocabBuildConfig`): ``size`` (None: every
            entry the sources give with ``metaclip_metadata``, else 500,000), ``wordfreq_languages``,
            ``word_lists``, ``metaclip_metadata``, ``captions`` and ``caption_field``, ``pmi_threshold``,
            ``min_bigram_count``, ``max_bigrams``, ``exclude`` (entries never to include, matched by
            near-duplicate key), ``max_chars``, ``max_words``, ``drop_single_han``, ``filter_metadata``.
        **settings: fields of the config, instead of ``config``.

    Returns:
        The vocabulary and its accounting.

    Raises:
        UserError: A bad parameter, a missing or malformed file, or a ``size``
            larger than what the sources give after filtering.
    """
    if config is None:
        config = VocabBuildConfig(**settings)
    elif settings:
        raise TypeError("build_vocab(): give either a VocabBuildConfig or settings, not both")
    selector = _Selector(max_chars=config.max_chars, max_words=config.max_words,
                         keep_single_han=not config.drop_single_han, excluded=_excluded_keys(config.exclude),
                         drop_function_words=not config.keep_function_words)
    bigram_stats = _offer_sources(selector, config)
    return _vocabulary(selector, config, bigram_stats)


def _excluded_keys(paths: Sequence[PathLike]) -> set[str]:
    """The near-duplicate keys of the entries never to include (``--exclude``)."""
    excluded: set[str] = set()
    for path in paths:
        for line in read_word_list(Path(path), "--exclude"):
            norm = normalize_entry(line)
            if norm:
                excluded.add(near_duplicate_key(norm))
    return excluded


def _offer_sources(selector: _Selector, config: VocabBuildConfig) -> dict[str, Any] | None:
    """Offer every source's candidates in priority order; returns the PMI mining's counts (with captions)."""
    word_lists = [Path(p) for p in config.word_lists]
    for name, path in zip(_word_list_names(word_lists), word_lists):
        for line in read_word_list(path):
            selector.offer(name, line)
    metadata = config.metaclip_metadata
    if metadata is not None:
        for index, item in enumerate(read_metaclip_metadata(Path(metadata))):
            if config.filter_metadata:
                selector.offer("metaclip_metadata", item)
            else:
                selector.take_as_is("metaclip_metadata", item, f"{metadata}: entry {index}")
    bigram_stats = None
    if config.captions is not None:
        mined = mine_pmi_bigrams(Path(config.captions), pmi_threshold=config.pmi_threshold,
                                 min_count=config.min_bigram_count, caption_field=config.caption_field,
                                 max_bigrams=config.max_bigrams)
        bigram_stats = mined.stats
        for bigram in mined.bigrams:
            selector.offer("pmi_bigrams", bigram.text)
    lexicons = Lexicons.load(config)
    selector.interleave([lexicons.ranked(selector, lang, config) for lang in config.languages])
    selector.lexicons = lexicons
    return bigram_stats


def _vocabulary(selector: _Selector, config: VocabBuildConfig, bigram_stats: dict[str, Any] | None) -> VocabResult:
    """The first ``size`` accepted entries and the build's accounting.

    Raises:
        UserError: the sources give fewer than ``size`` entries after filtering.
    """
    available = len(selector.entries)
    size = available if config.size is None else config.size
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
        "wordfreq_languages": list(config.languages),
        "word_lists": [str(p) for p in config.word_lists],
        "metaclip_metadata": str(config.metaclip_metadata) if config.metaclip_metadata else None,
        "captions": str(config.captions) if config.captions else None,
        "caption_field": config.caption_field,
        "pmi_threshold": config.pmi_threshold,
        "min_bigram_count": config.min_bigram_count,
        "max_bigrams": config.max_bigrams,
        "exclude": [str(p) for p in config.exclude],
        "max_chars": config.max_chars,
        "max_words": config.max_words,
        "keep_single_han": not config.drop_single_han,
        "filter_metadata": config.filter_metadata,
        "wordnet": Path(config.wordnet).name if config.wordnet is not None else None,
        "cedict": config.cedict,
        "jieba_dict": config.jieba_dict,
        "min_zipf": config.min_zipf,
        "keep_function_words": config.keep_function_words,
    }
    lexicons = selector.lexicons
    glosses: dict[str, str] = {}
    chinese = [entry for entry in entries if entry_script(entry) == "cjk"]
    if chinese and config.cedict:  # user sources' Chinese entries (MetaCLIP 2's zh.json) are glossed too
        glossary = lexicons.load_cedict()
        glosses = {entry: gloss for entry in chinese if (gloss := glossary.gloss(entry)) is not None}
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
        glosses=glosses,
        multi_word=multi_word_counts(entries, lexicons.words()),
        lexicons=lexicons.info,
    )


def build_vocab_file(config: VocabBuildConfig | None = None, *, command: str | None = None,
                     **settings: Any) -> VocabResult:
    """Build a vocabulary, write it to ``out`` and its stats to ``stats_out`` (default ``NAME.stats.json`` beside it).

    Args:
        config: the settings (:class:`~curate.balance.vocab.config.VocabBuildConfig`), with ``out`` (a path, or a
            URL in a bucket); its input files may be objects in a bucket.
        command: The command line, recorded in the stats.
        **settings: fields of the config, instead of ``config``.
    """
    from contextlib import ExitStack

    from curate.core.io import Location
    from curate.core.remote import local_file, writing

    if config is None:
        config = VocabBuildConfig(**settings)
    if config.out is None:
        raise UserError("--out: give the vocabulary file to write")
    local = {"word_lists": tuple(local_file(p, "--word-list") for p in config.word_lists),
             "exclude": tuple(local_file(p, "--exclude") for p in config.exclude),
             "metaclip_metadata": local_file(config.metaclip_metadata, "--metaclip-metadata"),
             "captions": local_file(config.captions, "--captions")}
    result = build_vocab(replace(config, **local))
    target = Location(config.out)
    stats = (Location(config.stats_out) if config.stats_out is not None
             else target.parent / default_stats_path(Path(target.name)).name)
    gloss = (Location(config.gloss_out) if config.gloss_out is not None
             else target.parent / default_gloss_path(Path(target.name)).name)
    with ExitStack() as stack:  # a bucket's files: written here, uploaded when the block ends
        write_vocab(result, stack.enter_context(writing(target.parent)) / target.name)
        write_stats(result, stack.enter_context(writing(stats.parent)) / stats.name, command=command)
        if result.glosses or config.gloss_out is not None:
            write_glosses(result, stack.enter_context(writing(gloss.parent)) / gloss.name)
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


