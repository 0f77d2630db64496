"""The victim of ``test_crash.py``: appends through a LogWriter until it is killed.

Usage: ``python crash_child.py DIRECTORY POLICY SEED``. Prints ``ready <offset>``
once the log is open, then ``ack <first> <last> <digest>`` after each append is
acknowledged (its future completed), one flushed line at a time. Up to eight
appends are in flight at once, so acknowledgements come from group commits.
Each batch's records name their intended offsets, which the writer assigns in
submission order.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage_helpers import as_stored, make_batch

from mq.storage.config import FlushPolicy, KiB, LogConfig
from mq.storage.log import Log
from mq.storage.writer import LogWriter

IN_FLIGHT = 8


def config_for(policy: str) -> LogConfig:
    return LogConfig(
        segment_bytes=128 * KiB,
        index_interval_bytes=1024,
        max_message_bytes=64 * KiB,
        flush=FlushPolicy(policy),
        flush_ms=20,
    )


def digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


async def run(directory: Path, policy: str, seed: int) -> None:
    rng = random.Random(seed)
    writer = LogWriter(Log.open(directory, config_for(policy)))
    next_offset = writer.log.next_offset
    out = sys.stdout
    out.write(f"ready {next_offset}\n")
    out.flush()

    async def append(first: int, raw: bytes) -> None:
        try:
            info = await writer.append(raw)
            if info.first_offset != first:
                raise AssertionError(f"expected offset {first}, got {info.first_offset}")
            out.write(f"ack {first} {info.last_offset} {digest(as_stored(raw, first))}\n")
            out.flush()
        except BaseException:
            traceback.print_exc()
            out.write("failed\n")
            out.flush()
            raise SystemExit(2) from None

    inflight: set[asyncio.Task[None]] = set()
    while True:
        count = rng.randint(1, 10)
        raw = make_batch(next_offset, count, value_size=rng.choice([10, 200, 1500, 6000]))
        task = asyncio.ensure_future(append(next_offset, raw))
        inflight.add(task)
        task.add_done_callback(inflight.discard)
        next_offset += count
        if len(inflight) >= IN_FLIGHT:
            await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            for done in [t for t in inflight if t.done()]:
                done.result()


if __name__ == "__main__":
    asyncio.run(run(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
