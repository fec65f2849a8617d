"""A built vocabulary and its accounting (:class:`VocabResult`), shared by the builder and the file writers."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from curate.balance.vocab.filters import REASONS


@dataclass
class VocabResult:
    """A built vocabulary and its accounting.

    Attributes:
        entries: The vocabulary, in output order (priority order).
        entry_sources: The source of each entry (parallel to ``entries``).
        available: Entries that passed every filter, before the cut to ``size``.
        read: Candidates read per source.
        accepted: Candidates accepted per source (before the cut to ``size``).
        dropped: Per source, candidates dropped per reason (see :data:`REASONS`).
        kept_per_source: Entries in the vocabulary per source.
        kept_per_script: Entries in the vocabulary per :func:`entry_script`.
        bigram_stats: The mining counts when captions were given.
        params: The parameters of the build.
        glosses: The English gloss of each Chinese entry that has one (CC-CEDICT), written beside the vocabulary.
        multi_word: How many entries are multi-word (:func:`curate.balance.vocab.recipe.multi_word_counts`).
        lexicons: What was read of each built-in dictionary (version, file, sha256, licence).
    """

    entries: list[str]
    entry_sources: list[str]
    available: int
    read: dict[str, int]
    accepted: dict[str, int]
    dropped: dict[str, dict[str, int]]
    kept_per_source: dict[str, int]
    kept_per_script: dict[str, int]
    bigram_stats: dict[str, Any] | None
    params: dict[str, Any] = field(default_factory=dict)
    glosses: dict[str, str] = field(default_factory=dict)
    multi_word: dict[str, int] = field(default_factory=dict)
    lexicons: dict[str, Any] = field(default_factory=dict)

    def stats(self) -> dict[str, Any]:
        """Return a JSON-serialisable summary (no entries)."""
        dropped_total: Counter = Counter()
        for reasons in self.dropped.values():
            dropped_total.update(reasons)
        return {
            "size": len(self.entries),
            "available": self.available,
            "cut_by_size": self.available - len(self.entries),
            "kept_per_script": self.kept_per_script,
            "kept_per_source": self.kept_per_source,
            "read_per_source": self.read,
            "accepted_per_source": self.accepted,
            "dropped_per_source": self.dropped,
            "dropped_per_reason": {r: dropped_total[r] for r in REASONS if dropped_total[r]},
            "multi_word": self.multi_word,
            "glossed": len(self.glosses),
            "without_gloss": {"cjk": self.kept_per_script.get("cjk", 0) - len(self.glosses)},
            "sources": self.lexicons,
            "bigrams": self.bigram_stats,
            "params": self.params,
        }


