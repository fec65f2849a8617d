"""What scoring needs of the RL records (the golds), read once by the driver and shared with every worker.

``curate score`` may run many workers, and each needs every record's answer (a response
names its prompt by id). Records can be large (images embedded in Parquet, prompts), so
the driver reads them once and keeps, per row in record order, the id, the fields of
:data:`SCORED_FIELDS` and, for a row that is not a record, the reader's reason, in an
Arrow IPC file in ``OUT`` (:data:`GOLDS_FILE`, written a batch at a time). Workers load
that file instead of reading the records again: the same dictionaries as reading the
records, at a fraction of the bytes and parsing.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from curate.core.formats.rows import is_multiple_choice
from curate.core.io import atomic_path
from curate.core.records import BadRecord, read_records
from curate.rewards.verifiers.vlm_r1 import with_input_sizes

#: What scoring reads of a record (:func:`curate.rewards.registry` plans, the per-source counts); each worker
#: holds only these, never the images or the prompt text, so its memory follows the golds, not the records.
SCORED_FIELDS = ("id", "source", "answer", "answer_type", "prompt_type", "reward", "answers", "choices", "options",
                 "correct_choice_idx", "image_size", "resized_size")
#: The golds of a run, relative to ``OUT``.
GOLDS_FILE = "_golds.arrow"
_SCHEMA = pa.schema([("id", pa.string()), ("fields", pa.binary()), ("bad", pa.string())])
_BATCH = 65536

#: ``(records by id, {id: (reason, source)} of the rows that are not records)``.
Golds = tuple[dict[str, dict[str, Any]], dict[str, tuple[str, str]]]


def with_answer_type(record: dict[str, Any], answer_type: str | None) -> dict[str, Any]:
    """``record`` with ``answer_type`` set to the run's default (``--answer-type``) when it names no verifier
    itself (no ``answer_type``, no ``reward.verifier``): RL sets exported without the field, such as a ViRL39K
    export of ``problem``, ``answer`` and ``images``, are scored instead of errored one by one; a multiple-choice
    row among them (options, and an answer naming one) gets ``multiple-choice``. The record is changed in place
    and returned."""
    if answer_type is not None and record.get("answer_type") in (None, ""):
        reward = record.get("reward")
        if not (isinstance(reward, dict) and reward.get("verifier")):
            # a multiple-choice row (options, and an answer naming one) is scored by its letter whatever the
            # default: MMMU mixes them with open questions and names no answer_type
            record["answer_type"] = "multiple-choice" if is_multiple_choice(record) else answer_type
    return record


def _rows(paths: Sequence[str | os.PathLike[str]], answer_type: str | None = None, layout: str | None = None,
          image_root: str | None = None) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """``(id, scored fields, None)`` for each record and ``(id, {"source": ...}, reason)`` for each row that is
    not one (its source kept: a response to it is counted under its source, not an unknown one)."""
    for rec in read_records(paths, layout=layout, image_root=image_root):
        if isinstance(rec, BadRecord):
            yield rec.id, {"source": rec.source}, rec.reason
        else:
            rec = with_input_sizes(with_answer_type(rec, answer_type))  # VLM-R1's REC: the model input's size
            yield rec["id"], {k: rec[k] for k in SCORED_FIELDS if k in rec}, None


def write_golds(paths: Sequence[str | os.PathLike[str]], target: str | os.PathLike[str],
                answer_type: str | None = None, layout: str | None = None, image_root: str | None = None) -> int:
    """Read the records once and write their golds to ``target`` (atomically); returns the rows written
    (``answer_type``: the default of records that name no verifier, :func:`with_answer_type`; ``layout``: the RL
    layout the run names, :func:`curate.core.formats.rl_layouts.rl_row`; ``image_root``: where relative image
    paths start, for the image sizes VLM-R1's REC reward scales boxes by)."""
    rows = 0
    with atomic_path(target) as tmp, pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as writer:
        batch: tuple[list[Any], list[Any], list[Any]] = ([], [], [])

        def flush() -> None:
            writer.write_batch(pa.record_batch([pa.array(c, t.type) for c, t in zip(batch, _SCHEMA)], schema=_SCHEMA))
            for column in batch:
                column.clear()

        for rid, fields, reason in _rows(paths, answer_type, layout, image_root):
            batch[0].append(rid)
            batch[1].append(pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL))
            batch[2].append(reason)
            rows += 1
            if len(batch[0]) >= _BATCH:
                flush()
        if batch[0] or not rows:
            flush()
    return rows


def load_golds(path: str | os.PathLike[str]) -> Golds:
    """The golds written by :func:`write_golds`: records by id (only :data:`SCORED_FIELDS`), and the ids of rows
    that could not be read with their reason and source (a later row of an id replaces an earlier one)."""
    by_id: dict[str, dict[str, Any]] = {}
    bad: dict[str, tuple[str, str]] = {}
    with pa.memory_map(str(Path(path))) as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            ids, blobs, reasons = (batch.column(j).to_pylist() for j in range(3))
            for rid, blob, reason in zip(ids, blobs, reasons):
                if reason is None:
                    by_id[rid] = pickle.loads(blob)
                else:
                    bad[rid] = (reason, str((pickle.loads(blob) if blob else {}).get("source", "")))
    return by_id, bad
