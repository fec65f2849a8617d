"""The verbs of filter stages (:class:`curate.core.filters.RecordFilter`), each made from its ``StageSpec`` row.

A row of :data:`curate.stages.STAGES` with ``filter=`` (and ``cli="filters"``) gets a verb here: its inputs,
``--out``, the filter's own settings (its fields declared with ``setting()``), ``--shard-size``,
``--image-root`` and the executor flags; it builds the config and the filter and calls
:func:`curate.executors.filters.run_filter`. Nothing about a filter is written here by hand.
"""

from __future__ import annotations

from typing import Any

import click

from curate.cli.group import cli
from curate.cli.options import (Prepared, config_options, executor_options, image_root_option, make_executor,
                                print_rejects)
from curate.stages import STAGES, StageSpec


def add_verb(spec: StageSpec) -> click.Command:
    """Make the verb of filter stage ``spec`` and add it to the ``curate`` group."""
    from curate.core.filters import FilterConfig

    cls = spec.filter_class()

    def run(inputs: tuple[str, ...], out: str, shard_size: int, image_root: str | None, workers: int,
            executor: str, ray_address: str | None, seed: int, **settings: Any) -> Prepared:
        from curate.core.settings import build_config

        config = build_config(FilterConfig, {"out": out, "shard_size": shard_size, "seed": seed,
                                             "image_root": image_root})
        task = build_config(cls, settings)
        runner = make_executor(executor, workers, ray_address)

        def work() -> None:
            from curate.core.progress import console
            from curate.executors.filters import run_filter

            result = run_filter(list(inputs), config, task, executor=runner)
            console.print(f"kept {result.records_out:,} of {result.records_in:,} records")
            print_rejects(result, out)
            console.print(f"records: {out}/{result.records_file}   stats: {out}/stats.json")

        return Prepared(config, work)

    run.__name__ = run.__qualname__ = f"{spec.name.replace('-', '_')}_cmd"
    described = (cls.__doc__ or "").strip()
    outputs = ("\b\nOutputs in OUT: records.jsonl (records.parquet when the records carry image bytes),\n"
               "the kept rows in their input layout; rejects.parquet, every dropped record\n"
               "with its reason; stats.json (per source).")
    help_text = "\n\n".join(p for p in (spec.help, described if described != spec.help else "", outputs) if p)
    fn: Any = run
    for decorate in reversed((click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str)),
                              config_options(FilterConfig, "out"), config_options(cls),
                              config_options(FilterConfig, "shard_size"), image_root_option, executor_options)):
        fn = decorate(fn)
    return cli.command(spec.name, help=help_text)(fn)


for _spec in STAGES.values():  # the filter stages of the table (a row added later gets its verb when asked for)
    if _spec.filter is not None and _spec.name not in cli.commands:
        add_verb(_spec)
