"""``curate rl-filter``, step 1: N sampled answers per RL prompt, scored by the rule verifiers.

Per prompt shard the :class:`RolloutTask` builds one generation request per
prompt (the problem plus the instruction of its prompt style), asks the backend
for ``n`` answers, scores every answer with :func:`curate.rewards.registry.score_many`,
and writes

* ``rollouts/<shard>.parquet``: ``id, sample, response, truncated, accuracy, format, reward, error``;
* ``prompts/<shard>.parquet``: per prompt its source, answer type, prompt style, the
  number of samples and passes, accuracy/reward lists, and the generation error if any;
* ``records/<shard>.jsonl``: the prompts' raw rows (the input's RL layout), for ``kept.jsonl``, written and read
  back by the one kept-record writer of :mod:`curate.core.filters`.

Answers are journaled in ``OUT/_journal/rl-filter/<shard>.jsonl`` as they arrive;
a rerun after a kill reads the journal and asks the backend only for the prompts
that have no answers yet (failed prompts are asked again). A shard with prompts
the server failed (timeouts, lost connections, 429/5xx after the retries) is written
but not complete, so a rerun of the same command asks for exactly those again; the
backend's counters and timings go to ``history.json``, never to ``stats.json``. The selection itself
(the rules of :mod:`curate.rl.selection`, run on columns by :mod:`curate.rl.decide`) runs on the
driver from these files, so thresholds can be changed without generating again; an id that an
earlier shard already had is errored there (``duplicate_id``). Every answer of a shard is scored
in one :func:`curate.rewards.registry.score_many` call (one batch to the verifier pool).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.core.validate import configure
from curate.core.remote import writing
from curate.core.filters import ShardRecords, write_kept as write_kept_records
from curate.core.formats.writeback import with_resolved_paths
from curate.core.errors import UserError
from curate.rl.config import RlFilterConfig
from curate.rl.golds import with_answer_type
from curate.core.images import refusal
from curate.core.io import write_parquet
from curate.core.journal import end_line, read_journal
from curate.core.shards import UNANSWERED, Shard, ShardContext, readable_records
from curate.core.stats import StageStats, finish_stage, stage_result
from curate.core.limits import MAX_PROMPT_CHARS, TOO_LONG, over, total_chars
from curate.generate.base import is_transient
from curate.generate.settings import sampling_of
from curate.generate.task import GenerationTask
from curate.rewards.prompts import load_templates, prompt_style_of, prompt_text

ROLLOUT_SCHEMA = pa.schema([
    ("id", pa.string()), ("sample", pa.int32()), ("response", pa.string()), ("truncated", pa.bool_()),
    ("accuracy", pa.float64()), ("format", pa.float64()), ("reward", pa.float64()), ("error", pa.string()),
])
PROMPT_SCHEMA = pa.schema([
    ("id", pa.string()), ("source", pa.string()), ("answer_type", pa.string()), ("prompt_type", pa.string()),
    ("n", pa.int32()), ("accuracy", pa.list_(pa.float64())), ("reward", pa.list_(pa.float64())),
    ("format", pa.list_(pa.float64())), ("truncated", pa.list_(pa.bool_())),
    ("response_chars", pa.list_(pa.int32())), ("reflection", pa.list_(pa.bool_())),
    ("error", pa.string()), ("error_detail", pa.string()),
    # per response of a prompt scored on boxes, curate.rewards.monitor.BOX_FIGURES (empty for other prompts)
    ("box", pa.list_(pa.list_(pa.float64()))),
])
REFLECTION_WORDS = ("wait", "however", "re-check", "recheck", "double-check", "double check", "let me verify",
                    "on second thought", "hmm", "alternatively", "re-evaluate", "reconsider", "actually")


def reflection(text: str) -> bool:
    """Whether a response uses a reflection word ("wait", "however", "re-check", ...) as V-Triune monitors."""
    low = text.lower()
    return any(w in low for w in REFLECTION_WORDS)


class RolloutTask(GenerationTask):
    """Generates and scores ``n`` answers per prompt of one shard (see the module docstring)."""

    stage = "rl-filter"
    unit = "prompts"

    def __init__(self, config: RlFilterConfig, *, max_prompt_chars: int = MAX_PROMPT_CHARS) -> None:
        """The task of the run ``config`` (checked when it was built): its backend, n, sampling (seeded with its
        ``seed``), prompt style and templates, training progress, default answer type, code sandbox and image
        limits; ``max_prompt_chars``: longer prompts are errored before they are asked."""
        super().__init__(config)
        self.n = config.n
        self.sampling = sampling_of(config)
        self.prompt_style = config.prompt_style
        self.templates = load_templates(config.templates)
        self.progress = config.progress
        self.max_prompt_chars = max_prompt_chars
        self.answer_type = config.answer_type  # the default of records that name no verifier (curate.rl.golds)
        self.code = config.code  # how model-written programs run: a CodeSandbox

    def setup(self) -> None:
        """Open the backend (loads a local model once per worker) and start the verifier pool."""
        if self._backend is None:
            from curate.rewards.runtime.limits import warm_up
            from curate.rewards.runtime import sandbox

            if self.code is not None:
                sandbox.configure(self.code)
            super().setup()
            warm_up()

    def settings(self) -> dict[str, Any]:
        """Answers depend on the backend, n, sampling, prompt style and templates (not the thresholds,
        nor the backend's operational settings such as ``concurrency``: see :mod:`curate.core.stats`)."""
        from curate.core.stats import backend_identity

        self.setup()
        from curate.rewards.runtime.sandbox import current

        return {"backend": backend_identity(self.backend.describe()), "n": self.n, "sampling": self.sampling,
                "prompt_style": self.prompt_style, "templates": self.templates, "progress": self.progress,
                "max_prompt_chars": self.max_prompt_chars, "answer_type": self.answer_type,
                "code": (self.code or current()).identity(), **self.reading_settings()}

    def style_of(self, rec: dict[str, Any]) -> str:
        """The prompt style of a record: ``--prompt-style``, else its ``prompt_type``, else normal."""
        return prompt_style_of(rec, self.prompt_style, self.templates)

    def request(self, rec: dict[str, Any]):  # noqa: ANN201 - GenerationRequest
        """The generation request of one prompt."""
        from curate.generate.base import GenerationRequest, SamplingParams

        text = prompt_text(rec, self.templates, self.style_of(rec), self.sampling["seed"])
        messages = [{"role": "user", "content": text}]
        if rec.get("prompt_ready"):  # a trainer's chat prompt (verl): sent as it stands, its system turn too
            messages = [m for m in rec["messages"] if m["role"] != "assistant"]
        return GenerationRequest(key=rec["id"], messages=messages,
                                 images=list(rec["images"]), n=self.n, sampling=SamplingParams(**self.sampling))

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Generate (resuming from the journal), score and write one shard."""
        from curate.rewards.registry import plan as check_record
        from curate.rewards.verifiers.vlm_r1 import with_input_sizes

        self.setup()
        stats = StageStats()
        journal_path = ctx.journal(self.stage, shard)
        done = read_journal(journal_path)
        prompts: list[dict[str, Any]] = []
        raws: list[Any] = []
        for raw, rec in readable_records(shard, stats, ctx, with_raw=True, max_images=self.max_images):
            # kept.jsonl lies in OUT: its rows point at their images as read (the input's folder or --image-root)
            raw = with_resolved_paths(raw, rec["images"]) if isinstance(raw, dict) else raw
            if self.answer_type is not None:  # kept.jsonl's rows say which verifier scored them
                rec = with_answer_type(rec, self.answer_type)
                raw = with_answer_type(raw, self.answer_type) if isinstance(raw, dict) else raw
            chars = max(total_chars([rec.get("problem")]), total_chars(m.get("content") for m in rec["messages"]))
            long = over(chars, self.max_prompt_chars, "characters of prompt")
            if long:  # refused before any template, tokenizer or model sees it
                stats.drop(rec["id"], rec["source"], TOO_LONG, long)
                ctx.progress(1)
                continue
            rec = with_input_sizes(rec)  # VLM-R1's REC reward scales boxes from the model input to the image
            try:
                check_record(rec)
            except UserError as exc:  # unknown answer type, missing gold...: the record, not the model
                stats.error(rec["id"], rec["source"], "record_error", str(exc))
                ctx.progress(1)
                continue
            refused = refusal(rec["images"], self.limits)  # the one image gate: the reason every stage gives the image
            if refused is not None:
                stats.error(rec["id"], rec["source"], refused.reason, refused.detail)
                ctx.progress(1)
                continue
            prompts.append(rec)
            raws.append(raw)
        todo = [self.request(r) for r in prompts if r["id"] not in done]
        ctx.progress(len(prompts) - len(todo))
        if todo:
            end_line(journal_path)
            with open(journal_path, "a", encoding="utf-8") as journal:
                for _, result in self.backend.stream(todo):
                    entry = {"key": result.key, "responses": result.responses, "truncated": result.truncated,
                             "error": result.error, "detail": result.detail}
                    if result.error is None:
                        journal.write(json.dumps(entry, ensure_ascii=False) + "\n")
                        journal.flush()
                    done[result.key] = entry
                    ctx.progress(1)
        unanswered = sum(1 for r in prompts if is_transient(done[r["id"]]["error"]))
        if unanswered:  # the server's failures, never journaled: the shard is not complete, a rerun asks again
            stats.extra[UNANSWERED] = unanswered
        stats.extra.update({f"generation.{k}": v for k, v in self.backend.stats.reset().items()})
        self._write(prompts, raws, done, stats, work, shard.id)
        return stats

    def _write(self, prompts: list[dict[str, Any]], raws: list[Any], done: dict[str, dict[str, Any]],
               stats: StageStats, work: Path, shard_id: str) -> None:
        from curate.rewards.registry import score_many
        from curate.rewards.monitor import box_figures, is_box_task

        rollouts: list[dict[str, Any]] = []
        rows: list[dict[str, Any]] = []
        records_out = ShardRecords(work, shard_id)  # image bytes kept (base64 in this shard file)
        answers = [done[rec["id"]]["responses"] if done[rec["id"]]["error"] is None else [] for rec in prompts]
        # the whole shard in one call: one batch to the verifier pool, spread over its workers
        scored = score_many([(rec, text) for rec, texts in zip(prompts, answers) for text in texts],
                            progress=self.progress, on_record_error="result")
        at = 0
        for rec, raw, responses in zip(prompts, raws, answers):
            entry = done[rec["id"]]
            results, at = scored[at:at + len(responses)], at + len(responses)
            truncated = list(entry["truncated"]) + [False] * (len(responses) - len(entry["truncated"]))
            for j, (text, res) in enumerate(zip(responses, results)):
                rollouts.append({"id": rec["id"], "sample": j, "response": text, "truncated": bool(truncated[j]),
                                 "accuracy": res.accuracy, "format": res.format, "reward": res.reward,
                                 "error": res.error})
            rows.append({"id": rec["id"], "source": rec["source"], "answer_type": str(rec.get("answer_type")),
                         "prompt_type": self.style_of(rec), "n": len(responses),
                         "accuracy": [r.accuracy for r in results], "reward": [r.reward for r in results],
                         "format": [r.format for r in results], "truncated": [bool(t) for t in truncated[:len(responses)]],
                         "response_chars": [len(t) for t in responses], "reflection": [reflection(t) for t in responses],
                         "box": _box_figures(rec, responses, is_box_task, box_figures),
                         "error": entry["error"] if entry["error"] is not None else _short(responses, self.n),
                         "error_detail": entry.get("detail") or (f"{len(responses)} of --n {self.n} answers"
                                                                 if _short(responses, self.n) else "")})
            records_out.add(raw, rec)  # raw's paths were resolved as it was read
        stats.kept_many(Counter(rec["source"] for rec in prompts))  # every readable prompt reaches the selection
        write_parquet(work / "rollouts" / f"{shard_id}.parquet", pa.Table.from_pylist(rollouts, schema=ROLLOUT_SCHEMA))
        write_parquet(work / "prompts" / f"{shard_id}.parquet", pa.Table.from_pylist(rows, schema=PROMPT_SCHEMA))
        records_out.close()


def _box_figures(rec: dict[str, Any], responses: list[str], is_box: Any, figures: Any) -> list[list[float]]:
    """Each response's box figures (:mod:`curate.rewards.monitor`) when the prompt is scored on boxes and its
    gold boxes read; else none."""
    if not responses or not is_box(rec):
        return []
    out = [figures(rec, t) for t in responses]
    return [] if any(f is None for f in out) else out


def _short(responses: list[str], n: int) -> str | None:
    """The error of a prompt answered fewer than ``n`` times: pass@N of fewer answers is not pass@N."""
    return "no_responses" if not responses else "too_few_answers" if len(responses) < n else None


def write_kept(out: Path, sizes: list[int], shard_ids: list[str], kept: np.ndarray, decided: pa.Table) -> str:
    """``kept.jsonl`` (``kept.parquet`` when images are bytes): the kept prompts' input rows, in input order,
    with ``pass_at_1``, ``pass_at_n`` and ``mean_reward`` added; returns the file name.

    Only the shards' record files that hold a kept prompt are read, and only kept lines are parsed
    (:func:`curate.core.filters.write_kept`, the one kept-record writer).
    """
    idx = np.flatnonzero(kept)
    metrics = {c: decided.column(c).take(pa.array(idx, pa.int64())).to_pylist()
               for c in ("pass_at_1", "pass_at_n", "mean_reward")}
    take: list[list[int]] = []
    start = 0
    for size in sizes:
        take.append((idx[(idx >= start) & (idx < start + size)] - start).tolist())
        start += size

    def annotate(j: int, row: dict[str, Any]) -> None:
        row.update(pass_at_1=metrics["pass_at_1"][j], pass_at_n=metrics["pass_at_n"][j],
                   mean_reward=metrics["mean_reward"][j])

    parts = [out / "records" / f"{shard_id}.jsonl" for shard_id in shard_ids]
    return write_kept_records(out, "kept", parts, take=take, annotate=annotate)  # kept.parquet when images are bytes


def rl_filter(inputs: list[str], config: RlFilterConfig | None = None, *, executor: Any = None,
              **settings: Any) -> dict[str, Any]:
    """Sample, score and select the RL prompts of ``inputs`` into ``config.out``; returns the content of ``stats.json``.

    Outputs: ``kept.jsonl`` (kept prompts in their input layout plus ``pass_at_1``,
    ``pass_at_n``, ``mean_reward``; ``kept.parquet`` with image structs when images are bytes), ``rollouts.parquet``, ``prompts.parquet`` (per
    prompt metrics and decision), ``rejects.parquet``, ``stats.json``, ``rl_filter.png``.

    Args:
        inputs: RL record files or folders.
        config: The settings (see :class:`RlFilterConfig`), checked before the model loads.
        executor: An executor (default: local, one worker).
        **settings: fields of :class:`RlFilterConfig` (``out=``, ``backend=``, ``n=``...), instead of or over ``config``.
    """
    config = configure(RlFilterConfig, config, **settings)
    with writing(config.out) as folder:  # a bucket: shards stream there (curate.core.remote)
        return _rl_filter(inputs, config, folder, executor)


def _rl_filter(inputs: list[str], config: RlFilterConfig, out: Path, executor: Any) -> dict[str, Any]:
    """:func:`rl_filter` into the local folder ``out``."""
    import pyarrow.parquet as pq

    from curate.core.stats import HISTORY, operational_of, record_run, split_extra
    from curate.core.progress import console
    from curate.core.shards import plan_shards
    from curate.executors import pending, run_stage
    from curate.rl.decide import DECISIONS, KEPT, account, decide, mark_repeats, output_table, reports
    from curate.rl.selection import plot_pass_at_1

    seed, plot = config.seed, config.plot
    default_th, per_source = config.selection()
    task = RolloutTask(config)
    from curate.rewards.runtime.sandbox import announce

    most = getattr(task.backend, "most_answers", None)  # a rollouts file: can it answer --n times at all?
    if most is not None and most < config.n:
        raise UserError(f"--n {config.n}: --rollouts {config.backend.get('rollouts')} holds at most {most} answers "
                        f"per prompt; give --n {most} or fewer (or a file with {config.n} answers per prompt)")
    announce(config.code)  # one line when programs would be refused, or run without a sandbox
    shards = plan_shards(inputs, config.shard_size, image_root=config.image_root, layout=config.part_layout)
    reused = len(shards) - len(pending(task, shards, out))  # found done
    stats = run_stage(task, shards, out, executor=executor, seed=seed, desc="sample and score")
    prompt_tables = [pq.read_table(out / "prompts" / f"{s.id}.parquet") for s in shards]
    decided = decide(mark_repeats(pa.concat_tables(prompt_tables) if prompt_tables else PROMPT_SCHEMA.empty_table()),
                     default_th, per_source)
    total = stats.then(account(decided))
    kept = pc.index_in(decided.column("decision"), pa.array(DECISIONS)).to_numpy(zero_copy_only=False) == KEPT
    kept_name = write_kept(out, [t.num_rows for t in prompt_tables], [s.id for s in shards], kept, decided)
    rollout_tables = [pq.read_table(out / "rollouts" / f"{s.id}.parquet") for s in shards]
    write_parquet(out / "rollouts.parquet", pa.concat_tables(rollout_tables) if rollout_tables
                  else ROLLOUT_SCHEMA.empty_table())
    write_parquet(out / "prompts.parquet", output_table(decided))

    counts = total.to_dict()
    sources = sorted(set(pc.unique(decided.column("source")).to_pylist()) | set(counts["per_source"]))
    overall, per = reports(decided, sources)

    def report(figures: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
        # records, not only the prompts that reached the selection: unreadable and errored rows count too
        return {**figures, "records_in": entry["records_in"], "kept": entry["records_out"],
                "dropped": entry["dropped"], "errored": entry["errored"]}

    settings = task.settings()
    thresholds = {"default": default_th.__dict__, "sources": {k: v.__dict__ for k, v in per_source.items()}}
    result = stage_result(
        "rl-filter", total, seed=seed, settings={**settings, "thresholds": thresholds}, out_key="kept",
        overall=report(overall, counts),
        per_source={s: report(per[s], counts["per_source"].get(s, {
            "records_in": 0, "records_out": 0, "dropped": {}, "errored": {}})) for s in sources},
        kept_file=kept_name, history=HISTORY)
    extra = counts.get("extra", {})
    described = task.backend.describe()
    record_run(out, "rl-filter", timings=counts["timings"], shards=len(shards), reused=reused, generation=split_extra(extra),
               unanswered=int(extra.get(UNANSWERED, 0)), backend=described, operational=operational_of(described))
    if extra.get(UNANSWERED):
        console.print(f"[yellow]{extra[UNANSWERED]} prompts got no answer from the server (errored: "
                      f"{counts['errored']}); rerun the same command to ask them again[/yellow]")
    if plot:
        plot_pass_at_1(out / "rl_filter.png", decided, {s: per_source.get(s, default_th) for s in sources})
    return finish_stage(out, result, total)
