"""Storage benchmark: partition-log append and read against the disk's raw speed.

Measured in one run, on one disk (the data directory's):

* ``raw``: sequential 1 MiB writes with ``fdatasync`` after each, the physical
  ceiling for durable appends (what BENCHMARKS.md calls raw disk bandwidth);
* ``append``: producer batches of 100 B and 1 KiB records appended through a
  :class:`~mq.storage.writer.LogWriter` by several concurrent appenders, with
  ``flush=always`` (acknowledged = synced; group commit) and ``flush=interval``
  (the default). The clock stops when every append is acknowledged *and* the
  log is synced, so both figures count durable bytes, like ``raw``;
* ``read``: the whole log read back from the page cache with
  :meth:`~mq.storage.log.Log.read` (1 MiB per read, every batch's CRC checked
  by the log), counting records to prove nothing was skipped.

Each figure is the median of ``--runs`` runs. Usage::

    python -m benchmarks.storage [--data-dir DIR] [--mib N] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mq.records.batch import parse_header
from mq.records.records import RecordInput, build_batch
from mq.storage.config import FlushPolicy, LogConfig
from mq.storage.log import Log
from mq.storage.writer import LogWriter

MiB = 1 << 20
APPENDERS = 32
"""Concurrent appenders (``--appenders``): requests of several connections queued at once."""


@dataclass
class Figure:
    workload: str
    setting: str
    record_bytes: int
    records: int
    bytes: int
    seconds: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.median_s / 1e6

    @property
    def records_per_s(self) -> float:
        return self.records / self.median_s


def raw_write(directory: Path, total: int) -> float:
    """Seconds to write ``total`` bytes in 1 MiB chunks, fdatasync after each."""
    path = directory / "raw.bin"
    chunk = os.urandom(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(total // MiB):
            os.write(fd, chunk)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return elapsed


def make_batch(record_bytes: int, batch_bytes: int) -> tuple[bytes, int]:
    """One producer batch of ``record_bytes`` records filling about ``batch_bytes``."""
    count = max(1, batch_bytes // (record_bytes + 10))
    now = time.time_ns() // 1_000_000
    records: list[RecordInput] = [(None, os.urandom(record_bytes), [], now) for _ in range(count)]
    return build_batch(records), count


async def append_run(
    directory: Path, policy: FlushPolicy, batch: bytes, total: int, appenders: int
) -> float:
    """Seconds to append ``total`` bytes of ``batch`` copies until acknowledged and synced."""
    log = Log.open(directory, LogConfig(flush=policy))
    writer = LogWriter(log)
    writer.start()
    per_appender = total // len(batch) // appenders

    async def appender() -> None:
        for _ in range(per_appender):
            await writer.append(batch)

    start = time.perf_counter()
    await asyncio.gather(*(appender() for _ in range(appenders)))
    await writer.flush()
    elapsed = time.perf_counter() - start
    await writer.close()
    return elapsed


def read_run(directory: Path, expected_records: int) -> float:
    """Seconds to read the whole log from offset 0 in 1 MiB reads, counting records."""
    log = Log.open(directory, LogConfig())
    try:
        start = time.perf_counter()
        offset, records = 0, 0
        while (found := log.read(offset, MiB)) is not None:
            data, pos = found.data, 0
            while pos < len(data):
                header = parse_header(data, pos)
                records += header.records_count
                pos += header.size
            offset = found.next_offset
            del data, found
        elapsed = time.perf_counter() - start
    finally:
        log.close()
    if records != expected_records:
        raise AssertionError(f"read {records} records back, appended {expected_records}")
    return elapsed


def measure(
    data_dir: Path, total: int, runs: int, batch_bytes: int, appenders: int
) -> list[Figure]:
    figures = [Figure("raw write", "fdatasync per 1 MiB", 0, 0, total // MiB * MiB, [])]
    for _ in range(runs):
        figures[0].seconds.append(raw_write(data_dir, total))
    for record_bytes in (100, 1024):
        batch, per_batch = make_batch(record_bytes, batch_bytes)
        batches = total // len(batch) // appenders * appenders
        size, records = batches * len(batch), batches * per_batch
        reads = Figure("read", "page cache", record_bytes, records, size, [])
        for policy in (FlushPolicy.ALWAYS, FlushPolicy.INTERVAL):
            fig = Figure("append", f"flush={policy.value}", record_bytes, records, size, [])
            for _ in range(runs):
                directory = data_dir / f"bench-{record_bytes}-{policy.value}"
                shutil.rmtree(directory, ignore_errors=True)
                elapsed = asyncio.run(append_run(directory, policy, batch, total, appenders))
                fig.seconds.append(elapsed)
                if policy is FlushPolicy.INTERVAL:
                    reads.seconds.append(read_run(directory, records))
                shutil.rmtree(directory)
            figures.append(fig)
        figures.append(reads)
    return figures


def report(
    figures: list[Figure],
    batch_bytes: int,
    appenders: int,
    as_json: bool,
    out: Callable[[str], None],
) -> None:
    raw = figures[0].mb_per_s
    if as_json:
        for f in figures:
            out(
                json.dumps(
                    {
                        "workload": f.workload,
                        "setting": f.setting,
                        "record_bytes": f.record_bytes,
                        "records": f.records,
                        "bytes": f.bytes,
                        "median_seconds": round(f.median_s, 4),
                        "runs": [round(s, 4) for s in f.seconds],
                        "mb_per_s": round(f.mb_per_s, 1),
                        "records_per_s": round(f.records_per_s),
                        "vs_raw": round(f.mb_per_s / raw, 3),
                        "verified": f.workload == "read",
                        "appenders": appenders,
                    }
                )
            )
        return
    out(
        f"batches of ~{batch_bytes // 1024} KiB, {appenders} concurrent appenders, "
        f"median of {len(figures[0].seconds)} runs"
    )
    columns = ("workload", "setting", "record", "MB/s", "records/s", "vs raw")
    out("{:<10} {:<20} {:>7} {:>9} {:>12} {:>7}".format(*columns))
    for f in figures:
        rec = f"{f.record_bytes} B" if f.record_bytes else "-"
        rps = f"{f.records_per_s:,.0f}" if f.records else "-"
        out(
            f"{f.workload:<10} {f.setting:<20} {rec:>7} {f.mb_per_s:>9,.1f} {rps:>12} "
            f"{f.mb_per_s / raw:>6.0%}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("bench-data"))
    parser.add_argument("--mib", type=int, default=256, help="MiB written per measurement")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch-kib", type=int, default=64, help="producer batch size")
    parser.add_argument("--appenders", type=int, default=APPENDERS, help="concurrent appenders")
    parser.add_argument("--quick", action="store_true", help="32 MiB, one run (a smoke run)")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args(argv)
    if args.quick:
        args.mib, args.runs = 32, 1
    args.data_dir.mkdir(parents=True, exist_ok=True)
    figures = measure(
        args.data_dir, args.mib * MiB, args.runs, args.batch_kib * 1024, args.appenders
    )
    report(figures, args.batch_kib * 1024, args.appenders, args.json, print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
