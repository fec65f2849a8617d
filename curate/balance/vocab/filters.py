"""The filters every vocabulary candidate goes through (see ``vocab/README.md``).

Scripts (:func:`entry_script`), normalisation (:func:`normalize_entry`),
near-duplicate keys (:func:`near_duplicate_key`) and the reasons a candidate is
dropped (:data:`REASONS`, :func:`check_candidate`, :func:`script_reason`).
"""

from __future__ import annotations

import unicodedata
from typing import Any, Literal

import regex

from curate.balance.vocab.function_words import is_debris, is_function_word

Script = Literal["latin", "cjk", "other"]

#: Why a candidate was dropped, in the order the checks run.
REASONS: tuple[str, ...] = (
    "control",  # a control, format, private-use or unassigned character
    "whitespace",  # empty once whitespace is normalised
    "too_long",  # more than max_chars characters or max_words words
    "number",  # any numeric character, or only Chinese numerals
    "punctuation",  # anything but letters joined by single ' ', '-', "'" or '·'
    "single_char",  # one grapheme (a single Han character is kept by default)
    "debris",  # a character 3 times in a row, a repeated unit, no vowel, a part of a web address
    "function_word",  # a function word, or made of function words only (English and Chinese)
    "script",  # dictionaries and wordfreq: not in the language's script
    "clitic",  # wordfreq English only: ends in 's 'm 're 've 'll 'd 't
    "function_edge",  # multi-word English dictionary and wordfreq entries: begins or ends with a function word
    "gloss_phrase",  # CC-CEDICT's English senses: more than four words, or joined by "and"/"or"
    "rare",  # wordfreq unigrams only: below --min-zipf
    "no_gloss",  # Chinese entries (with CC-CEDICT): no English gloss, so an English text tower could not read it
    "excluded",  # near-duplicate of an entry of an --exclude list
    "duplicate",  # same text as an accepted entry
    "near_duplicate",  # same near-duplicate key as an accepted entry
)

DEFAULT_MAX_CHARS = 50
DEFAULT_MAX_WORDS = 6

#: One or more Han characters and nothing else (use with ``fullmatch``).
HAN_ONLY = regex.compile(r"\p{Script=Han}+")

_LATIN = regex.compile(r"\p{Script=Latin}")
_NON_LATIN_LETTER = regex.compile(
    r"(?V1)[\p{L}--\p{Script=Latin}--\p{Script=Common}--\p{Script=Inherited}]"
)
_CJK_CLASS = r"\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}\p{Script=Bopomofo}"
_CJK = regex.compile(rf"[{_CJK_CLASS}]")
_NON_CJK_LETTER = regex.compile(
    rf"(?V1)[\p{{L}}--[{_CJK_CLASS}]--\p{{Script=Common}}--\p{{Script=Inherited}}]"
)
_NUMERIC = regex.compile(r"\p{N}")
_CHINESE_NUMBER = regex.compile(r"第?[零〇一二两三四五六七八九十百千万亿兆]+[个只张条件位本辆台棵头匹朵片块支根双对副套群种次]?")
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


def simplify_chinese(text: str) -> str:
    """Traditional Han characters mapped to Simplified ones (wordfreq's table); other characters unchanged."""
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
        key = simplify_chinese(key)
    return key


# ---------------------------------------------------------------------------
# Filter reasons
# ---------------------------------------------------------------------------


def check_candidate(text: str, max_chars: int, max_words: int, keep_single_han: bool,
                    drop_function_words: bool = True) -> tuple[str | None, str]:
    """Apply the filters of every source to a raw candidate.

    Args:
        text: A raw candidate (before normalisation).
        max_chars: Longest entry kept, in characters after normalisation.
        max_words: Most space-separated words kept.
        keep_single_han: Keep entries that are one Han character (猫, 树).
        drop_function_words: Drop function words (:func:`~curate.balance.vocab.function_words.is_function_word`).

    Returns:
        (reason or ``None`` when it passes, the normalised text); see :func:`filter_reason`.
    """
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
        and not (keep_single_han and HAN_ONLY.fullmatch(norm))
    ):
        return "single_char", norm
    if is_debris(norm):
        return "debris", norm
    if drop_function_words and is_function_word(norm):
        return "function_word", norm
    return None, norm


def filter_reason(
    text: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_words: int = DEFAULT_MAX_WORDS,
    keep_single_han: bool = True,
    drop_function_words: bool = True,
) -> str | None:
    """Return why a raw candidate fails the filters that apply to every source.

    The arguments are those of :func:`check_candidate`, with the build's defaults.

    Returns:
        One of ``control``, ``whitespace``, ``too_long``, ``number``,
        ``punctuation``, ``single_char``, ``debris``, ``function_word``, or ``None`` when the candidate passes.
    """
    return check_candidate(text, max_chars, max_words, keep_single_han, drop_function_words)[0]


def script_reason(text: str, script: str) -> str | None:
    """Return why a wordfreq entry does not belong to its language's list.

    Args:
        text: A normalised, lower-cased entry that passed :func:`check_candidate`.
        script: The script the list's entries must have (``latin`` or ``han``).

    Returns:
        ``script`` (not in that script), ``clitic`` (Latin only: ends in 's 'm
        're 've 'll 'd 't), or ``None`` when the entry is kept.
    """
    if script == "latin":
        if not text.isascii() and entry_script(text) != "latin":
            return "script"
        if _CLITIC.search(text):
            return "clitic"
    elif script == "han" and not HAN_ONLY.fullmatch(text.translate(_DROP_CONNECTORS)):
        return "script"
    return None
