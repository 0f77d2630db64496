"""A hosted partition: its log, its writer task, its high watermark, its waiters.

The third storage layer (Segment → Log → Partition): what the broker adds to a
log. On a single node the partition leads and its in-sync replicas are itself,
so the high watermark is the log end offset as soon as an append has met its
flush policy; replication (``mq.replication``) replaces that rule with the
minimum log end offset over the ISR.

Long polls: a fetch that wants more data than there is waits on
:meth:`Partition.wait_for_data`, which every append wakes.

Thread safety: one event loop; every method is called from it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from mq.storage.config import LogConfig
from mq.storage.log import AppendInfo, Log
from mq.storage.segment import Slice
from mq.storage.writer import LogWriter


class Partition:
    """One topic-partition hosted (and led) by this broker."""

    def __init__(self, topic: str, index: int, log: Log) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = 0
        self.high_watermark = log.next_offset
        self._waiters: set[asyncio.Future[None]] = set()
        self.writer = LogWriter(log, on_append=self._appended)

    @classmethod
    def open(cls, data_dir: Path, topic: str, index: int, config: LogConfig) -> Partition:
        return cls(topic, index, Log.open(data_dir / f"{topic}-{index}", config))

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    def start(self) -> None:
        self.writer.start()

    def append(self, data: bytes | bytearray | memoryview) -> asyncio.Future[AppendInfo]:
        """Queue a producer's batches now (in call order); the future completes on ack."""
        return self.writer.submit_append(data, leader_epoch=self.leader_epoch)

    def _appended(self, info: AppendInfo) -> None:
        self.high_watermark = max(self.high_watermark, info.last_offset + 1)
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def read(self, offset: int, max_bytes: int) -> Slice | None:
        """What a consumer may see: whole batches below the high watermark."""
        return self.log.read(offset, max_bytes, self.high_watermark)

    def wait_for_data(self) -> asyncio.Future[None]:
        """A future that completes at the next append (cancel it when done waiting)."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        waiter.add_done_callback(self._waiters.discard)
        return waiter

    async def close(self) -> None:
        for waiter in self._waiters:
            waiter.cancel()
        await self.writer.close()
