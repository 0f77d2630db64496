"""Reads from sealed segments: the fetch hot path through the caches of files and maps.

Builds logs whose data is all in sealed segments (``segment.bytes`` 1 MiB),
then reads every log from offset 0 to its end with :meth:`Log.read` (1 MiB per
read, as a fetch does; every batch CRC-checked), ``--passes`` times, and prints
MB per CPU second. Two shapes: ``one-log`` (one partition, ``--mib`` MiB in 1 MiB segments)
and ``many-logs`` (``--logs`` partitions of two sealed segments each, read in
turn). Uses only the storage API that predates the caches, so the same file runs
against an older checkout (``PYTHONPATH=OLD_TREE python benchmarks/sealed_reads.py``)
for a side-by-side comparison; run the two alternately and compare medians.

Usage::

    python -m benchmarks.sealed_reads [--data-dir DIR] [--mib N] [--logs N] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

from mq.records.records import RecordInput, build_batch
from mq.storage.config import LogConfig
from mq.storage.log import Log

MiB = 1 << 20
SEGMENT_BYTES = 1 * MiB
RECORD_BYTES = 1_000
BATCH_RECORDS = 60
"""60 KB batches: about 17 per segment."""


def batch() -> bytes:
    records: list[RecordInput] = [
        (None, b"x" * RECORD_BYTES, (), 1_700_000_000_000) for _ in range(BATCH_RECORDS)
    ]
    return build_batch(records)


def build(directory: Path, name: str, total: int) -> Log:
    config = LogConfig(segment_bytes=SEGMENT_BYTES, max_message_bytes=SEGMENT_BYTES)
    log = Log.open(directory / name, config)
    data = batch()
    written = 0
    while written < total:
        log.append(data)
        written += len(data)
    log.append(data)
    log.roll(log.next_offset)  # everything above is sealed now
    log.flush()
    return log


def read_all(logs: list[Log]) -> int:
    read = 0
    for log in logs:
        offset = log.log_start_offset
        end = log.next_offset
        while offset < end:
            found = log.read(offset, MiB)
            if found is None:
                break
            read += len(found.data)
            offset = found.next_offset
    return read


def measure(logs: list[Log], passes: int) -> float:
    """MB read per second of this process's CPU time (user + system): on a shared
    machine, wall time mostly measures the neighbours."""
    read_all(logs)  # warm: page cache and maps
    start = time.process_time()
    total = sum(read_all(logs) for _ in range(passes))
    return total / (time.process_time() - start) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("bench-sealed"))
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--logs", type=int, default=500)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    shutil.rmtree(args.data_dir, ignore_errors=True)
    args.data_dir.mkdir(parents=True)
    one = [build(args.data_dir, "one-0", args.mib * MiB)]
    many = [build(args.data_dir, f"many-{n}", SEGMENT_BYTES) for n in range(args.logs)]
    results = {}
    for shape, logs in (("one-log", one), ("many-logs", many)):
        runs = [measure(logs, args.passes) for _ in range(args.runs)]
        results[shape] = statistics.median(runs)
        print(
            json.dumps(
                {"workload": f"sealed-read {shape}", "MB/s": round(results[shape], 1), "runs": runs}
            )
        )
    for log in one + many:
        log.close()
    shutil.rmtree(args.data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
