"""All vocabulary entries in one Aho-Corasick automaton (``pyahocorasick``), under a set of :mod:`rules
<curate.balance.matching.rules>`: a caption costs time linear in its length whatever the vocabulary size.

* **Counting.** Every occurrence counts (overlapping entries too: "black cat" and "cat" both match
  " black cat "); an entry present twice counts 2. MetaCLIP keeps the set of entries a text matches;
  the set is the same (:meth:`TextMatcher.match` lists it), the counts are the scores.
* Entries that give the same pattern (``Apple`` and ``apple`` when case is folded) keep every
  vocabulary index.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from curate.balance.matching.rules import MatchRules
from curate.core.io import atomic_open, atomic_path


class TextMatcher:
    """All vocabulary entries in one automaton (see the module docstring).

    Args:
        entries: vocabulary entries; entry ``i`` is concept ``offset + i``.
        case_sensitive: the curate rules without folding case (ignored when ``rules`` is given).
        rules: how texts and entries are prepared (default: curate's).
        offset: the concept index of the first entry (a language's vocabulary after others).
    """

    def __init__(self, entries: Iterable[str] | None, *, case_sensitive: bool = False,
                 rules: MatchRules | None = None, offset: int = 0) -> None:
        import ahocorasick

        self.rules = rules if rules is not None else MatchRules(fold_case=not case_sensitive)
        self.offset = offset
        self.groups: list[tuple[int, ...]] = []  # entries giving one pattern: value -(j + 1)
        self._automaton: Any = None
        if entries is None:
            return
        patterns: dict[str, list[int]] = {}
        for i, entry in enumerate(entries):
            key = self.rules.pattern(entry)
            if key:
                patterns.setdefault(key, []).append(i + offset)
        automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS, ahocorasick.KEY_STRING)
        for key, ids in patterns.items():
            if len(ids) == 1:
                automaton.add_word(key, ids[0])
            else:
                self.groups.append(tuple(ids))
                automaton.add_word(key, -len(self.groups))
        if patterns:
            automaton.make_automaton()
            self._automaton = automaton

    @property
    def case_sensitive(self) -> bool:
        """Whether texts and entries are compared as written."""
        return not self.rules.fold_case

    def save(self, path: str | Path) -> None:
        """Write the automaton (``path``), then its groups and rules (``path.groups.json``) for workers to load.

        The groups file is written last: its presence marks a complete save.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self._automaton is not None:
            with atomic_path(path) as tmp:  # removed again if the save fails (a full disk)
                self._automaton.save(str(tmp))
        with atomic_open(path.with_name(path.name + ".groups.json"), "w") as fh:
            json.dump({"rules": [self.rules.name, self.rules.fold_case, self.rules.strip_entries],
                       "offset": self.offset, "groups": self.groups}, fh)

    @classmethod
    def load(cls, path: str | Path) -> TextMatcher:
        """The matcher :meth:`save` wrote (about 3× faster than building it from 500K entries)."""
        import ahocorasick

        path = Path(path)
        info = json.loads(path.with_name(path.name + ".groups.json").read_text())
        name, fold, strip = info["rules"]
        matcher = cls(None, rules=MatchRules(name, fold_case=fold, strip_entries=strip), offset=info["offset"])
        matcher.groups = [tuple(g) for g in info["groups"]]
        if path.exists():
            matcher._automaton = ahocorasick.load(str(path), pickle.loads)
        return matcher

    def counts(self, text: str) -> dict[int, int]:
        """``{concept: occurrences}`` of the entries found in ``text``."""
        if self._automaton is None or not text:
            return {}
        found: dict[int, int] = {}
        for _, value in self._automaton.iter(self.rules.text(text)):
            if value < 0:
                for c in self.groups[-value - 1]:
                    found[c] = found.get(c, 0) + 1
            else:
                found[value] = found.get(value, 0) + 1
        return found

    def match(self, text: str, top_k: int | None = None) -> tuple[list[int], list[float]]:
        """``(concepts, counts)``: most occurrences first, then by vocabulary line; at most ``top_k``."""
        found = self.counts(text)
        order = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
        if top_k is not None:
            order = order[:top_k]
        return [c for c, _ in order], [float(n) for _, n in order]


def brute_force_counts(text: str, entries: list[str], *, case_sensitive: bool = False,
                       rules: MatchRules | None = None) -> dict[int, int]:
    """Reference matcher: every entry searched with ``str.find`` in the prepared text (slow; for checking)."""
    rules = rules if rules is not None else MatchRules(fold_case=not case_sensitive)
    spaced = rules.text(text)
    found: dict[int, int] = {}
    for i, entry in enumerate(entries):
        key = rules.pattern(entry)
        if not key:
            continue
        start, n = spaced.find(key), 0
        while start >= 0:
            n += 1
            start = spaced.find(key, start + 1)
        if n:
            found[i] = n
    return found
