"""``curate tag --match text``: MetaCLIP's substring matching of captions against the vocabulary (no embeddings).

MetaCLIP curates by matching each alt-text against its metadata entries as
substrings (Xu et al., "Demystifying CLIP Data"; MetaCLIP 2 for worldwide text).
The rules implemented here, learned from MetaCLIP's public description and code:

* **Text spacing.** The text gets a space at both ends; ``, . ; : ? ! ``` are
  wrapped in spaces; tabs and line breaks become spaces. So "A cat, asleep." is
  searched as `` A cat ,  asleep . ``.
* **Word boundaries.** An entry must start after a space unless its first
  character belongs to a script written without spaces (CJK ideographs and
  radicals, Thai, Lao, Burmese, Khmer, Tibetan; see :func:`no_space_char`) or is
  punctuation, and likewise must end before a space unless its last character
  is one of those. "cat" matches " cat " but not "category" or "concatenate";
  "猫" matches inside "一只猫在睡觉" with no spaces at all; a mixed entry such as
  "T恤" needs a space before "T" only.
* **Counting.** Every occurrence counts (overlapping entries too: "black cat" and
  "cat" both match " black cat "); an entry present twice counts 2.
* **Case.** MetaCLIP compares case-sensitively. curate folds case (``str.lower``
  on entries and texts) by default because captions start sentences with capitals;
  ``case_sensitive=True`` gives MetaCLIP's exact behaviour. Entries that become
  equal after folding keep every vocabulary index.

Matching uses one Aho-Corasick automaton over all entries (``pyahocorasick``),
so a caption costs time linear in its length whatever the vocabulary size.

The output is the ``tags.parquet`` of ``curate tag`` (``id``, ``source``,
``concepts`` = vocabulary line − 1, ``scores`` = match counts as float32), ordered
by count then vocabulary line, so ``curate resample`` reads it unchanged.
"""

from __future__ import annotations

import json
import os
import pickle
import string
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from curate.balance.config import MatchConfig
from curate.balance.vocab.files import load_vocab
from curate.core.errors import UserError
from curate.core.io import atomic_open, file_sha256, write_parquet
from curate.core.shards import Shard, ShardContext, ShardTask, plan_shards, readable_records
from curate.core.progress import console
from curate.core.stats import StageStats, finish_stage, run_header
from curate.core.validate import configure

_WRAP = ",.;:?!`"
_TO_SPACE = "\t\n\r"
_SPACING = str.maketrans({**{c: f" {c} " for c in _WRAP}, **{c: " " for c in _TO_SPACE}})
FULLWIDTH_PUNCT = frozenset("，。、；：？！“”‘’（）【】《》〈〉「」『』～—")
NO_SPACE_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF), (0x2CEB0, 0x2EBEF), (0xF900, 0xFAFF), (0x2E80, 0x2EFF), (0x2F00, 0x2FDF),
    (0x2FF0, 0x2FFF),  # CJK ideographs, extensions, compatibility ideographs, radicals, description characters
    (0x0E00, 0x0E7F), (0x0E80, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x0F00, 0x0FFF),
)  # Thai, Lao, Burmese, Khmer, Tibetan
"""Code point ranges of scripts written without spaces between words."""


def no_space_char(char: str) -> bool:
    """True when an entry may start or end at ``char`` without a space beside it.

    That is a character of a script written without spaces (:data:`NO_SPACE_RANGES`)
    or punctuation (ASCII or the full-width forms of :data:`FULLWIDTH_PUNCT`).
    """
    code = ord(char)
    if any(lo <= code <= hi for lo, hi in NO_SPACE_RANGES):
        return True
    return char in string.punctuation or char in FULLWIDTH_PUNCT


def spaced_text(text: str) -> str:
    """The text as searched: spaces at both ends, ``, . ; : ? ! ``` wrapped in spaces, tabs/newlines as spaces."""
    return f" {text.translate(_SPACING)} "


def spaced_entry(entry: str) -> str:
    """The pattern of an entry: a space before/after unless it starts/ends with a no-space character."""
    if not entry:
        return entry
    head = "" if no_space_char(entry[0]) else " "
    tail = "" if no_space_char(entry[-1]) else " "
    return f"{head}{entry}{tail}"


class TextMatcher:
    """All vocabulary entries in one Aho-Corasick automaton (see the module docstring).

    Args:
        entries: vocabulary entries; entry ``i`` is concept ``i``.
        case_sensitive: compare as written (MetaCLIP) instead of folding case.
    """

    def __init__(self, entries: Iterable[str] | None, *, case_sensitive: bool = False) -> None:
        import ahocorasick

        self.case_sensitive = case_sensitive
        self.groups: list[tuple[int, ...]] = []  # entries equal after spacing/folding: value -(j + 1)
        self._automaton: Any = None
        if entries is None:
            return
        patterns: dict[str, list[int]] = {}
        for i, entry in enumerate(entries):
            entry = entry.strip()
            if entry:
                patterns.setdefault(spaced_entry(entry if case_sensitive else entry.lower()), []).append(i)
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

    def save(self, path: str | Path) -> None:
        """Write the automaton (``path``), then its groups (``path.groups.json``) for workers to load.

        The groups file is written last: its presence marks a complete save.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        if self._automaton is not None:
            self._automaton.save(str(tmp))
            os.replace(tmp, path)
        with atomic_open(path.with_name(path.name + ".groups.json"), "w") as fh:
            json.dump({"case_sensitive": self.case_sensitive, "groups": self.groups}, fh)

    @classmethod
    def load(cls, path: str | Path) -> TextMatcher:
        """The matcher :meth:`save` wrote (about 3× faster than building it from 500K entries)."""
        import ahocorasick

        path = Path(path)
        info = json.loads(path.with_name(path.name + ".groups.json").read_text())
        matcher = cls(None, case_sensitive=info["case_sensitive"])
        matcher.groups = [tuple(g) for g in info["groups"]]
        if path.exists():
            matcher._automaton = ahocorasick.load(str(path), pickle.loads)
        return matcher

    def counts(self, text: str) -> dict[int, int]:
        """``{concept: occurrences}`` of the entries found in ``text``."""
        if self._automaton is None or not text:
            return {}
        found: dict[int, int] = {}
        for _, value in self._automaton.iter(spaced_text(text if self.case_sensitive else text.lower())):
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


def brute_force_counts(text: str, entries: list[str], *, case_sensitive: bool = False) -> dict[int, int]:
    """Reference matcher: every entry searched with ``str.find`` in the spaced text (slow; for checking)."""
    spaced = spaced_text(text if case_sensitive else text.lower())
    found: dict[int, int] = {}
    for i, entry in enumerate(entries):
        entry = entry.strip()
        if not entry:
            continue
        key = spaced_entry(entry if case_sensitive else entry.lower())
        start, n = spaced.find(key), 0
        while start >= 0:
            n += 1
            start = spaced.find(key, start + 1)
        if n:
            found[i] = n
    return found


def record_text(record: dict[str, Any], raw: Any, field: str | None) -> str:
    """The text matched for a record: ``raw[field]`` when a field is named, else its assistant messages."""
    if field is not None:
        value = raw.get(field) if isinstance(raw, dict) else None
        if isinstance(value, list):
            return "\n".join(str(v) for v in value if v is not None)
        return "" if value is None else str(value)
    parts = []
    for message in record.get("messages", []):
        if message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


#: ``text_field`` in ``tags.parquet``'s metadata when the assistant turns were matched (no field named).
_ASSISTANT = "assistant"


def matched_text_field(tags: str | os.PathLike[str]) -> str | None:
    """The raw field a ``tag --match text`` run read its rows' text from (``--text-field``), from its
    ``tags.parquet``; None for the assistant turns or tags made from embeddings. ``resample --records``
    reads the records with it, so that rows in no known layout are found again."""
    from curate.balance.tag import tags_metadata

    meta = tags_metadata(tags)
    field = meta.get("text_field") if meta.get("match") == "text" else None
    return None if field in (None, "", _ASSISTANT) else field


class MatchTask(ShardTask):
    """Match one shard of records against the vocabulary; writes ``tags/<shard>.parquet``.

    A CPU task: each worker runs one thread and loads the automaton once in :meth:`setup`.
    """

    stage = "match"
    transient = ("_matcher",)

    def __init__(self, vocab: str, config: MatchConfig, *, automaton: str | None = None) -> None:
        self.vocab, self.config, self.automaton = vocab, config, automaton
        self._matcher: TextMatcher | None = None

    def setup(self) -> None:
        """Load the automaton the driver saved (or build it) once per worker."""
        if self._matcher is None:
            if self.automaton and Path(self.automaton + ".groups.json").exists():
                self._matcher = TextMatcher.load(self.automaton)
            else:
                self._matcher = TextMatcher(load_vocab(Path(self.vocab)), case_sensitive=self.config.case_sensitive)

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Match every readable record of the shard; a record without any match keeps an empty list."""
        from curate.balance.tag import TAGS_DIR, tags_table

        self.setup()
        assert self._matcher is not None
        stats = StageStats()
        ids, sources, lengths, concepts, scores = [], [], [], [], []
        no_text = 0
        with stats.timer("match"):
            for raw, rec in readable_records(shard, stats, ctx, with_raw=True):
                text = record_text(rec, raw, self.config.text_field)
                found, counts = self._matcher.match(text, self.config.top_k) if text else ([], [])
                no_text += not text
                ids.append(rec["id"])
                sources.append(rec["source"])
                lengths.append(len(found))
                concepts.extend(found)
                scores.extend(counts)
                ctx.progress(1)
        lengths_array = np.array(lengths, np.int64)
        stats.kept_many(Counter(sources))  # a record without a match stays; resample counts it as no_concept
        stats.extra["rows_without_concept"] = int((lengths_array == 0).sum())
        stats.extra["rows_without_text"] = no_text
        stats.extra["matches"] = len(concepts)
        table = tags_table(ids, sources, lengths_array, np.array(concepts, np.int32), np.array(scores, np.float32))
        write_parquet(work / TAGS_DIR / f"{shard.id}.parquet", table)
        return stats


def match_text(inputs: Sequence[str | os.PathLike[str]], vocab: str | os.PathLike[str],
               config: MatchConfig | None = None, *, executor: Any = None, write_stats: bool = True,
               **settings: Any) -> dict[str, Any]:
    """Tag records by substring matching of their text against ``vocab`` into ``OUT/tags.parquet``; resumable.

    Same arguments as :func:`run_match_text`; returns only the ``stats.json`` content.
    """
    return run_match_text(inputs, vocab, config, executor=executor, write_stats=write_stats, **settings)[0]


def run_match_text(inputs: Sequence[str | os.PathLike[str]], vocab: str | os.PathLike[str],
                   config: MatchConfig | None = None, *, executor: Any = None, write_stats: bool = True,
                   **settings: Any) -> tuple[dict[str, Any], StageStats]:
    """Tag records by substring matching of their text against ``vocab`` into ``OUT/tags.parquet``; resumable.

    Args:
        inputs: record files or folders (any layout curate reads).
        vocab: vocabulary file, one entry per line (concept = line − 1), checked by
            :func:`curate.balance.vocab.files.load_vocab` (no blank or repeated line).
        config: the settings (see :class:`MatchConfig`): ``out``, ``text_field`` (match this raw
            field, e.g. ``caption``, instead of the assistant messages), ``case_sensitive``
            (MetaCLIP's exact comparison instead of folding case), ``top_k`` (keep at most this
            many concepts per record; default every match), ``shard_size`` and ``seed`` (recorded
            only: matching is deterministic).
        executor: a :class:`curate.executors.Executor` (default: local, one worker).
        write_stats: write ``OUT/stats.json``.
        **settings: fields of :class:`MatchConfig`, instead of or over ``config``.

    Returns:
        The ``stats.json`` content and the merged stats (with the rejects).
    """
    from curate.balance.tag import merge_tags
    from curate.executors import run_stage

    config = configure(MatchConfig, config, **settings)
    out, case_sensitive, top_k = Path(config.out), config.case_sensitive, config.top_k
    entries = load_vocab(Path(vocab))
    if not entries:
        raise UserError(f"--vocab {vocab}: the vocabulary is empty; give a file with one entry per line")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    vocab_sha = file_sha256(vocab)
    shards = plan_shards(inputs, config.shard_size, text_field=config.text_field, image_root=config.image_root,
                         text_only=True)
    automaton = out / "_match" / f"automaton-{vocab_sha[:16]}-{'case' if case_sensitive else 'fold'}.bin"
    if not Path(str(automaton) + ".groups.json").exists():
        TextMatcher(entries, case_sensitive=case_sensitive).save(automaton)
        console.print(f"match text: {len(entries):,} vocabulary entries in one automaton "
                      f"({time.perf_counter() - t0:.1f} s)")
    task = MatchTask(str(vocab), config, automaton=str(automaton))
    settings = {"match": "text", "vocab_sha256": vocab_sha[:16], "text_field": config.text_field,
                "case_sensitive": case_sensitive, "top_k": top_k}
    stats = run_stage(task, shards, out, executor=executor, seed=config.seed, desc="match text", settings=settings)
    meta = {"concept_rows": str(len(entries)), "concepts_embedded": str(len(entries)),
            "top_k": str(top_k or 0), "match": "text", "vocab_sha256": vocab_sha,
            "case_sensitive": str(case_sensitive).lower(), "text_field": config.text_field or _ASSISTANT}
    rows = merge_tags(out, len(shards), meta)
    counts = stats.to_dict()
    wall = time.perf_counter() - t0
    result = {
        **run_header("tag", seed=config.seed, settings=settings),
        "records_in": counts["records_in"], "records_tagged": counts["records_out"], "rows": rows,
        "rows_without_concept": int(stats.extra.get("rows_without_concept", 0)),
        "rows_without_text": int(stats.extra.get("rows_without_text", 0)), "matches": int(stats.extra.get("matches", 0)),
        "dropped": counts["dropped"], "errored": counts["errored"], "per_source": counts["per_source"],
        "concept_rows": len(entries), "concepts_embedded": len(entries), "shards": len(shards),
        "timings": {**counts["timings"], "wall": round(wall, 3)},
        "outputs": {"tags": "tags.parquet", "rejects": "rejects.parquet"},
    }
    if write_stats:
        finish_stage(out, result, stats)
    return result, stats
