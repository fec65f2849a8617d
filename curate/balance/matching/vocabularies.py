"""The vocabularies text matching reads: one for every text, or one per language (MetaCLIP 2's per-language
metadata), their concept numbers and how the flags name them.

With several vocabularies, languages are taken in code order and their entries numbered one after the
other: language ``l``'s line ``i`` is concept ``offset(l) + i - 1`` in ``tags.parquet``, and the concept
ranges are recorded in its metadata (``vocabularies``), so every count stays a plain array.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from curate.balance.vocab.files import load_vocab
from curate.core.errors import UserError
from curate.core.io import file_sha256, is_url
from curate.core.remote import local_file

VocabArg = str | os.PathLike[str] | Mapping[str, str | os.PathLike[str]]
"""A vocabulary file, or ``{language: file}``."""
_LANG = re.compile(r"[A-Za-z][A-Za-z_-]{1,19}")


@dataclass(frozen=True)
class VocabPart:
    """One vocabulary file and its concept range: ``offset`` … ``offset + size - 1``.

    ``lang`` is None for one vocabulary shared by every text.
    """

    lang: str | None
    path: str
    offset: int
    size: int
    sha256: str


def parse_vocab_values(values: Sequence[str]) -> str | dict[str, str] | None:
    """``--vocab FILE`` (once) or ``--vocab LANG=FILE`` (once per language) as :data:`VocabArg`.

    Raises:
        UserError: a mix of both forms, a repeated language, or a value that is neither an existing file
            nor ``LANG=FILE``.
    """
    if not values:
        return None
    named: dict[str, str] = {}
    plain: list[str] = []
    for value in values:
        lang, sep, path = value.partition("=")
        if sep and not Path(value).exists() and _LANG.fullmatch(lang):
            if lang in named:
                raise UserError(f"--vocab {value}: language {lang} is given twice; give one file per language")
            named[lang] = path
        else:
            plain.append(value)
    if plain and (named or len(plain) > 1):
        raise UserError(f"--vocab {plain[0]}: give one vocabulary file, or one LANG=FILE per language "
                        "(e.g. --vocab en=en.txt --vocab zh=zh.txt), not both")
    return plain[0] if plain else named


def vocab_parts(vocab: VocabArg) -> tuple[list[VocabPart], list[list[str]]]:
    """The vocabulary files of ``vocab`` checked and read: their parts (concept ranges) and entries.

    Raises:
        UserError: a missing, empty or malformed file, or a bad language code.
    """
    if isinstance(vocab, Mapping):
        if not vocab:
            raise UserError("--vocab: give a vocabulary file, or LANG=FILE per language")
        for lang in vocab:
            if not _LANG.fullmatch(str(lang)):
                raise UserError(f"--vocab {lang}=…: {lang!r} is not a language code (e.g. en, zh, other)")
        files: list[tuple[str | None, str]] = [(str(lang), str(vocab[lang])) for lang in sorted(vocab)]
    else:
        files = [(None, str(vocab))]
    parts, entries, offset = [], [], 0
    for lang, path in files:
        local = local_file(path, "--vocab") if is_url(path) else Path(path)  # a bucket's object: a cached copy
        assert local is not None
        if not local.is_file():
            raise UserError(f"--vocab {path}: no such file; give a vocabulary, one entry per line")
        lines = load_vocab(local)
        if not lines:
            raise UserError(f"--vocab {path}: the vocabulary is empty; give a file with one entry per line")
        parts.append(VocabPart(lang, path, offset, len(lines), file_sha256(local)))
        entries.append(lines)
        offset += len(lines)
    return parts, entries


def parts_metadata(parts: Sequence[VocabPart]) -> str:
    """The parts as JSON, for ``tags.parquet``'s metadata (``vocabularies``)."""
    return json.dumps([asdict(p) for p in parts], ensure_ascii=False)


def parts_from_metadata(text: str | None) -> list[VocabPart]:
    """The parts :func:`parts_metadata` wrote (none for tags made otherwise)."""
    return [VocabPart(**p) for p in json.loads(text)] if text else []
