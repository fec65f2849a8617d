"""The ``report`` verb (curate/report/); the report every stage verb writes at its end is in group.py."""

from __future__ import annotations

import click

from curate.cli.group import cli


#: The most samples a report section shows (``--samples``).
MAX_SAMPLES = 10_000


@cli.command("report")
@click.argument("out", type=click.Path(path_type=str))
@click.option("--samples", type=int, default=48, show_default=True,
              help="Samples shown per section (a seeded sample, so huge runs give small reports).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
def report_cmd(out: str, samples: int, seed: int) -> None:
    """Write OUT/report/: a static HTML site showing what each stage did to the data.

    OUT is a stage's output folder or a curate run folder. Per stage: the funnel
    (records in, kept, dropped and errored by reason, per source), the plots, browsable
    samples (concepts with thumbnails, captions side by side, RL prompts with their
    responses, packed sequences as strips) and the dropped/errored records, filterable
    by reason and source. Opens from the file system: no server, no network.

    \b
    Example:
      curate report demo-out/run && xdg-open demo-out/run/report/index.html
    """
    from curate.core.errors import UserError
    from curate.core.progress import console
    from curate.report import write_report

    from curate.core import validate as v

    v.integer("--samples", samples, 1)
    if samples > MAX_SAMPLES:  # thumbnails and rows per section: the report's cost grows with it
        raise UserError(f"--samples {samples:,}: at most {MAX_SAMPLES:,} per section (a report page, not the data)")
    v.integer("--seed", seed, 0)
    index = write_report(out, samples=samples, seed=seed)
    console.print(f"report: {index}", markup=False, highlight=False)
