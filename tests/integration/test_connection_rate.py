"""max_connection_creation_rate on a real (in-process) broker: connections past the
rate are held unread, and those that would wait too long are closed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from inprocess_broker import running_broker

from mq.client.connection import Connection
from mq.errors import NetworkError


async def test_connections_past_the_rate_wait_or_are_refused(tmp_path: Path) -> None:
    async with running_broker(
        tmp_path, max_connection_creation_rate=5, quota_max_throttle_ms=1_000
    ) as running:
        host, port = running.bootstrap.rsplit(":", 1)

        async def connect() -> float | None:
            started = time.monotonic()
            try:
                conn = await Connection.open(host, int(port), connect_timeout_s=10)
            except NetworkError:
                return None
            conn.close()
            return time.monotonic() - started

        took = await asyncio.gather(*(connect() for _ in range(12)))
        served = sorted(t for t in took if t is not None)
        refused = [t for t in took if t is None]
        # 5 at once (a second's worth), then one per 0.2 s up to the 1 s bound; the rest
        # (their wait would be longer) are closed as they are accepted
        assert len(served) in (10, 11)
        assert len(refused) == 12 - len(served)
        assert served[4] < 0.5
        assert served[-1] >= 0.8
        # once the address is back under the rate, a new connection is read at once
        await asyncio.sleep(2.5)
        again = await connect()
        assert again is not None
        assert again < 0.15
