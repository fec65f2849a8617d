"""``curate recaption``: new English and Chinese captions for the images of records.

For every record with at least one image, the :class:`RecaptionTask` asks the
generation backend (:mod:`curate.generate`) for one caption of the record's
**first** image per language (``--langs en,zh``), or for one language drawn per
record (``--mix en=0.76,zh=0.24``). Further images of a multi-image record are
not captioned (counted as ``extra_images``): the captions are single-image
training pairs, as in LLaVA-OneVision-1.5's mid-training data.

Requests: the user turn is ``<image>\\n`` + the language's prompt; the request key
is ``<id>#<lang>`` (so seeds, and answers of a rollouts file, are per record and
language). Every answer goes through :func:`curate.recaption.checks.check_caption`.
An answer that fails a check is asked again **once**, as the request
``<id>#<lang>#retry`` (another key, hence another seed; a rollouts file may hold
answers under that key); the retry's verdict is final. With ``--temperature 0``
a retry would repeat the answer and is skipped. Backend failures (unreadable
image, server error after the backend's own retries...) are not retried here.

Resume: every answer is journaled (``OUT/_journal/recaption/<shard>.jsonl``,
keyed by request key) as soon as it arrives, and the checks are recomputed from
the journal, so a rerun after a kill never asks for an answer (first or retry)
it already has. Backend failures are not journaled, and a shard with failures of the
server (timeouts, lost connections, 429/5xx) is not complete: a rerun asks again.
Generation counters and timings go to ``history.json`` (:mod:`curate.core.history`).

Per shard the task writes ``captions/<shard>.parquet`` (one row per image ×
language requested) and ``records/<shard>.jsonl`` (one canonical record per kept
caption); :func:`recaption` concatenates them into ``captions.parquet`` and
``records.jsonl`` and writes ``stats.json`` and ``rejects.parquet``.

Accounting (records): a record is *out* when at least one of its captions is
kept; a record without images is dropped (``no_image``); a record none of whose
captions was kept is *dropped* with the check reason of its first language
(``refusal``, ``language``...) when every failure was a check, else *errored*
with the first backend failure (``image_error:missing_image``, ``timeout``...).
Unreadable rows are errored with the reader's reason; a repeated id within a
shard is errored (``duplicate_id``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from curate.recaption.checks import LANGS, CaptionCheck, CaptionRules, check_caption  # noqa: F401
from curate.recaption.config import (  # noqa: F401 (parse_* and DEFAULT_PROMPTS re-exported)
    DEFAULT_PROMPTS,
    RecaptionConfig,
    parse_langs,
    parse_mix,
    resolve_prompts,
)
from curate.core.formats.writeback import dumps_record, image_ref, merge_record_lines
from curate.generate.base import derive_seed, is_transient
from curate.core.io import write_parquet
from curate.core.journal import JournalWriter, read_journal
from curate.core.records import IMAGE_TOKEN, BadRecord
from curate.core.shards import UNANSWERED, Shard, ShardContext, ShardTask
from curate.core.stats import StageStats
from curate.core.textlimits import MAX_CAPTION_CHARS, TOO_LONG, over
from curate.core.validate import configure

RETRY = "#retry"
CAPTION_SCHEMA = pa.schema([
    ("id", pa.string()), ("source", pa.string()), ("lang", pa.string()), ("image", pa.string()),
    ("caption", pa.string()), ("model", pa.string()), ("error", pa.string()), ("detail", pa.string()),
    ("attempts", pa.int32()), ("truncated", pa.bool_()), ("raw", pa.string()),
])
# Backend settings that do not change answers: a resumed run may change them.
_OPERATIONAL = ("concurrency", "timeout", "max_retries", "choices_per_call", "batch_size", "device", "skipped_rows")


def caption_key(rid: str, lang: str) -> str:
    """The request key (and caption record id) of one record and language: ``<id>#<lang>``."""
    return f"{rid}#{lang}"


def choose_lang(seed: int, rid: str, mix: dict[str, float]) -> str:
    """The language drawn for a record: ``u = derive_seed(seed, id, "mix") / 2**53`` against the cumulative weights.

    Depends only on the seed, the record id and the weights (in their given order),
    never on sharding or record order.
    """
    u = derive_seed(seed, rid, "mix", bits=53) / float(1 << 53)
    cumulative = 0.0
    last = None
    for lang, weight in mix.items():
        cumulative += weight
        if weight > 0:
            last = lang
            if u < cumulative:
                return lang
    assert last is not None
    return last  # rounding: u just below 1 and the weights summing to slightly less


def user_turn(prompt: str) -> str:
    """The user turn of a caption request and record: the prompt with one ``<image>`` (first when absent)."""
    return prompt if IMAGE_TOKEN in prompt else f"{IMAGE_TOKEN}\n{prompt}"


@dataclass(frozen=True)
class _Item:
    """One image × language to caption."""

    rec: int  # index of the record in the shard's list
    rid: str
    source: str
    image: str
    lang: str

    @property
    def key(self) -> str:
        return caption_key(self.rid, self.lang)


class RecaptionTask(ShardTask):
    """Captions the first image of every record of a shard in each requested language (see the module docstring).

    Args:
        backend: :func:`curate.generate.make_backend` keyword arguments.
        langs: Languages to caption in (all of them, or one drawn per record with ``mix``).
        mix: Normalised language weights for one caption per record, or None.
        prompts: Prompt per language.
        sampling: :class:`~curate.generate.SamplingParams` fields (``seed`` included).
        rules: Caption check thresholds.
    """

    stage = "recaption"
    unit = "records"

    def __init__(self, backend: dict[str, Any], *, langs: list[str], mix: dict[str, float] | None = None,
                 prompts: dict[str, str], sampling: dict[str, Any] | None = None,
                 rules: CaptionRules | None = None) -> None:
        self.backend_args = backend
        self.langs = list(langs)
        self.mix = mix
        self.prompts = prompts
        self.sampling = dict(sampling or {})
        self.rules = rules or CaptionRules()
        self._backend = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_backend": None}

    def setup(self) -> None:
        """Open the backend (a local model loads once per worker)."""
        if self._backend is None:
            from curate.generate import make_backend

            self._backend = make_backend(**self.backend_args)

    @property
    def backend(self):  # noqa: ANN201 - GenerationBackend
        """The open backend."""
        self.setup()
        return self._backend

    def settings(self) -> dict[str, Any]:
        """What changes the captions: the model, languages, mix, prompts, sampling and check rules."""
        described = self.backend.describe()
        identity = {k: v for k, v in described.items() if k not in _OPERATIONAL}
        if identity.get("model") != identity.get("endpoint"):
            identity.pop("endpoint", None)  # a served model name is enough: the server may move
        return {"backend": identity, "langs": self.langs, "mix": self.mix, "prompts": self.prompts,
                "sampling": self.sampling, "rules": asdict(self.rules), "images": "first"}

    def langs_for(self, rid: str, seed: int) -> list[str]:
        """The languages a record is captioned in."""
        return [choose_lang(seed, rid, self.mix)] if self.mix else self.langs

    def request(self, item: _Item, *, retry: bool = False):  # noqa: ANN201 - GenerationRequest
        """The generation request of one image × language (the retry has its own key, hence its own seed)."""
        from curate.generate import GenerationRequest, SamplingParams

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
        seen: set[str] = set()
        extra_images = 0
        for rec in shard.read():
            if isinstance(rec, BadRecord):
                stats.seen(rec.source)
                stats.error(rec.id, rec.source, rec.reason, rec.detail)
                ctx.progress(1)
                continue
            rid, source = rec["id"], rec["source"]
            stats.seen(source)
            if rid in seen:
                stats.error(rid, source, "duplicate_id", f"id {rid} appears twice in shard {shard.id}")
                ctx.progress(1)
                continue
            seen.add(rid)
            if not rec["images"]:
                stats.drop(rid, source, "no_image", "the record has no image to caption")
                ctx.progress(1)
                continue
            extra_images += len(rec["images"]) - 1
            items = [_Item(len(records), rid, source, rec["images"][0], lang) for lang in self.langs_for(rid, ctx.seed)]
            records.append((rec, items))
        failed: dict[str, tuple[str, str]] = {}
        items = [it for _, its in records for it in its]
        first = [it for it in items if it.key not in done]
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
                again = [it for it in items if it.key in checks and not checks[it.key].ok and it.key + RETRY not in done]
                self._generate(again, True, done, failed, journal_path, lambda item: None)
        rows = [self._final(it, done, failed, checks) for it in items]
        self._account(records, rows, stats)
        unanswered = sum(1 for reason, _ in failed.values() if is_transient(reason))
        if unanswered:  # the server's failures: the shard is not complete, a rerun asks for them again
            stats.extra[UNANSWERED] = unanswered
        generation = self.backend.stats.reset()
        stats.extra.update({"extra_images": extra_images, **{f"generation.{k}": v for k, v in generation.items()}})
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

    def _final(self, item: _Item, done: dict[str, dict[str, Any]], failed: dict[str, tuple[str, str]],
               checks: dict[str, CaptionCheck]) -> dict[str, Any]:
        """The captions.parquet row of one image × language."""
        row = {"id": item.rid, "source": item.source, "lang": item.lang, "image": item.image, "caption": None,
               "model": self.backend.model_name, "error": None, "detail": "", "attempts": 1, "truncated": None,
               "raw": None}
        key = item.key
        if key not in done:
            row["error"], row["detail"] = failed.get(key, ("not_generated", "no answer and no error"))
            return row
        entry, check = done[key], checks[key]
        if not check.ok and key + RETRY in done:
            first_reason = check.reason
            entry = done[key + RETRY]
            check = self.check(entry, item.lang)
            row["attempts"] = 2
            if not check.ok:
                check = CaptionCheck(check.caption, check.reason, f"{check.detail} (first answer: {first_reason})")
        elif not check.ok and key + RETRY in failed:
            row["attempts"] = 2
            err, detail = failed[key + RETRY]
            check = CaptionCheck(check.caption, check.reason, f"{check.detail} (retry failed: {err} {detail})".strip())
        row.update(raw=entry["text"], truncated=bool(entry.get("truncated")))
        if check.ok:
            row["caption"] = check.caption
        else:
            row["error"], row["detail"] = check.reason, check.detail
        return row

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
            out = {"id": caption_key(r["id"], r["lang"]), "source": r["source"], "images": [r["image"]],
                   "messages": [{"role": "user", "content": user_turn(self.prompts[r["lang"]])},
                                {"role": "assistant", "content": r["caption"]}],
                   "lang": r["lang"], "recaption_of": r["id"], "caption_model": r["model"]}
            lines.append(dumps_record(out) + "\n")  # image bytes kept (base64 in this shard file)
        path = work / "records" / f"{shard_id}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines), encoding="utf-8")


# ---------------------------------------------------------------------------
# The driver: run the shards, gather outputs, report per source and language
# ---------------------------------------------------------------------------

def caption_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over captions.parquet rows: images, kept, failures by reason, mean length, retries."""
    kept = [r for r in rows if r["error"] is None]
    chars = [len(r["caption"]) for r in kept]
    return {
        "images": len(rows),
        "kept": len(kept),
        "failed": dict(sorted(Counter(r["error"] for r in rows if r["error"] is not None).items())),
        "mean_chars": round(sum(chars) / len(chars), 1) if chars else None,
        "attempts": sum(int(r["attempts"]) for r in rows),
        "retried": sum(int(r["attempts"]) > 1 for r in rows),
        "kept_after_retry": sum(int(r["attempts"]) > 1 for r in kept),
        "truncated": sum(bool(r["truncated"]) for r in rows),
    }


def recaption(inputs: list[str], out: str | os.PathLike[str] | None = None, config: RecaptionConfig | None = None, *,
              executor: Any = None, **settings: Any) -> dict[str, Any]:
    """Caption the images of ``inputs`` into ``out``; returns the content of ``stats.json``.

    Args:
        inputs: Record files or folders (any accepted layout).
        out: Output folder (overrides ``config.out``).
        config: The settings (see :class:`RecaptionConfig`): backend, languages or mix, prompts,
            sampling, caption rules, seed, shard size.
        executor: An executor (default: local, one worker).
        **settings: Fields of :class:`RecaptionConfig`, instead of or over ``config``.

    Outputs in ``out``: ``captions.parquet``, ``records.jsonl``, ``rejects.parquet``, ``stats.json``.
    """
    import pyarrow.parquet as pq

    from curate.executors import run_stage
    from curate.core.io import write_json
    from curate.core.shards import plan_shards
    from curate.core.history import HISTORY, record_run, shards_done, split_extra, without_learned
    from curate.core.stats import run_header

    config = configure(RecaptionConfig, config, out=out, **settings)
    out, seed, lang_list = Path(config.out), config.seed, list(config.langs or ())
    task = RecaptionTask(dict(config.backend), langs=lang_list, mix=config.mix, prompts=dict(config.prompts or {}),
                         sampling={"seed": seed, **(config.sampling or {})}, rules=config.rules)
    shards = plan_shards(inputs, config.shard_size)
    reused = shards_done(out, task.stage, shards)
    stats = run_stage(task, shards, out, executor=executor, seed=seed, desc="recaption")
    tables = [pq.read_table(out / "captions" / f"{s.id}.parquet") for s in shards]
    table = pa.concat_tables(tables) if tables else CAPTION_SCHEMA.empty_table()
    write_parquet(out / "captions.parquet", table)
    records_name = merge_record_lines([out / "records" / f"{s.id}.jsonl" for s in shards], out, "records")
    write_parquet(out / "rejects.parquet", stats.rejects_table())
    rows = table.to_pylist()
    counts = stats.to_dict()
    extra = counts.get("extra", {})
    per_source = {}
    for source, entry in counts["per_source"].items():
        mine = [r for r in rows if r["source"] == source]
        per_source[source] = {**entry, "captions": {lang: caption_report([r for r in mine if r["lang"] == lang])
                                                    for lang in lang_list}}
    result = {
        **run_header("recaption", seed=seed, settings={**task.settings(),
                                                       "backend_described": without_learned(task.backend.describe())}),
        "records_in": counts["records_in"], "records_out": counts["records_out"],
        "dropped": counts["dropped"], "errored": counts["errored"],
        "captions": caption_report(rows),
        "per_lang": {lang: caption_report([r for r in rows if r["lang"] == lang]) for lang in lang_list},
        "per_source": per_source,
        "extra_images": int(extra.get("extra_images", 0)),
        "history": HISTORY,
        "outputs": {"captions": "captions.parquet", "records": records_name, "rejects": "rejects.parquet"},
    }
    record_run(out, "recaption", timings=counts["timings"], shards=len(shards), reused=reused, generation=split_extra(extra),
               unanswered=int(extra.get(UNANSWERED, 0)), backend=task.backend.describe())
    if extra.get(UNANSWERED):
        from curate.core.progress import console
        console.print(f"[yellow]{extra[UNANSWERED]} caption requests got no answer from the server (errored: "
                      f"{counts['errored']}); rerun the same command to ask them again[/yellow]")
    write_json(out / "stats.json", result)
    return result
