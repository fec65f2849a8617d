"""Reading the sources of the vocabulary: word lists, MetaCLIP's metadata, wordfreq."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from curate.core.errors import UserError

#: wordfreq languages that can be used, with the script their entries must have.
WORDFREQ_SCRIPTS: dict[str, str] = {"en": "latin", "zh": "han"}


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
    """Read MetaCLIP's metadata as published, in file order.

    Accepted: a JSON list of strings (MetaCLIP's ``metadata.json``, MetaCLIP 2's per-language
    ``data/metadata/LANG.json``); a JSON object whose keys are the entries (MetaCLIP 2's
    ``metadata_per_lang/LANG.json``, ``{entry: source}``); any file not ending in ``.json``: one entry
    per line (a BOM and CRLF accepted), taken as written.

    Args:
        path: The file.

    Returns:
        The entries, in file order.

    Raises:
        UserError: The file is missing, is not JSON, or is not a list of strings.
    """
    path = check_input_file(path, "--metaclip-metadata")
    if path.suffix.lower() != ".json":
        return read_word_list(path, "--metaclip-metadata")
    try:
        data = json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 (--metaclip-metadata); expected a JSON list of strings") from None
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}:{exc.lineno}: not valid JSON ({exc.msg}) (--metaclip-metadata); "
            "expected a JSON list of strings such as MetaCLIP's metadata.json"
        ) from None
    if isinstance(data, dict):
        data = list(data)  # MetaCLIP 2's {entry: source}: the entries are the keys, in file order
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


@functools.cache
def read_wordfreq_zipf(lang: str) -> tuple[tuple[str, float], ...]:
    """wordfreq's large list for ``lang`` as (word, Zipf frequency), in the order of :func:`read_wordfreq`.

    Band ``i`` of wordfreq's list holds the words of frequency 10^(-i/100), that is Zipf 9 - i/100.
    """
    try:
        import wordfreq
    except ImportError:  # pragma: no cover - install extra
        raise UserError("wordfreq is not installed; run pip install 'curate[vocab]' or pass --no-wordfreq") from None
    return tuple((w, round(9 - i / 100, 2)) for i, band in enumerate(wordfreq.get_frequency_list(lang, "large"))
                 for w in sorted(band, key=_tie_break))
