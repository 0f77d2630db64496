"""Requests at their list bounds and topic floods do not hold the event loop
(issue 18: the isolation benchmark's two open patterns).

Orderings, not timings: another connection's ``api_versions`` is answered
while a 100,000-topic metadata request (or a 100,000-entry produce) is still in
progress; the event loop turns while a topic's 1,000 partitions are being
opened, each partition served only once its files exist, and
``create_topics`` answers only once they all are. In-process, so the test can
look at the broker's partitions; the clients of the ordering tests are plain
blocking sockets in a thread, as a greedy client's would be.
"""

from __future__ import annotations

import asyncio
import fcntl
import select
import socket
import struct
import termios
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from inprocess_broker import running_broker

from mq import Admin
from mq.client.connection import Connection
from mq.records.records import build_batch
from mq.storage.blocking import BLOCKING_THREADS, blocking_calls
from mq.storage.epochs import LeaderEpochCache
from mq.wire import apis_core, apis_data, apis_groups
from mq.wire.messages import encode_request
from mq.wire.registry import Api

TEST_TIMEOUT_S = 300
METADATA_TOPICS = 100_000
PRODUCE_ENTRIES = 100_000
"""A produce at its list bound (MAX_PARTITIONS): ~10 MB, a second or more of work."""
FLOOD_PARTITIONS = 1_000
WATCH_PAUSE_S = 0.002
"""Between two looks of the watcher at the broker's partitions. Not 0: a watcher that
never sleeps keeps the GIL but for the interpreter's 5 ms switch interval, and each of
the opener threads' many file system calls then waits that long to take it back (the
1,000 opens took over 300 s in CI instead of a few)."""
SETTLE_S = 0.1
"""After the big request's bytes are all taken by the broker's kernel, a pause before the
small request goes, so that the broker has read the big one first: the small one then
queues behind it unless the broker serves both at once. Short next to the big request's
own time (so that it is still in progress when the small one comes)."""


def _frame(api: Api[Any, Any], cid: int, body: Any) -> bytes:
    return encode_request(api, 0, cid, "pacing-test", body)


def _unsent(sock: socket.socket) -> int:
    """Bytes still in the socket's send queue (SIOCOUTQ)."""
    return int(struct.unpack("i", fcntl.ioctl(sock, termios.TIOCOUTQ, b"\0\0\0\0"))[0])


def _answer_order(address: tuple[str, int], big: bytes, small: bytes) -> list[str]:
    """Send ``big`` on one connection, then ``small`` on another once the broker has
    the big one; which connection's answer began first ("big"/"small"): a broker busy
    with the big one in one go writes (the start of) its answer before it reads the
    small one."""
    with (
        socket.create_connection(address, timeout=60) as big_sock,
        socket.create_connection(address, timeout=60) as small_sock,
    ):
        big_sock.sendall(big)
        deadline = time.monotonic() + 60
        while _unsent(big_sock) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(SETTLE_S)
        small_sock.sendall(small)
        names = {big_sock.fileno(): "big", small_sock.fileno(): "small"}
        socks = {big_sock.fileno(): big_sock, small_sock.fileno(): small_sock}
        order: list[str] = []
        while len(order) < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select(list(socks), [], [], 1.0)
            for fd in ready:
                assert socks[fd].recv(1 << 20), f"the broker closed the {names[fd]} connection"
                order.append(names[fd])
                del socks[fd]
        return order


async def test_api_versions_is_answered_during_a_100000_topic_metadata_request(
    tmp_path: Path,
) -> None:
    big = _frame(
        apis_core.METADATA,
        1,
        {
            "topics": [f"no-such-topic-{i}" for i in range(METADATA_TOPICS)],
            "allow_auto_topic_creation": False,
        },
    )
    small = _frame(apis_core.API_VERSIONS, 2, {})
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path / "data") as running:
            host, port = running.bootstrap.rsplit(":", 1)
            order = await asyncio.to_thread(_answer_order, (host, int(port)), big, small)
    assert order == ["small", "big"]


async def test_api_versions_is_answered_during_a_100000_entry_produce(tmp_path: Path) -> None:
    batch = build_batch([(None, b"x" * 16, (), int(time.time() * 1000))])
    big = _frame(
        apis_data.PRODUCE,
        1,
        {
            "acks": 1,
            "timeout_ms": 30_000,
            "topics": [
                {
                    "name": "wide",
                    "partitions": [{"partition": 0, "records": batch}] * PRODUCE_ENTRIES,
                }
            ],
        },
    )
    small = _frame(apis_core.API_VERSIONS, 2, {})
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path / "data") as running:
            async with Admin(bootstrap=running.bootstrap) as admin:
                await admin.create_topic("wide", 1)
            host, port = running.bootstrap.rsplit(":", 1)
            order = await asyncio.to_thread(_answer_order, (host, int(port)), big, small)
    assert order == ["small", "big"]


async def test_the_loop_turns_while_a_topics_partitions_are_opened(tmp_path: Path) -> None:
    """1,000 partitions' files are made off the event loop, a chunk at a time: the loop
    sees the topic part-open; a partition it sees has its files; the create answers
    once all are open."""
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path / "data") as running:
            broker = running.broker
            seen_open: list[int] = []
            missing_files: list[str] = []
            stop = asyncio.Event()

            async def watch() -> None:
                checked: set[int] = set()
                while not stop.is_set():
                    hosted = [p for (t, i), p in broker.partitions.items() if t == "flood"]
                    seen_open.append(len(hosted))
                    for partition in hosted:
                        if partition.index in checked:
                            continue
                        checked.add(partition.index)
                        if not any(partition.log.directory.glob("*.log")):
                            missing_files.append(partition.name)
                    await asyncio.sleep(WATCH_PAUSE_S)

            watcher = asyncio.get_running_loop().create_task(watch())
            timeout_ms = TEST_TIMEOUT_S * 1000  # 2,000 fsyncs on a busy disk take a while
            async with Admin(bootstrap=running.bootstrap, request_timeout_ms=timeout_ms) as admin:
                await admin.create_topic("flood", FLOOD_PARTITIONS)
                answered_with = sum(1 for t, _ in broker.partitions if t == "flood")
            stop.set()
            await watcher
    part_open = [n for n in seen_open if 0 < n < FLOOD_PARTITIONS]
    assert part_open, "the event loop never turned while the partitions were being opened"
    assert not missing_files
    assert answered_with == FLOOD_PARTITIONS


PERSIST_PAUSE_S = 0.001
"""Added to each leader-epoch file's replacement in the flood test: a slower disk, so that
calls running at once overlap (a bare replacement takes ~0.1 ms) and the test sees them."""


async def test_a_floods_leader_epochs_are_written_by_one_thread_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 1,000 new leaders' epoch files are written before they lead, off the event
    loop, by at most BLOCKING_THREADS threads at once (not the default executor's six,
    which took the GIL from the loop in turn) and in batches (not one thread trip each)."""
    lock = threading.Lock()
    running = 0
    most = 0
    threads: set[int] = set()
    persist = LeaderEpochCache._persist

    def counted(cache: LeaderEpochCache) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            threads.add(threading.get_ident())
        try:
            time.sleep(PERSIST_PAUSE_S)
            persist(cache)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(LeaderEpochCache, "_persist", counted)
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path / "data") as running_:
            broker = running_.broker
            batches_before = blocking_calls().batches
            timeout_ms = TEST_TIMEOUT_S * 1000
            async with Admin(bootstrap=running_.bootstrap, request_timeout_ms=timeout_ms) as admin:
                await admin.create_topic("flood", FLOOD_PARTITIONS)
            flood = [p for (t, _), p in broker.partitions.items() if t == "flood"]
            # leading, and its epoch's file written: the writer ran the call before
            # anything queued after it (a produce now would append in that epoch)
            await asyncio.gather(*(p.writer.call(lambda _: None) for p in flood))
            on_disk = [LeaderEpochCache.read(p.log.directory, p.log.io) for p in flood]
            leaders = [p for p in flood if p.is_leader]
            batches = blocking_calls().batches - batches_before
    assert len(leaders) == FLOOD_PARTITIONS
    assert all(
        c is not None and c.latest_epoch == p.leader_epoch
        for c, p in zip(on_disk, flood, strict=True)
    )
    assert threading.get_ident() not in threads  # never on the event loop
    assert most <= BLOCKING_THREADS, f"{most} leader-epoch files were written at once"
    assert len(threads) <= BLOCKING_THREADS
    assert 0 < batches < FLOOD_PARTITIONS / 2, f"{batches} trips for {FLOOD_PARTITIONS} files"


ORDERED_ENTRIES = 1_000
"""Entries of the paced produce: several times ENTRIES_PER_TURN (64), so that its
handler gives the loop turns (in which its connection could start the next request)
before it reaches its last entry."""


async def test_a_paced_produce_keeps_the_order_of_its_connections_requests(
    tmp_path: Path,
) -> None:
    """A produce of many entries gives the loop turns while it queues its appends; the
    next produce pipelined on its connection must still append after it. The big one
    names partitions that do not exist (answered with an error each) before its last
    entry, the topic's one partition, which the pipelined produce appends to too."""
    missing = [{"partition": i, "records": _batch(b"none")} for i in range(1, ORDERED_ENTRIES)]
    first_body = {
        "acks": 1,
        "timeout_ms": 30_000,
        "topics": [
            {
                "name": "ordered",
                "partitions": [*missing, {"partition": 0, "records": _batch(b"first")}],
            }
        ],
    }
    second_body = {
        "acks": 1,
        "timeout_ms": 30_000,
        "topics": [
            {"name": "ordered", "partitions": [{"partition": 0, "records": _batch(b"second")}]}
        ],
    }
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path / "data") as running:
            async with Admin(bootstrap=running.bootstrap) as admin:
                await admin.create_topic("ordered", 1)
            host, port = running.bootstrap.rsplit(":", 1)
            conn = await Connection.open(host, int(port), client_id="pacing-test")
            try:
                first = await conn.request(apis_data.PRODUCE, first_body)
                second = await conn.request(apis_data.PRODUCE, second_body)  # pipelined
                first_answer, second_answer = await asyncio.gather(first, second)
            finally:
                conn.close()
    first_result = first_answer["topics"][0]["partitions"][-1]
    second_result = second_answer["topics"][0]["partitions"][0]
    assert (first_result["error"], second_result["error"]) == (0, 0)
    assert (first_result["base_offset"], second_result["base_offset"]) == (0, 1)


def _batch(value: bytes) -> bytes:
    return build_batch([(None, value, (), int(time.time() * 1000))])


async def test_a_paced_offset_commit_keeps_the_order_of_its_connections_requests(
    tmp_path: Path,
) -> None:
    """As for a produce: a commit of many entries gives the loop turns before its last
    one; a commit pipelined after it on its connection must still win."""

    def commit(entries: list[tuple[int, int]]) -> dict[str, Any]:
        return {
            "group_id": "ordered-group",
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "ordered",
                    "partitions": [
                        {"partition": p, "offset": o, "leader_epoch": -1, "metadata": None}
                        for p, o in entries
                    ],
                }
            ],
        }

    missing = [(i, 1) for i in range(1, ORDERED_ENTRIES)]  # no such partitions: refused
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(tmp_path / "data") as running:
            async with Admin(bootstrap=running.bootstrap) as admin:
                await admin.create_topic("ordered", 1)
            host, port = running.bootstrap.rsplit(":", 1)
            conn = await Connection.open(host, int(port), client_id="pacing-test")
            try:
                first = await conn.request(apis_groups.OFFSET_COMMIT, commit([*missing, (0, 5)]))
                second = await conn.request(apis_groups.OFFSET_COMMIT, commit([(0, 10)]))
                answers = await asyncio.gather(first, second)
                fetched = await conn.call(
                    apis_groups.OFFSET_FETCH,
                    {
                        "group_id": "ordered-group",
                        "topics": [{"name": "ordered", "partitions": [0]}],
                    },
                )
            finally:
                conn.close()
    assert [a["topics"][0]["partitions"][-1]["error"] for a in answers] == [0, 0]
    assert fetched["topics"][0]["partitions"][0]["offset"] == 10
