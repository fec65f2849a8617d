"""``curate match``: MetaCLIP's substring matching of captions against the vocabulary (no embeddings).

MetaCLIP curates by matching each alt-text against its metadata entries as substrings (Xu et al.,
"Demystifying CLIP Data"; MetaCLIP 2 for worldwide text). The rules (spacing, word boundaries, case; ``--rules
curate|metaclip``) are :mod:`curate.balance.matching.rules`, the automaton
:mod:`curate.balance.matching.automaton`, a record's texts :mod:`curate.balance.matching.texts` and their
languages :mod:`curate.balance.matching.languages`; this module runs the matching over records as a stage.

The output is the ``tags.parquet`` of ``curate tag`` (``id``, ``source``, ``concepts`` = vocabulary line − 1,
``scores`` = match counts as float32), ordered by count then vocabulary line, so ``curate resample`` reads it
unchanged. ``--per text`` writes one row per text of a record (its rows consecutive, ``text`` = the text's
index); languages (``--lang-id`` or per-language vocabularies) add ``lang``, the language each row counts under.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from curate.balance.config import MatchConfig, wall_timings
from curate.balance.matching.automaton import TextMatcher
from curate.balance.matching.languages import LanguageIdentifier, counting_language, lang_id_version
from curate.balance.matching.rules import match_rules
from curate.balance.matching.texts import texts_to_match
from curate.balance.matching.vocabularies import VocabArg, VocabPart, parts_metadata, vocab_parts
from curate.core.io import write_parquet
from curate.core.remote import writing
from curate.core.progress import console
from curate.core.shards import Shard, ShardContext, ShardTask, plan_shards, readable_records
from curate.core.stats import StageStats, finish_stage, stage_result
from curate.core.validate import configure

#: ``text_field`` in ``tags.parquet``'s metadata when the assistant turns were matched (no field named).
_ASSISTANT = "assistant"


def matched_text_field(tags: str | os.PathLike[str]) -> str | None:
    """The raw field a ``curate match`` run read its rows' text from (``--text-field``), from its
    ``tags.parquet``; None for the assistant turns or tags made from embeddings. ``resample --records``
    reads the records with it, so that rows in no known layout are found again."""
    from curate.balance.tag import tags_metadata

    meta = tags_metadata(tags)
    field = meta.get("text_field") if meta.get("match") == "text" else None
    return None if field in (None, "", _ASSISTANT) else field


def tags_schema(per_text: bool, languages: bool) -> pa.Schema:
    """``tags.parquet``'s columns: curate tag's, then ``text`` (``--per text``) and ``lang`` (languages)."""
    from curate.balance.tag import TAGS_SCHEMA

    schema = TAGS_SCHEMA
    if per_text:
        schema = schema.append(pa.field("text", pa.int32()))
    if languages:
        schema = schema.append(pa.field("lang", pa.string()))
    return schema


GROUPS = ".groups.json"  # beside each automaton: its groups and rules (curate.balance.matching.automaton)


class MatchTask(ShardTask):
    """Match one shard of records against the vocabularies; writes ``tags/<shard>.parquet``.

    A CPU task: each worker runs one thread and loads the automatons (and the language model) once in :meth:`setup`.
    """

    stage = "match"
    transient = ("_matchers", "_lid")

    def __init__(self, parts: Sequence[VocabPart], config: MatchConfig, *, automatons: Sequence[str]) -> None:
        self.parts, self.config, self.automatons = list(parts), config, list(automatons)
        self._matchers: dict[str | None, TextMatcher] | None = None
        self._lid: LanguageIdentifier | None = None
        # automatons in OUT (relative paths): the driver wrote them; nodes without them fetch them from a bucket
        self.reads_out = tuple(f for a in self.automatons if not os.path.isabs(a) for f in (a, a + GROUPS))

    def setup(self) -> None:
        """Load the automatons the driver saved (those of OUT with the first shard), and the language model when
        languages are asked for."""
        if self._matchers is None and not self.reads_out:
            self._matchers = {part.lang: TextMatcher.load(path) for part, path in zip(self.parts, self.automatons)}
        if self.config.lang_id and self._lid is None:
            self._lid = LanguageIdentifier()

    def _load(self, ctx: ShardContext) -> None:
        """The automatons of OUT, on this node (executors bring ``reads_out`` before shards run)."""
        if self._matchers is None:
            assert ctx.out is not None
            self._matchers = {part.lang: TextMatcher.load(a if os.path.isabs(a) else ctx.out / a)
                              for part, a in zip(self.parts, self.automatons)}

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Match every text of every readable record of the shard; a text without any match keeps an empty list."""
        from curate.balance.tag import TAGS_DIR, tags_table

        self.setup()
        self._load(ctx)
        assert self._matchers is not None
        config = self.config
        per_text, languages = config.per == "text", config.lang_id
        named = None if None in self._matchers else set(self._matchers)  # per-language vocabularies
        stats = StageStats()
        ids, sources, lengths, concepts, scores, index, langs = [], [], [], [], [], [], []
        no_text = no_vocab = texts = 0
        by_lang: Counter[str] = Counter()
        with stats.timer("match"):
            for raw, rec in readable_records(shard, stats, ctx, with_raw=True, max_images=None):  # text only
                items = texts_to_match(rec, raw, config.text_field, config.per)
                no_text += not any(t.strip() for t in items)
                for i, text in enumerate(items):
                    matcher = self._matchers.get(None)
                    if languages:
                        assert self._lid is not None
                        lang = counting_language(self._lid.identify(text), named)
                        matcher = self._matchers.get(lang) if named is not None else matcher
                        no_vocab += matcher is None
                        by_lang[lang] += 1
                        langs.append(lang)
                    found, counts = matcher.match(text, config.top_k) if matcher is not None else ([], [])
                    ids.append(rec["id"])
                    sources.append(rec["source"])
                    lengths.append(len(found))
                    concepts.extend(found)
                    scores.extend(counts)
                    index.append(i)
                texts += len(items)
                ctx.progress(1)
        lengths_array = np.array(lengths, np.int64)
        stats.kept_many(Counter(sources[j] for j in range(len(ids)) if index[j] == 0))
        stats.extra.update(rows_without_concept=int((lengths_array == 0).sum()), rows_without_text=no_text,
                           matches=len(concepts), texts=texts, texts_without_vocabulary=no_vocab,
                           **{f"texts:{lang}": n for lang, n in by_lang.items()})
        table = tags_table(ids, sources, lengths_array, np.array(concepts, np.int32), np.array(scores, np.float32))
        if per_text:
            table = table.append_column("text", pa.array(index, pa.int32()))
        if languages:
            table = table.append_column("lang", pa.array(langs, pa.string()))
        write_parquet(work / TAGS_DIR / f"{shard.id}.parquet", table)
        return stats


def match(inputs: Sequence[str | os.PathLike[str]], vocab: VocabArg, config: MatchConfig | None = None, *,
          executor: Any = None, **settings: Any) -> dict[str, Any]:
    """Tag records by substring matching of their text against ``vocab`` into ``OUT/tags.parquet``; resumable.

    Args:
        inputs: record files or folders (any layout curate reads).
        vocab: a vocabulary file, one entry per line (concept = line − 1), checked by
            :func:`curate.balance.vocab.files.load_vocab` (no blank or repeated line); or ``{language: file}``,
            one vocabulary per language (:mod:`curate.balance.matching.vocabularies`), which identifies
            the language of every text.
        config: the settings (see :class:`MatchConfig`): ``out``, ``text_field`` (match this raw
            field, e.g. ``caption``, instead of the record's captions or assistant turns), ``rules``
            (``curate`` or ``metaclip``), ``case_sensitive`` (the curate rules without folding case),
            ``per`` (``record`` or ``text``), ``lang_id`` (identify each text's language), ``top_k``
            (keep at most this many concepts per text; default every match), ``shard_size`` and ``seed``
            (recorded only: matching is deterministic).
        executor: a :class:`curate.executors.Executor` (default: local, one worker).
        **settings: fields of :class:`MatchConfig`, instead of or over ``config``.

    Returns:
        The ``stats.json`` content (also written, with ``OUT/rejects.parquet``).
    """
    config = configure(MatchConfig, config, **settings)
    with writing(config.out) as out:  # a bucket: shards stream there (curate.core.remote)
        result, stats = match_step(inputs, vocab, config, out, executor=executor)
        return finish_stage(out, result, stats)


def _automatons(parts: Sequence[VocabPart], entries: Sequence[list[str]], rules: Any, out: Path) -> list[str]:
    """Each vocabulary's automaton, built once into ``OUT/_match/`` (kept across reruns: keyed by the vocabulary's
    hash, its first concept and the rules), named relative to OUT so that any node finds it."""
    flavour = "-".join(str(v) for v in (rules.name, int(rules.fold_case), int(rules.strip_entries)))
    automatons = []
    for part, lines in zip(parts, entries):
        automaton = out / "_match" / f"automaton-{part.sha256[:16]}-{part.offset}-{flavour}.bin"
        if not Path(str(automaton) + GROUPS).exists():
            TextMatcher(lines, rules=rules, offset=part.offset).save(automaton)
        automatons.append(automaton.relative_to(out).as_posix())
    return automatons


def match_step(inputs: Sequence[str | os.PathLike[str]], vocab: VocabArg, config: MatchConfig, out: Path, *,
               executor: Any = None) -> tuple[dict[str, Any], StageStats]:
    """The work of :func:`match` into the local folder ``out``, for a pipeline that writes its own ``stats.json``
    (``curate balance --match text``): the step's ``stats.json`` content and its stats (with the rejects)."""
    from curate.balance.tag import merge_tags
    from curate.executors import run_stage

    parts, entries = vocab_parts(vocab)
    per_language = parts[0].lang is not None
    if per_language and not config.lang_id:
        config = configure(MatchConfig, config, lang_id=True)  # a vocabulary per language: languages are needed
    rules = match_rules(config.rules, case_sensitive=config.case_sensitive)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    shards = plan_shards(inputs, config.shard_size, text_field=config.text_field, image_root=config.image_root,
                         text_only=True)
    automatons = _automatons(parts, entries, rules, out)
    n_entries = sum(p.size for p in parts)
    console.print(f"match text: {n_entries:,} vocabulary entries in {len(parts)} automaton(s) "
                  f"({time.perf_counter() - t0:.1f} s)")
    task = MatchTask(parts, config, automatons=automatons)
    lid = lang_id_version() if config.lang_id else None
    vocab_sha = parts[0].sha256[:16] if not per_language else {p.lang: p.sha256[:16] for p in parts}
    settings = {"match": "text", "vocab_sha256": vocab_sha, "text_field": config.text_field, **rules.settings(),
                "per": config.per, "lang_id": lid, "top_k": config.top_k}
    stats = run_stage(task, shards, out, executor=executor, seed=config.seed, desc="match text", settings=settings)
    meta = {"concept_rows": str(n_entries), "concepts_embedded": str(n_entries), "top_k": str(config.top_k or 0),
            "match": "text", "vocab_sha256": parts[0].sha256 if not per_language else "",
            "case_sensitive": str(not rules.fold_case).lower(), "rules": rules.name, "per": config.per,
            "lang_id": lid or "", "text_field": config.text_field or _ASSISTANT,
            **({"vocabularies": parts_metadata(parts)} if per_language else {})}
    rows = merge_tags(out, len(shards), meta, schema=tags_schema(config.per == "text", config.lang_id))
    extra = stats.extra
    texts_per_language = {k.split(":", 1)[1]: int(v) for k, v in sorted(extra.items()) if k.startswith("texts:")}
    languages = {"texts_per_language": texts_per_language,
                 "texts_without_vocabulary": int(extra.get("texts_without_vocabulary", 0))} if config.lang_id else {}
    vocabularies = {"vocabularies": {p.lang: {"path": p.path, "entries": p.size, "first_concept": p.offset}
                                     for p in parts}} if per_language else {}
    result = stage_result(
        "match", stats, seed=config.seed, settings=settings, out_key="records_tagged", rows=rows,
        texts=int(extra.get("texts", 0)), rows_without_concept=int(extra.get("rows_without_concept", 0)),
        rows_without_text=int(extra.get("rows_without_text", 0)), matches=int(extra.get("matches", 0)), **languages,
        concept_rows=n_entries, concepts_embedded=n_entries, shards=len(shards), **vocabularies,
        timings=wall_timings(stats, t0), outputs={"tags": "tags.parquet", "rejects": "rejects.parquet"})
    return result, stats
