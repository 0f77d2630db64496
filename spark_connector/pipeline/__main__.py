"""``python -m spark_connector.pipeline generate | run | show``: the pipeline end to end.

::

    mq serve                                           # a broker on 127.0.0.1:9292
    python -m spark_connector.pipeline generate --events 100000
    python -m spark_connector.pipeline run --available-now --output out/
    python -m spark_connector.pipeline show --output out/ --sort error_rate
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from spark_connector import MissingExtraError, require_extra
from spark_connector.options import DEFAULT_BOOTSTRAP
from spark_connector.pipeline.events import WindowStats
from spark_connector.pipeline.generator import (
    DEFAULT_START,
    TrafficConfig,
    generate_events,
    produce,
)
from spark_connector.pipeline.report import SORTS, table
from spark_connector.pipeline.topics import INPUT_PARTITIONS, ensure_topic

if TYPE_CHECKING:  # Spark is imported by the commands that use it, not by ``generate``
    from pyspark.sql.streaming.listener import StreamingQueryProgress

    from spark_connector.pipeline.runner import Tally

_bootstrap = click.option(
    "--bootstrap", default=DEFAULT_BOOTSTRAP, show_default=True, help="A broker's host:port."
)
_topic = click.option(
    "--topic", default="access-logs", show_default=True, help="The access-log lines' topic."
)
_output = click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("out"),
    show_default=True,
    help="The Parquet output directory.",
)


@click.group()
def main() -> None:
    """Web access logs through mq and Spark: per-minute request stats, per path."""


def _require(modules: tuple[str, ...]) -> None:
    """One clear line and exit 1 if a module of the ``spark`` extra is missing."""
    try:
        require_extra(modules, what="this command")
    except MissingExtraError as exc:
        raise click.ClickException(str(exc)) from None


def _start_time(value: str) -> datetime:
    if value == "now":
        return datetime.now(UTC).replace(microsecond=0)
    parsed = datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


@main.command()
@_bootstrap
@_topic
@click.option("--events", default=10_000, show_default=True, help="How many lines.")
@click.option("--seed", default=1, show_default=True, help="The same seed, the same lines.")
@click.option(
    "--start",
    default=DEFAULT_START.isoformat(),
    show_default=True,
    help="The first event time (ISO 8601; UTC if no offset), or 'now'.",
)
@click.option(
    "--per-second",
    type=float,
    help="Events per second of event time. [default: --rate if given, else 20]",
)
@click.option("--max-lateness", default=30, show_default=True, help="Seconds an event may lag.")
@click.option("--no-incident", is_flag=True, help="No /api/checkout outage at minutes 5-8.")
@click.option("--key", type=click.Choice(["ip", "path"]), default="ip", show_default=True)
@click.option("--rate", type=float, help="Send at most this many lines per second (live demo).")
@click.option("--partitions", default=INPUT_PARTITIONS, show_default=True, help="Of a new topic.")
def generate(
    bootstrap: str,
    topic: str,
    events: int,
    seed: int,
    start: str,
    per_second: float | None,
    max_lateness: int,
    no_incident: bool,
    key: str,
    rate: float | None,
    partitions: int,
) -> None:
    """Produce simulated access-log lines into TOPIC (created if missing)."""
    config = TrafficConfig(
        seed=seed,
        events=events,
        start=_start_time(start),
        per_second=per_second or rate or 20.0,
        max_lateness=timedelta(seconds=max_lateness),
        incident=None if no_incident else TrafficConfig.incident,
    )
    ensure_topic(bootstrap, topic, partitions)
    began = time.monotonic()
    sent = produce(bootstrap, topic, generate_events(config), "ip" if key == "ip" else "path", rate)
    seconds = time.monotonic() - began
    span = timedelta(seconds=round(events / config.per_second))
    click.echo(
        f"produced {sent:,} access-log lines to {topic} in {seconds:.1f}s "
        f"(event times {config.start:%Y-%m-%d %H:%M:%S} UTC + {span}, seed {seed})"
    )


@main.command()
@_bootstrap
@_topic
@click.option("--output-topic", default="access-stats", show_default=True)
@_output
@click.option(
    "--checkpoint",
    type=click.Path(file_okay=False, path_type=Path),
    help="Checkpoint directory (one per sink below it). [default: OUTPUT-checkpoint]",
)
@click.option("--available-now", is_flag=True, help="Process what the topic holds, then stop.")
@click.option("--trigger", default=10, show_default=True, help="Seconds between micro-batches.")
@click.option("--watermark-delay", default=120, show_default=True, help="Seconds.")
@click.option("--window", default=60, show_default=True, help="Window length, seconds.")
@click.option("--max-offsets-per-trigger", type=int, help="Cap on lines per micro-batch.")
@click.option("--top", default=10, show_default=True, help="Rows of the summary.")
def run(
    bootstrap: str,
    topic: str,
    output_topic: str,
    output: Path,
    checkpoint: Path | None,
    available_now: bool,
    trigger: int,
    watermark_delay: int,
    window: int,
    max_offsets_per_trigger: int | None,
    top: int,
) -> None:
    """Run the streaming job: TOPIC in, OUTPUT-TOPIC and Parquet in OUTPUT out."""
    _require(("pyspark", "pyarrow", "numpy"))
    from spark_connector.pipeline.job import JobConfig, read_stats
    from spark_connector.pipeline.runner import local_session, run_available_now, run_until_stopped

    if checkpoint is None:  # next to the output: out/ and out-checkpoint/
        checkpoint = output.absolute().with_name(f"{output.absolute().name}-checkpoint")
    config = JobConfig(
        bootstrap=bootstrap,
        topic=topic,
        output_topic=output_topic,
        output=output,
        checkpoint=checkpoint,
        watermark_delay=timedelta(seconds=watermark_delay),
        window=timedelta(seconds=window),
        max_offsets_per_trigger=max_offsets_per_trigger,
        available_now=available_now,
        trigger_interval=timedelta(seconds=trigger),
    )
    began = time.monotonic()
    spark = local_session()
    click.echo(f"spark {spark.version} (local) ready in {time.monotonic() - began:.1f}s")
    try:
        began = time.monotonic()
        if available_now:
            tallies = run_available_now(spark, config, report=_report_batch)
        else:
            click.echo(f"running every {trigger}s; Ctrl-C stops")
            tallies = run_until_stopped(spark, config, _report_batch, _stopping)
        click.echo(f"queries done in {time.monotonic() - began:.1f}s")
        for tally in tallies:
            _report_tally(tally)
        stats = read_stats(spark, config.output)
    finally:
        spark.stop()
    _summary(stats, top, output)


def _report_batch(tally: Tally, progress: StreamingQueryProgress) -> None:
    if tally.sink.startswith("topic ") and progress.numInputRows:
        click.echo(
            f"  batch {tally.last_batch}: {tally.input_rows:,} lines read, "
            f"{tally.output_rows or 0:,} windows written so far; "
            f"watermark {tally.watermark or 'none yet'}"
        )


def _stopping() -> None:
    click.echo("stopping after the current micro-batch (Ctrl-C again: at once)")


def _report_tally(tally: Tally) -> None:
    written = "" if tally.output_rows is None else f", {tally.output_rows:,} windows written"
    click.echo(
        f"  into {tally.sink}: {tally.batches} micro-batches, {tally.input_rows:,} lines read"
        f"{written}, {tally.dropped_late} late lines dropped, watermark {tally.watermark or 'none'}"
    )


def _summary(stats: list[WindowStats], top: int, output: Path) -> None:
    if not stats:
        click.echo("no window is final yet: the watermark has not passed any window's end")
        return
    requests = sum(s.requests for s in stats)
    errors = sum(s.errors for s in stats)
    first, last = min(s.window_start for s in stats), max(s.window_end for s in stats)
    click.echo(
        f"\n{len(stats):,} final windows in {output}, {first:%Y-%m-%d %H:%M} to {last:%H:%M} UTC: "
        f"{requests:,} requests, {errors:,} server errors ({errors / requests:.2%})"
    )
    click.echo("later windows stay open until newer events move the watermark past their end")
    click.echo(f"\ntop {top} windows by 5xx rate:")
    click.echo(table(stats, "error_rate", top))


@main.command()
@_output
@click.option("--sort", type=click.Choice(sorted(SORTS)), default="window", show_default=True)
@click.option("--limit", default=50, show_default=True, help="Rows to print (0: all).")
@click.option("--path", "paths", multiple=True, help="Only these paths (repeatable).")
def show(output: Path, sort: str, limit: int, paths: tuple[str, ...]) -> None:
    """Print the job's Parquet output as a table (read with pyarrow: no Spark to start)."""
    _require(("pyarrow",))
    from spark_connector.pipeline.results import read_parquet

    stats = read_parquet(output)
    if paths:
        stats = [s for s in stats if s.path in paths]
    click.echo(table(stats, sort, limit or None))


if __name__ == "__main__":
    main()
