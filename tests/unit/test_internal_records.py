"""Loaders of internal topics skip what they cannot decode, and say so once.

``records_or_skip`` and ``skipped`` (mq/broker/internal_records.py), and the
share-state loader (mq/broker/share_store.py) over chunks holding a batch
that does not parse and a record whose value is not a saved state: it keeps
the state it can read instead of failing the whole load. (The offsets loader
is tested against a real broker restart in
tests/integration/test_internal_load_skips.py.)
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest

from mq.broker import cluster_io, internal_records
from mq.broker.internal_records import records_or_skip, skipped
from mq.broker.share_store import ShareKey, ShareStateStore
from mq.records import batch as fmt
from mq.records.records import build_batch

KEY = ShareKey("workers", "jobs", 0)


def unparseable(base_offset: int) -> bytes:
    """A CRC-valid batch whose record claims key length -3."""
    out = bytearray(build_batch([(b"k", b"v", [], 0)], base_offset=base_offset))
    out[fmt.RECORDS_AT + 4] = 5  # zigzag(-3) over the key length
    fmt.write_header(out, fmt.parse_header(out))
    return bytes(out)


def state(epoch: object, acked: int) -> bytes:
    return msgpack.packb({"topic_id": "t1", "epoch": epoch, "state": {"acked": acked}})


def test_records_or_skip_passes_good_batches_and_skips_bad_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = build_batch([(b"k", b"v", [], 0)], base_offset=5)
    assert [r.value for r in records_or_skip(good, "p-0")] == [b"v"]
    with caplog.at_level(logging.ERROR, "mq.broker.internal_records"):
        assert records_or_skip(unparseable(17), "skip-test-0") == []
        assert records_or_skip(unparseable(17), "skip-test-0") == []  # not logged again
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("skip-test-0: skipping the record(s) at offset 17 while loading")
    assert "negative length -3" in lines[0]


def test_the_memory_of_logged_skips_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(internal_records, "MAX_REMEMBERED_SKIPS", 3)
    monkeypatch.setattr(internal_records, "_logged", set())
    for offset in range(10):
        skipped("bounded-0", offset, "why")
        assert len(internal_records._logged) <= 3


async def test_share_state_load_skips_what_does_not_decode(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    wanted = KEY.encode()
    chunks = [
        build_batch([(wanted, state(1, 10), [], 0)], base_offset=0),
        unparseable(1),
        build_batch([(wanted, b"\xc1", [], 0)], base_offset=2),  # not msgpack
        build_batch([(wanted, msgpack.packb({"topic_id": "t1"}), [], 0)], base_offset=3),
        build_batch([(wanted, state(2, 20), [], 0)], base_offset=4),
        build_batch([(wanted, state("x", 30), [], 0)], base_offset=5),
    ]

    async def read(
        broker: Any, topic: str, index: int, start: int, *_: Any
    ) -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async def fence(self: Any, key: ShareKey, topic_id: str, epoch: int) -> int:
        return 6  # where the load's own fence record went

    monkeypatch.setattr(cluster_io, "read", read)
    monkeypatch.setattr(internal_records, "_logged", set())
    monkeypatch.setattr(ShareStateStore, "fence", fence)
    broker = SimpleNamespace(config=SimpleNamespace(share_state_load_wait_ms=1000))
    store = ShareStateStore(broker)  # type: ignore[arg-type]  # read() and fence() are fakes
    monkeypatch.setattr(ShareStateStore, "partition_for", lambda self, key: 3)
    with caplog.at_level(logging.ERROR, "mq.broker.internal_records"):
        assert await store.load(KEY, "t1", 3) == {"acked": 20}
    skipped_at = sorted(int(r.getMessage().split("offset ")[1].split()[0]) for r in caplog.records)
    assert skipped_at == [1, 2, 3, 5]
    assert all(r.getMessage().startswith("__share_state-3: ") for r in caplog.records)
