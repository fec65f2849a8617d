"""The shard task of ``curate recaption``: ask, journal, check, retry once, account, write.

See :mod:`curate.recaption.stage` for what the stage does and how it resumes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from curate.core.formats.writeback import dumps_record, image_ref
from curate.core.stats import StageStats, backend_identity
from curate.core.images import refusal
from curate.core.io import write_parquet
from curate.core.journal import JournalWriter, read_journal
from curate.core.shards import UNANSWERED, Shard, ShardContext, readable_records
from curate.core.limits import MAX_CAPTION_CHARS, TOO_LONG, over
from curate.generate.base import is_transient
from curate.generate.settings import sampling_of
from curate.generate.task import GenerationTask
from curate.recaption.checks import CaptionCheck, CaptionRules, check_caption
from curate.recaption.config import RecaptionConfig
from curate.recaption.prompts import caption_key, choose_lang, user_turn
from curate.recaption.retries import RETRY, final_row, retry_items

CAPTION_SCHEMA = pa.schema([
    ("id", pa.string()), ("source", pa.string()), ("lang", pa.string()), ("image", pa.string()),
    ("caption", pa.string()), ("model", pa.string()), ("error", pa.string()), ("detail", pa.string()),
    ("attempts", pa.int32()), ("truncated", pa.bool_()), ("raw", pa.string()), ("image_index", pa.int32()),
])


@dataclass(frozen=True)
class _Item:
    """One image × language to caption."""

    rec: int  # index of the record in the shard's list
    rid: str
    source: str
    image: str
    lang: str
    index: int = 0  # which image of the record (0: the first)

    @property
    def key(self) -> str:
        return caption_key(self.rid, self.lang, self.index)


class RecaptionTask(GenerationTask):
    """Captions every image of every record of a shard in each requested language (see the module docstring).

    Args:
        config: The settings of the run (:class:`~curate.recaption.config.RecaptionConfig`): its backend, languages
            or mix, prompts, sampling (seeded with its ``seed``), check rules and image limits.
    """

    stage = "recaption"
    unit = "records"

    def __init__(self, config: RecaptionConfig) -> None:
        super().__init__(config)
        self.langs = list(config.langs or ())
        self.mix = config.mix
        self.prompts = dict(config.prompts)
        self.sampling = sampling_of(config)
        self.rules = config.rules or CaptionRules()

    def settings(self) -> dict[str, Any]:
        """What changes the captions: the model, languages, mix, prompts, sampling and check rules."""
        # operational backend settings (concurrency, timeout...) may change on a rerun: not part of the settings
        return {"backend": backend_identity(self.backend.describe()), "langs": self.langs, "mix": self.mix,
                "prompts": self.prompts,
                "sampling": self.sampling, "rules": asdict(self.rules), "images": "all", **self.reading_settings()}

    def langs_for(self, rid: str, seed: int) -> list[str]:
        """The languages a record is captioned in."""
        return [choose_lang(seed, rid, self.mix)] if self.mix else self.langs

    def request(self, item: _Item, *, retry: bool = False):  # noqa: ANN201 - GenerationRequest
        """The generation request of one image × language (the retry has its own key, hence its own seed)."""
        from curate.generate.base import GenerationRequest, SamplingParams

        return GenerationRequest(key=item.key + (RETRY if retry else ""),
                                 messages=[{"role": "user", "content": user_turn(self.prompts[item.lang])}],
                                 images=[item.image], n=1, sampling=SamplingParams(**self.sampling))

    def check(self, entry: dict[str, Any], lang: str) -> CaptionCheck:
        """Check one journaled answer."""
        long = over(len(entry["text"]), MAX_CAPTION_CHARS, "characters of caption")
        if long:  # a stored answer of megabytes is never cleaned, split or counted
            return CaptionCheck("", TOO_LONG, long)
        return check_caption(entry["text"], lang, truncated=bool(entry.get("truncated")), rules=self.rules)

    # -- the shard ---------------------------------------------------------------

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Caption one shard (resuming from its journal) and write its captions and records."""
        self.setup()
        stats = StageStats()
        journal_path = ctx.journal(self.stage, shard)
        done = read_journal(journal_path)
        records: list[tuple[dict[str, Any], list[_Item]]] = []
        failed: dict[str, tuple[str, str]] = {}
        for rec in readable_records(shard, stats, ctx, max_images=self.max_images):
            rid, source = rec["id"], rec["source"]
            if not rec["images"]:
                stats.drop(rid, source, "no_image", "the record has no image to caption")
                ctx.progress(1)
                continue
            refused = [refusal([image], self.limits) for image in rec["images"]]  # each through the one image gate
            if all(r is not None for r in refused):
                stats.error(rid, source, refused[0].reason, refused[0].detail)  # type: ignore[union-attr]
                ctx.progress(1)
                continue
            langs = self.langs_for(rid, ctx.seed)
            items = [_Item(len(records), rid, source, image, lang, j)
                     for j, image in enumerate(rec["images"]) for lang in langs]
            for item in items:  # an image the gate refuses is not asked for: its rows carry the reason
                why = refused[item.index]
                if why is not None:
                    failed[item.key] = (why.reason, why.detail)
            records.append((rec, items))
        items = [it for _, its in records for it in its]
        first = [it for it in items if it.key not in done and it.key not in failed]
        pending = Counter(it.rec for it in first)
        ctx.progress(len(records) - len(pending))

        def first_done(item: _Item) -> None:
            pending[item.rec] -= 1
            if pending[item.rec] == 0:
                ctx.progress(1)

        with stats.timer("generate"):
            self._generate(first, False, done, failed, journal_path, first_done)
            checks = {it.key: self.check(done[it.key], it.lang) for it in items if it.key in done}
            if self.sampling.get("temperature", 1.0) > 0:
                again = retry_items(items, checks, done)
                self._generate(again, True, done, failed, journal_path, lambda item: None)
        rows = [final_row(it, done, failed, checks, self.check, self.backend.model_name) for it in items]
        self._account(records, rows, stats)
        unanswered = sum(1 for reason, _ in failed.values() if is_transient(reason))
        if unanswered:  # the server's failures: the shard is not complete, a rerun asks for them again
            stats.extra[UNANSWERED] = unanswered
        generation = self.backend.stats.reset()
        stats.extra.update({"images_captioned": len({(it.rec, it.index) for it in items}),
                            **{f"generation.{k}": v for k, v in generation.items()}})
        self._write(records, rows, work, shard.id)
        return stats

    def _generate(self, items: list[_Item], retry: bool, done: dict[str, dict[str, Any]],
                  failed: dict[str, tuple[str, str]], journal_path: Path, on_done: Any) -> None:
        """Ask for ``items`` and journal every answer as it arrives; backend failures go to ``failed``."""
        if not items:
            return
        requests = [self.request(it, retry=retry) for it in items]
        with JournalWriter(journal_path) as journal:
            for index, result in self.backend.stream(requests):
                if result.error is None and result.responses:
                    entry = {"key": result.key, "text": result.responses[0],
                             "truncated": bool(result.truncated[0]) if result.truncated else False, "error": None}
                    journal.write(entry)
                    done[result.key] = entry
                else:
                    failed[result.key] = (result.error or "no_response", result.detail)
                on_done(items[index])

    @staticmethod
    def _account(records: list[tuple[dict[str, Any], list[_Item]]], rows: list[dict[str, Any]],
                 stats: StageStats) -> None:
        """Count every captioned record as out, dropped (only check failures) or errored."""
        from curate.recaption.checks import REASONS

        i = 0
        for rec, items in records:
            mine = rows[i:i + len(items)]
            i += len(items)
            if any(r["error"] is None for r in mine):
                stats.kept(rec["source"])
                continue
            detail = "; ".join(f"{r['lang']}: {r['error']}" for r in mine)
            backend_failures = [r for r in mine if r["error"] not in REASONS]
            if backend_failures:
                stats.error(rec["id"], rec["source"], backend_failures[0]["error"],
                            f"{detail} ({backend_failures[0]['detail']})")
            else:
                stats.drop(rec["id"], rec["source"], mine[0]["error"], detail)

    def _write(self, records: list[tuple[dict[str, Any], list[_Item]]], rows: list[dict[str, Any]],
               work: Path, shard_id: str) -> None:
        table_rows = [{**r, "image": image_ref(r["image"])} for r in rows]  # bytes travel in records/, not here
        write_parquet(work / "captions" / f"{shard_id}.parquet", pa.Table.from_pylist(table_rows, schema=CAPTION_SCHEMA))
        lines = []
        for r in rows:
            if r["error"] is not None:
                continue
            out = {"id": caption_key(r["id"], r["lang"], r["image_index"]), "source": r["source"], "images": [r["image"]],
                   "messages": [{"role": "user", "content": user_turn(self.prompts[r["lang"]])},
                                {"role": "assistant", "content": r["caption"]}],
                   "lang": r["lang"], "recaption_of": r["id"], "caption_model": r["model"]}
            lines.append(dumps_record(out) + "\n")  # image bytes kept (base64 in this shard file)
        path = work / "records" / f"{shard_id}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines), encoding="utf-8")
