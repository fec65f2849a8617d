"""Languages of texts for MetaCLIP 2's worldwide balancing: identification, and the vocabulary each text uses.

Language identification uses ``py3langid`` (a maintained fork of langid.py) with the model it ships: no
download at run time, about 80 µs per caption on one core, about 1 s to load per worker. It is imported
only when languages are asked for (``--lang-id`` or per-language vocabularies). Codes are its ISO 639-1
codes (``en``, ``zh``, ``ja``, ``th``...). A text it finds no evidence in (a single ideograph, digits only,
an empty caption) has no language: it counts under :data:`OTHER`, as MetaCLIP 2 maps an unidentified
text to its ``other`` metadata.

With per-language vocabularies (``--vocab en=en.txt --vocab zh=zh.txt``), a text is matched against the
vocabulary of its language, else against ``other`` when one is given, else against nothing (it counts
under its language with no match). The language a text counts under (``lang`` in ``tags.parquet``) is the
vocabulary it used, as in MetaCLIP 2 (the metadata language of its ``lid_langcode_to_metadata_langcode``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

OTHER = "other"
"""Where a text without a language, or without a vocabulary of its language, counts."""
LANG_ID_LIBRARY = "py3langid"


def lang_id_version() -> str:
    """``py3langid==X``: recorded with the tags, since the languages found depend on it."""
    from importlib.metadata import version

    return f"{LANG_ID_LIBRARY}=={version(LANG_ID_LIBRARY)}"


class LanguageIdentifier:
    """py3langid's bundled model, loaded once (per worker): ``identify(text)`` gives a code or ``""``."""

    def __init__(self) -> None:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier as Model

        self._model: Any = Model.from_model_file(MODEL_FILE, norm_probs=True)
        # A text with no feature the model knows scores every language alike: the confidence of the empty text.
        self._floor = float(self._model.classify("")[1]) + 1e-6

    def codes(self) -> frozenset[str]:
        """The languages the model knows (ISO 639-1 codes, a few ISO 639-3)."""
        return frozenset(str(c) for c in self._model.nb_classes)

    def identify(self, text: str) -> str:
        """The language of ``text`` (its ISO 639-1 code), ``""`` when the text gives no evidence."""
        text = text.strip()
        if not text:
            return ""
        lang, confidence = self._model.classify(text)
        return "" if confidence <= self._floor else str(lang)


def counting_language(lang: str, vocabularies: Collection[str] | None) -> str:
    """The language a text counts under: its own (or :data:`OTHER` without one) with one shared vocabulary
    (``vocabularies`` None); with per-language vocabularies, the one it is matched against (its own, else
    ``other`` when given), or its own when there is none to match it against."""
    own = lang or OTHER
    if vocabularies is None or own in vocabularies:
        return own
    return OTHER if OTHER in vocabularies else own
