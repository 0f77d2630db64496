"""Redis Streams with redis-py's asyncio client (hiredis parser), Debian's ``redis-server``.

Best practice from the client's documentation: ``XADD``
pipelined without a transaction in chunks of :data:`CHUNK` (one chunk in
flight keeps the stream's order), ``XREAD`` with ``COUNT`` :data:`READ_COUNT`
and ``BLOCK`` to read. Durability: the append-only file, fsynced every second
(Redis's default with ``appendonly yes``) or at every write (``always``); no
RDB snapshots. A stream entry has one field, ``v``, holding the value. Reading
is the log's own read (``XREAD`` from ``0-0``, no consumer group), as mq's
W3 reads without committing.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, cast

import redis.asyncio as redis

from benchmarks.peers.base import Adapter, Server, free_port, require

CHUNK = 1_000
READ_COUNT = 10_000
BLOCK_MS = 1_000


class RedisStreams(Adapter):
    def __init__(self, fsync: str = "everysec") -> None:
        super().__init__()
        self.fsync = fsync
        self.system = "Redis Streams"
        self.durability = f"appendfsync {fsync}"
        self._client: redis.Redis | None = None
        self._in_order = asyncio.Lock()

    def start_server(self, directory: Path) -> Server:
        binary = require("redis-server", "redis-server")
        version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"v=(\d+\.\d+)", version)
        self.system = f"Redis {found.group(1) if found else '?'} Streams"
        self.port = free_port()
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(directory)]
        argv += ["--appendonly", "yes", "--appendfsync", self.fsync, "--save", ""]
        argv += ["--daemonize", "no", "--protected-mode", "yes", "--logfile", ""]
        return Server(argv, port=self.port, log=directory / "redis.log")

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            raise RuntimeError("not connected")
        return self._client

    async def connect(self) -> None:
        self._client = redis.Redis(host="127.0.0.1", port=self.port)
        self._in_order = asyncio.Lock()
        await self._client.ping()

    async def close(self) -> None:
        self._in_order = asyncio.Lock()  # the old one may hold this loop: keep pickling possible
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def prepare(self, stream: str) -> None:
        await self.client.delete(stream)

    async def produce(self, stream: str, values: Sequence[bytes]) -> int:
        confirmed = 0
        for at in range(0, len(values), CHUNK):
            pipe = self.client.pipeline(transaction=False)
            for value in values[at : at + CHUNK]:
                pipe.xadd(stream, {"v": value})
            confirmed += sum(1 for entry_id in await pipe.execute() if entry_id)
        return confirmed

    async def consume(self, stream: str, count: int) -> AsyncIterator[list[bytes]]:
        last: bytes | str = "0-0"
        got = 0
        while got < count:
            answer = await self.client.xread({stream: last}, count=READ_COUNT, block=BLOCK_MS)
            if not answer:
                continue
            # RESP2: [[stream, [(id, {field: value}), ...]]]
            entries: list[tuple[bytes, dict[bytes, bytes]]] = cast(Any, answer)[0][1]
            last = entries[-1][0]
            got += len(entries)
            yield [fields[b"v"] for _, fields in entries]

    async def send_now(self, stream: str, values: Sequence[bytes]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for value in values:
            pipe.xadd(stream, {"v": value})
        async with self._in_order:  # FIFO: a pipeline each, else the pool reorders bursts
            await pipe.execute()


def adapters() -> list[Adapter]:
    return [RedisStreams("everysec"), RedisStreams("always")]
