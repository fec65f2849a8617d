"""The texts of a record that text matching reads, and how they are grouped for matching.

A record's texts, in order:

* with ``--text-field F``: the raw field ``F`` (each item of a list: several captions);
* else a record with a ``captions`` list (COCO/Flickr30k caption files, read with their first caption as
  the conversation: :func:`curate.core.records.to_canonical`): each caption;
* else each assistant turn (its text parts joined by line breaks).

A missing item of a list is an empty text, so a text's index is its place in the record's list.
``--per record`` matches a record's texts joined by line breaks as one text (one row of ``tags.parquet``
per record); ``--per text`` matches each text on its own (one row per text, with its index in ``text``),
which is how MetaCLIP counts: per caption.
"""

from __future__ import annotations

from typing import Any




def record_texts(record: dict[str, Any], raw: Any, field: str | None) -> list[str]:
    """Every text of a record (see the module docstring)."""
    if field is not None:
        value = raw.get(field) if isinstance(raw, dict) else None
        if isinstance(value, (list, tuple)):
            return ["" if v is None else str(v) for v in value]
        return [] if value is None else [str(value)]
    captions = record.get("captions")
    if isinstance(captions, (list, tuple)) and captions:
        return ["" if c is None else str(c) for c in captions]
    texts = []
    for message in record.get("messages", []):
        if message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.append("\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict)))
    return texts


def record_text(record: dict[str, Any], raw: Any, field: str | None) -> str:
    """A record's texts joined by line breaks: what ``--per record`` matches."""
    return "\n".join(record_texts(record, raw, field))


def texts_to_match(record: dict[str, Any], raw: Any, field: str | None, per: str) -> list[str]:
    """The texts matched for a record, one row each: its texts (``per="text"``; one empty text when it has
    none, so every record keeps a row) or all of them joined (``per="record"``)."""
    texts = record_texts(record, raw, field)
    if per == "record" or not texts:
        return ["\n".join(texts)]
    return texts
