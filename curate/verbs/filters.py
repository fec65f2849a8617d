"""The verbs of filter stages (:class:`curate.core.filters.RecordFilter`), each made from its ``StageSpec`` row.

A row of :data:`curate.stages.STAGES` with ``filter=`` gets a verb here: its inputs, ``--out``, the filter's own
settings (its fields declared with ``setting()``), ``--shard-size``, ``--image-root`` and the executor's options; it
builds the config and the filter and calls :func:`curate.executors.filters.run_filter`. Nothing about a filter is
written here by hand.
"""

from __future__ import annotations

import functools

from curate.core.filters import FilterConfig
from curate.stages import StageSpec
from curate.verbs import (EXECUTOR_OPTIONS, IMAGE_ROOT, Prepared, Values, Verb, executor_of, inputs, options_of,
                          print_rejects)

#: What a filter stage's help says after its own description.
OUTPUTS = ("\b\nOutputs in OUT: records.jsonl (records.parquet when the records carry image bytes),\n"
           "the kept rows in their input layout; rejects.parquet, every dropped record\n"
           "with its reason; stats.json (per source).")


@functools.lru_cache(maxsize=None)
def filter_verb(spec: StageSpec) -> Verb:
    """The verb of filter stage ``spec``: its options, and the function building its config and filter."""
    cls = spec.filter_class()
    own = options_of(cls)
    names = {o.name for o in own}

    def prepare(values: Values) -> Prepared:
        from curate.core.settings import build_config

        out = values["out"]
        config = build_config(FilterConfig, {k: values[k] for k in ("out", "shard_size", "seed", "image_root")})
        task = build_config(cls, {k: x for k, x in values.items() if k in names})
        runner = executor_of(values)
        records = list(values["inputs"])

        def work() -> None:
            from curate.core.progress import console
            from curate.executors.filters import run_filter

            result = run_filter(records, config, task, executor=runner.make())
            console.print(f"kept {result.records_out:,} of {result.records_in:,} records")
            print_rejects(result, out)
            console.print(f"records: {out}/{result.records_file}   stats: {out}/stats.json")

        return Prepared(config, work)

    described = (cls.__doc__ or "").strip()
    prepare.__doc__ = "\n\n".join(p for p in (spec.help, described if described != spec.help else "", OUTPUTS) if p)
    prepare.__name__ = prepare.__qualname__ = spec.name.replace("-", "_")
    return Verb(spec.name, inputs(), (*options_of(FilterConfig, "out"), *own, *options_of(FilterConfig, "shard_size"),
                                      IMAGE_ROOT, *EXECUTOR_OPTIONS), prepare)
