"""Verbs of sequence packing: ``pack``, ``verify``, ``energon-prepare`` (packer/)."""

from __future__ import annotations

from typing import Any

import click

from curate.cli.group import cli
from curate.cli.options import (Prepared, config_options, executor_options, image_limit_options, image_limits_given,
                                 image_root_option, make_executor, print_rejects)
from curate.core import validate as v
from curate.core.errors import UserError
from packer.config import PackConfig, VerifyConfig
from curate.core.settings import build_config


@cli.command("pack")
@click.argument("inputs", nargs=-1, type=click.Path(path_type=str))
@config_options(PackConfig)
@image_root_option
@image_limit_options
@executor_options
def pack_cmd(inputs: tuple[str, ...], executor: str, ray_address: str | None, **settings: Any) -> Prepared:
    """Pack records into sequences of at most --ctx tokens, as WebDataset shards.

    Token counts are exact for the given processor (image tokens by the Qwen2-VL
    rule from each image's displayed size; every image proven to decode by the
    image gate, docs/images.md); samples longer than ctx are listed as too_long,
    never truncated. Outputs in OUT: shards/*.tar, lengths.parquet, plan.parquet,
    rejects.parquet, stats.json, packing.png.

    \b
    Examples:
      curate pack data/*.jsonl --processor lmms-lab/LLaVA-OneVision-1.5-8B-Instruct --ctx 8192 --out packed/
      curate pack --lengths packed/lengths.parquet --ctx 16384 --plan-only --out plan16k/
      curate pack data/*.jsonl --processor PROC --out packed/ --balance-compute --dp 64 --micro-batches 2
    """
    from packer.pack import check_request, pack

    out, verify_fraction, energon = settings["out"], settings["verify_fraction"], settings["energon"]
    if verify_fraction is not None:
        from curate.core.progress import console

        console.print(f"[yellow]note:[/yellow] --verify-fraction {verify_fraction:g} checks that share of every "
                      "record with the full processor (deprecated; a fixed --verify-sample N costs the same at any "
                      "corpus size); --verify-sample is ignored")

    config = build_config(PackConfig, settings, **image_limits_given())  # the flags are the config's fields
    check_request(list(inputs), config)
    runner = make_executor(executor, config.workers, ray_address)

    def run() -> None:
        stats = pack(list(inputs), config, executor=runner)
        _summary_pack(stats, out)
        if energon and not config.plan_only:
            from packer.energon import prepare_energon

            prepare_energon(out, split_ratio=energon, workers=config.workers)
            click.echo(f"energon dataset: {out} (.nv-meta/, split {energon}); check with: energon lint {out}", err=True)
            if config.energon_layout == "llava-ov-1.5":
                from packer.energon import write_seed_layout

                seed = write_seed_layout(out, split_ratio=energon, workers=config.workers)
                click.echo(f"LLaVA-OneVision-1.5 layout: {seed['path']} ({seed['sequences']:,} packed samples); train "
                           "with OFFLINE_PACKED_DATA=1 (docs/energon.md)", err=True)

    return Prepared(config, run)


def _summary_pack(stats: dict, out: str) -> None:
    from curate.core.progress import console
    from curate.core.stats import from_stats
    from curate.report.pages import padding_summary
    from packer.config import PackResult

    r = from_stats(PackResult, stats)
    console.print(f"[bold]packed[/bold] {r.records_packed:,} of {r.records_in:,} records into "
                  f"{r.bins:,} sequences (lower bound {r.lower_bound_bins:,}, "
                  f"fill {r.fill_ratio:.3f}; {padding_summary(stats, short=True)})")
    if r.balance:
        b = r.balance
        before, after = b["imbalance"]["token_only"], b["imbalance"]["balanced"]
        mb = b["micro_batches"]
        if b.get("calibration"):
            from packer.compute_balance import describe_fit

            console.print(describe_fit(b["calibration"]))
        console.print(f"compute-balanced: {b['steps']:,} steps of {b['dp']} ranks x {mb} "
                      f"micro-batch{'es' if mb != 1 else ''}; step imbalance (max/mean) p99 {before['p99']:.3f} -> {after['p99']:.3f}, "
                      f"idle rank time {before['idle_fraction']:.1%} -> {after['idle_fraction']:.1%}")
        others = before["other_models"], after["other_models"]
        if others[1]["models"]:
            console.print(f"  under {others[1]['models']} other cost models (attention and vision weights x0.5 or x2): "
                          f"worst p99 {others[0]['p99_worst']:.3f} -> {others[1]['p99_worst']:.3f}")
        mix = b["composition"]
        share = [mix[k]["image_share"] for k in ("token_only", "balanced")]
        length = [mix[k]["mean_length"] for k in ("token_only", "balanced")]
        console.print(f"  what steps hold (p1-p99 over steps): image-token share {share[0]['p1']:.2f}-{share[0]['p99']:.2f} "
                      f"-> {share[1]['p1']:.2f}-{share[1]['p99']:.2f}, mean sample length {length[0]['p1']:,.0f}-"
                      f"{length[0]['p99']:,.0f} -> {length[1]['p1']:,.0f}-{length[1]['p99']:,.0f} tokens "
                      f"(--step-mix trades balance for mixed steps)")
    print_rejects(r, out)
    if r.sequences is not None:
        console.print(f"shards: {out}/shards/   plot: {out}/packing.png   stats: {out}/stats.json")
    else:
        console.print(f"plan: {out}/plan.parquet   plot: {out}/packing.png   stats: {out}/stats.json")


@cli.command("verify")
@click.argument("out", type=click.Path(path_type=str))
@config_options(VerifyConfig)
@executor_options
def verify_cmd(workers: int, executor: str, ray_address: str | None, **settings: Any) -> Prepared:
    """Check a packed folder: every shard, boundary and count against its JSON and stats.json.

    Each tar is read once (each sequence's JSON; every image through the image gate, which proves it
    decodes as the training loader will decode it and that its size gives the stored grid), in
    parallel with --workers N (or on Ray with --executor ray); a pack in a bucket is read in place.
    Exits 1 and names each inconsistency (the tar, sequence, image and sample) when anything is wrong.
    """
    from curate.core.progress import console
    from packer.verify import verify_pack

    config = build_config(VerifyConfig, settings)
    runner = make_executor(executor, workers, ray_address)

    def run() -> None:
        report = verify_pack(config=config, executor=runner)
        console.print(f"checked {report.shards} shards, {report.sequences:,} sequences, {report.records:,} records, "
                      f"{report.images:,} images; recounted {report.recounted} records with the processor")
        if not report.ok:
            for problem in report.problems:
                console.print(f"[red]✗[/red] {problem}")
            if report.more_problems:
                console.print(f"[red]✗[/red] ... {report.more_problems:,} more problems not listed")
            raise SystemExit(1)
        console.print("[green]✓[/green] all boundaries and counts consistent")

    return Prepared(config, run)


@cli.command("energon-prepare")
@click.argument("out", type=click.Path(path_type=str))
@click.option("--split-ratio", default="1,0,0", show_default=True, metavar="TRAIN,VAL,TEST",
              help="Weights of the train/val/test splits; whole shards are assigned, in shard order.")
@click.option("--workers", type=int, default=1, show_default=True, help="Processes indexing the tars.")
def energon_prepare_cmd(out: str, split_ratio: str, workers: int) -> None:
    """Make a curate pack output folder a Megatron-Energon dataset (writes OUT/.nv-meta/).

    Runs Energon's own preparation on OUT/shards/*.tar (index, .info.json, split.yaml)
    and writes a dataset.yaml + sample_loader.py that load each packed sequence as
    one packer.energon.PackedSequenceSample; train with packer.energon.PackedTaskEncoder.
    Rerunning rewrites the metadata.

    \b
    Examples:
      curate energon-prepare packed/
      curate energon-prepare packed/ --split-ratio 98,1,1
      energon lint packed/ --split-parts train
    """
    from curate.core.progress import console

    try:
        from packer.energon import prepare_energon
    except ImportError as exc:
        raise UserError(f"energon-prepare needs megatron-energon ({exc}); install it: pip install 'curate[energon]'") from None
    v.at_least("--workers", workers, 1)
    r = prepare_energon(out, split_ratio=split_ratio, workers=workers)
    splits = ", ".join(f"{k}: {' '.join(v) or '-'}" for k, v in r["splits"].items())
    console.print(f"[bold]energon dataset[/bold] {r['path']}: {r['sequences']:,} packed sequences in {r['shards']} "
                  f"shards ({splits})")
    console.print(f"metadata: {r['path']}/.nv-meta/ ({', '.join(r['files'])})")
