"""The client library against a real broker process (see conftest.py).

Every wait is bounded: ``asyncio.timeout`` around each test body's waits, and
consumers read until they have what was produced or a deadline passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from typing import Any, Literal

import pytest
from broker_process import BrokerProcess
from client_helpers import admin, consume

import mq
from mq import Consumer, Producer, TopicPartition
from mq.client.client import Client
from mq.client.connection import Connection
from mq.client.partitioner import partition_for_key
from mq.errors import (
    InvalidRecordError,
    MQError,
    NetworkError,
    OutOfOrderSequenceError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from mq.records.batch import iter_batches
from mq.wire.apis_core import API_VERSIONS, METADATA, api_versions_body
from mq.wire.apis_data import FETCH
from mq.wire.frames import FrameDecoder
from mq.wire.messages import decode_request, encode_response, unpack_request

TEST_TIMEOUT_S = 30


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_round_trip_for_every_acks_level(bootstrap: str, acks: Literal[0, 1, "all"]) -> None:
    topic = f"round-trip-{acks}"
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Producer(bootstrap, acks=acks, linger_ms=2) as producer:
            futures = [
                await producer.send(
                    topic, b"value-%d" % i, key=b"key-%d" % i, headers=[("n", b"%d" % i)]
                )
                for i in range(100)
            ]
            await producer.flush()
            metas = [await f for f in futures]
        assert all(m.topic == topic and m.partition == 0 for m in metas)
        if acks == 0:
            assert {m.offset for m in metas} == {-1}
        else:
            assert [m.offset for m in metas] == list(range(100))
        records = (await consume(bootstrap, [TopicPartition(topic, 0)], 100))[
            TopicPartition(topic, 0)
        ]
    assert [(r.key, r.value, r.headers) for r in records] == [
        (b"key-%d" % i, b"value-%d" % i, (("n", b"%d" % i),)) for i in range(100)
    ]
    assert [r.offset for r in records] == list(range(100))
    assert [r.timestamp for r in records] == [m.timestamp for m in metas]


async def test_send_and_wait_and_record_future_protocol(bootstrap: str) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S), Producer(bootstrap, linger_ms=1) as producer:
        first = await producer.send_and_wait("futures", b"a")
        futures = [await producer.send("futures", b"%d" % i) for i in range(10)]
        assert all(asyncio.isfuture(f) for f in futures)
        gathered = await asyncio.gather(*futures)
        assert [m.offset for m in gathered] == list(range(first.offset + 1, first.offset + 11))
        assert futures[0].done()
        assert futures[0].result() == gathered[0]
        called: list[mq.RecordMetadata] = []
        late = await producer.send("futures", b"late")
        late.add_done_callback(lambda f: called.append(f.result()))
        await asyncio.wait_for(late, 5)
        await asyncio.sleep(0)
        assert called == [late.result()]


async def test_records_sent_in_one_loop_turn_go_in_one_batch(bootstrap: str) -> None:
    # linger_ms=0 does not send the first record of a burst alone: the sender runs
    # when the application yields (or when a batch is full)
    topic = "one-turn"
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with admin(bootstrap) as a:
            await a.create_topic(topic, partitions=1)
        async with Producer(bootstrap, linger_ms=0, batch_size=1024) as producer:
            for burst in (5, 3, 30):  # 30 of 100 B: more than a batch holds
                values = [(b"%02d-%d" % (burst, i)).ljust(100, b".") for i in range(burst)]
                sent = [await producer.send(topic, value) for value in values]
                await asyncio.gather(*sent)
        client = Client(bootstrap)
        await client.start()
        try:
            part = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
            body = {
                "max_wait_ms": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [{**part, "current_leader_epoch": -1}]}],
            }
            response = await client.call_any(FETCH, body)
        finally:
            await client.close()
    records = response["topics"][0]["partitions"][0]["records"]
    counts = [header.records_count for header in iter_batches(records)]
    assert counts[:2] == [5, 3]
    assert sum(counts[2:]) == 30
    assert len(counts) > 3  # the 30 went in several full batches


async def test_keyed_records_land_on_their_partition_in_order(bootstrap: str) -> None:
    topic = "keyed"
    keys = [b"user-%d" % i for i in range(12)]
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with admin(bootstrap) as a:
            await a.create_topic(topic, partitions=3)
        async with Producer(bootstrap, linger_ms=2) as producer:
            futures = [
                await producer.send(topic, b"%d" % n, key=key) for n in range(40) for key in keys
            ]
            metas = [await f for f in futures]
        for meta, future_key in zip(metas, [key for _ in range(40) for key in keys], strict=True):
            assert meta.partition == partition_for_key(future_key, 3)
        assert {m.partition for m in metas} == {0, 1, 2}
        tps = [TopicPartition(topic, p) for p in range(3)]
        got = await consume(bootstrap, tps, len(futures))
    seen: dict[bytes, list[int]] = defaultdict(list)
    for tp, records in got.items():
        for record in records:
            assert record.key is not None
            assert tp.partition == partition_for_key(record.key, 3)
            seen[record.key].append(int(record.value or b"-1"))
    assert seen == {key: list(range(40)) for key in keys}


async def test_ten_thousand_records_over_three_partitions(bootstrap: str) -> None:
    topic = "ten-thousand"
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with admin(bootstrap) as a:
            await a.create_topic(topic, partitions=3)
            # keyless records go to partitions with a leader: wait until all three have one
            for _ in range(200):  # bounded: 10 s
                if all(p.leader >= 0 for p in (await a.describe_topic(topic)).partitions):
                    break
                await asyncio.sleep(0.05)
        sent: dict[int, list[bytes]] = defaultdict(list)
        async with Producer(bootstrap, acks=1) as producer:
            futures = [await producer.send(topic, b"m%05d" % i) for i in range(10_000)]
            await producer.flush()
            for i, future in enumerate(futures):
                sent[future.result().partition].append(b"m%05d" % i)
        assert len(sent) == 3, "sticky partitioning should spread keyless records"
        got = await consume(bootstrap, [TopicPartition(topic, p) for p in range(3)], 10_000)
    for partition, values in sent.items():
        records = got[TopicPartition(topic, partition)]
        assert [r.value for r in records] == values
        assert [r.offset for r in records] == list(range(len(values)))


async def test_compression_codecs_round_trip(bootstrap: str) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        for codec in ("gzip", "snappy", "lz4", "zstd"):
            topic = f"codec-{codec}"
            async with Producer(bootstrap, compression_type=codec) as producer:
                for i in range(300):
                    await producer.send(topic, b"compressible %d " % i * 20)
                await producer.flush()
            got = await consume(bootstrap, [TopicPartition(topic, 0)], 300)
            values = [r.value for r in got[TopicPartition(topic, 0)]]
            assert values == [b"compressible %d " % i * 20 for i in range(300)], codec


# -- positions -------------------------------------------------------------------------------


async def test_seek_positions_and_offsets_for_times(bootstrap: str) -> None:
    topic = "seeking"
    tp = TopicPartition(topic, 0)
    base = 1_700_000_000_000
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Producer(bootstrap) as producer:
            for i in range(50):
                await producer.send(topic, b"%d" % i, timestamp_ms=base + i * 1000)
            await producer.flush()
        async with Consumer(bootstrap=bootstrap, auto_offset_reset="latest") as consumer:
            consumer.assign([tp])
            assert await consumer.position(tp) == 50
            assert await consumer.getmany(timeout_ms=100) == {}
            consumer.seek(tp, 10)
            assert (await consumer.getone()).value == b"10"
            assert await consumer.position(tp) == 11
            found = await consumer.offsets_for_times({tp: base + 20_500})
            assert found[tp] is not None
            assert (found[tp].offset, found[tp].timestamp) == (21, base + 21_000)
            assert (await consumer.offsets_for_times({tp: base + 10**9}))[tp] is None
            consumer.seek_to_beginning(tp)
            got = await consumer.getmany(tp, timeout_ms=2000, max_records=7)
            assert [r.offset for r in got[tp]] == list(range(7))
            consumer.seek_to_end(tp)
            assert await consumer.position(tp) == 50
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 50}


async def test_async_iteration_and_out_of_range_reset(bootstrap: str) -> None:
    topic = "iterate"
    tp = TopicPartition(topic, 0)
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Producer(bootstrap, linger_ms=0) as producer:
            for i in range(20):
                await producer.send_and_wait(topic, b"%d" % i)  # one batch each
        async with admin(bootstrap) as a:
            assert await a.delete_records({tp: 5}) == {tp: 5}
        async with Consumer(
            bootstrap=bootstrap, auto_offset_reset="earliest", max_partition_fetch_bytes=10
        ) as consumer:  # one batch per fetch, which must be consumed before the next
            consumer.assign([tp])
            consumer.seek(tp, 1)  # below the log start now: reset to earliest (5)
            values = []
            async for record in consumer:
                values.append(int(record.value or b"-1"))
                if len(values) == 15:
                    break
                await asyncio.sleep(0.01)  # processing: the fetcher looks before we are done
    assert values == list(range(5, 20))


# -- admin -------------------------------------------------------------------------------------


async def test_admin_topics_and_configs(bootstrap: str) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S), admin(bootstrap) as a:
        await a.create_topic("admin-t", partitions=4, configs={"retention.ms": "3600000"})
        with pytest.raises(TopicAlreadyExistsError):
            await a.create_topic("admin-t", partitions=1)
        # exist_ok, as Kafka's --if-not-exists: no error, the existing topic unchanged
        assert not await a.create_topic("admin-t", partitions=1, exist_ok=True)
        assert await a.create_topic("admin-t-new", partitions=1, exist_ok=True)
        await a.delete_topic("admin-t-new")
        assert "admin-t" in await a.list_topics()
        described = await a.describe_topic("admin-t")
        assert [p.partition for p in described.partitions] == [0, 1, 2, 3]
        assert all(p.leader >= 0 and p.isr == p.replicas for p in described.partitions)
        assert described.configs["retention.ms"] == "3600000"
        await a.alter_configs("admin-t", {"retention.ms": None, "segment.bytes": "2097152"})
        configs = {e["name"]: e for e in await a.describe_configs("admin-t")}
        assert configs["retention.ms"]["is_default"]
        assert configs["segment.bytes"]["value"] == "2097152"
        tps = await a.topic_partitions("admin-t")
        assert await a.list_offsets(tps, "latest") == dict.fromkeys(tps, 0)
        await a.delete_topic("admin-t")
        assert "admin-t" not in await a.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            await a.delete_topic("admin-t")
        with pytest.raises(UnknownTopicOrPartitionError):
            await a.describe_topic("admin-t")


# -- the sync wrapper ------------------------------------------------------------------------


def test_sync_wrappers(bootstrap: str) -> None:
    with mq.SyncAdmin(bootstrap) as a:
        assert a.create_topic("sync-t", partitions=2)
        assert not a.create_topic("sync-t", partitions=5, exist_ok=True)
        assert a.describe_topic("sync-t").partitions[1].partition == 1
    with mq.SyncProducer(bootstrap, linger_ms=1) as producer:
        first = producer.send_and_wait("sync-t", b"first", partition=0)
        future = producer.send("sync-t", b"second", partition=0)
        metas = producer.send_many(
            [{"topic": "sync-t", "value": b"%d" % i, "partition": 1} for i in range(100)],
            timeout_s=10,
        )
        assert future.result(10).offset == first.offset + 1
        assert [m.offset for m in metas] == list(range(100))
    with mq.SyncConsumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("sync-t", 0), TopicPartition("sync-t", 1)])
        got: dict[TopicPartition, list[bytes | None]] = defaultdict(list)
        deadline = time.monotonic() + 10
        while sum(map(len, got.values())) < 102 and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp].extend(r.value for r in records)
        assert got[TopicPartition("sync-t", 0)] == [b"first", b"second"]
        assert got[TopicPartition("sync-t", 1)] == [b"%d" % i for i in range(100)]
        assert consumer.position(TopicPartition("sync-t", 1)) == 100


# -- failures ----------------------------------------------------------------------------------


async def test_producer_survives_a_broker_kill_and_restart(own_broker: BrokerProcess) -> None:
    """acks=all, default flush: every acknowledged and every retried record is there."""
    topic = "survivor"
    total = 3_000
    async with asyncio.timeout(45):
        async with Producer(
            own_broker.bootstrap, acks="all", linger_ms=2, retry_backoff_ms=50
        ) as producer:
            futures = []
            for i in range(total):
                futures.append(await producer.send(topic, b"r%05d" % i))
                if i == total // 3:
                    await producer.flush()
                    own_broker.kill()  # SIGKILL: in-flight requests die with it
                if i % 200 == 0:
                    await asyncio.sleep(0.005)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(own_broker.start)  # same data directory, same port
            metas = await asyncio.gather(*futures)
        assert all(m.offset >= 0 for m in metas)
        got = await consume(own_broker.bootstrap, [TopicPartition(topic, 0)], total)
    values = [r.value for r in got[TopicPartition(topic, 0)]]
    assert set(values) == {b"r%05d" % i for i in range(total)}  # nothing lost
    assert values == sorted(values)  # order kept (a retried batch may repeat: no idempotence)


async def test_connection_fails_pending_requests_when_closed(bootstrap: str) -> None:
    host, port = bootstrap.split(":")
    async with asyncio.timeout(TEST_TIMEOUT_S):
        conn = await Connection.open(host, int(port))
        assert conn.version_for(API_VERSIONS) == 0
        futures = [await conn.request(METADATA, {"topics": []}) for _ in range(20)]
        conn.close()
        for future in futures:
            with contextlib.suppress(NetworkError):
                await future  # answered before the close, or failed with NetworkError
        with pytest.raises(NetworkError):
            await conn.request(METADATA, {"topics": []})


async def test_request_timeout_against_a_silent_server() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.read()
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            with pytest.raises(NetworkError, match="cannot connect"):
                await Connection.open("127.0.0.1", port, connect_timeout_s=0.3)
            client = Client(f"127.0.0.1:{port}", connect_timeout_s=0.2, breaker_threshold=2)
            for _ in range(2):
                with pytest.raises(NetworkError):
                    await client.start()
            started = time.monotonic()
            with pytest.raises(NetworkError, match="no broker answered"):
                await client.start()  # the breaker is open: no connect attempt, no wait
            assert time.monotonic() - started < 0.15
            await client.close()
    finally:
        server.close()
        await server.wait_closed()


async def test_unreachable_bootstrap_fails_with_network_error() -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        with pytest.raises(NetworkError):
            async with Producer("127.0.0.1:1"):
                pass


async def test_unknown_api_version_is_refused(bootstrap: str) -> None:
    host, port = bootstrap.split(":")
    async with asyncio.timeout(TEST_TIMEOUT_S):
        conn = await Connection.open(host, int(port))
        try:
            with pytest.raises(UnsupportedVersionError):
                await conn.call(METADATA, {"topics": []}, version=1)
        finally:
            conn.close()
            await conn.wait_closed()


async def test_send_to_unknown_partition_and_closed_producer(bootstrap: str) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        producer = Producer(bootstrap)
        with pytest.raises(MQError):
            await producer.send("never-started", b"x")
        async with producer:
            with pytest.raises(UnknownTopicOrPartitionError):
                await producer.send("closed-t", b"x", partition=7)
        with pytest.raises(MQError, match="not running"):
            await producer.send("closed-t", b"x")
        async with Producer(bootstrap, delivery_timeout_ms=1, linger_ms=50) as quick:
            future = await quick.send("expiring", b"x")
            with pytest.raises(RequestTimedOutError, match="expired"):
                await future


async def _poll_until_raised(consumer: Consumer) -> None:
    for _ in range(20):  # bounded: the metadata refresh after subscribing tells
        await consumer.getmany(timeout_ms=500)


@pytest.mark.parametrize("group", [None, "unknown-topic-readers"])
async def test_a_consumer_of_a_topic_that_does_not_exist_is_told(
    bootstrap: str, group: str | None
) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Consumer("no-such-topic", bootstrap=bootstrap, group_id=group) as consumer:
            with pytest.raises(
                UnknownTopicOrPartitionError, match="'no-such-topic' does not exist"
            ):
                await _poll_until_raised(consumer)
        async with admin(bootstrap) as a:
            assert "no-such-topic" not in await a.list_topics()


async def test_a_consumer_may_ask_the_broker_to_create_its_topic(bootstrap: str) -> None:
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with Consumer(
            "made-by-consumer", bootstrap=bootstrap, allow_auto_topic_creation=True
        ) as consumer:
            for _ in range(4):
                assert await consumer.getmany(timeout_ms=500) == {}
        async with admin(bootstrap) as a:
            assert "made-by-consumer" in await a.list_topics()  # the broker's auto-creation is on


# -- idempotence -------------------------------------------------------------------------------


async def test_idempotent_producer_retries_without_duplicates(own_broker: BrokerProcess) -> None:
    topic = "exactly-once"
    total = 2_000
    async with asyncio.timeout(TEST_TIMEOUT_S):
        producer = Producer(own_broker.bootstrap, enable_idempotence=True, retry_backoff_ms=50)
        try:
            await producer.start()
        except UnsupportedVersionError as exc:
            pytest.skip(f"the broker does not serve init_producer_id yet: {exc}")
        try:
            assert producer.producer_id >= 0
            futures = []
            for i in range(total):
                futures.append(await producer.send(topic, b"i%05d" % i))
                if i == total // 2:
                    await asyncio.sleep(0.01)  # let some requests go out
                    own_broker.kill()  # responses lost: the batches are sent again
                    await asyncio.to_thread(own_broker.start)
            metas = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        assert sorted(m.offset for m in metas) == list(range(total))
        got = await consume(own_broker.bootstrap, [TopicPartition(topic, 0)], total)
    assert [r.value for r in got[TopicPartition(topic, 0)]] == [b"i%05d" % i for i in range(total)]


class ScriptedBroker:
    """A fake broker on the real wire protocol: metadata, init_producer_id and a produce
    that checks idempotence sequences as a broker must, failing the batches it is told to."""

    def __init__(self, fail_batches: set[int]) -> None:
        self.fail_batches = fail_batches  # indexes of produced batches to refuse (INVALID_RECORD)
        self.batches_seen = 0
        self.epochs: list[tuple[int, int]] = []  # init_producer_id requests (id, epoch)
        self.written: list[tuple[int, int, bytes]] = []  # (epoch, sequence, batch)
        self.expected: tuple[int, int] = (-1, 0)  # (epoch, next sequence)
        self.next_offset = 0
        self.port = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(decode=unpack_request)
        try:
            while data := await reader.read(65536):
                decoder.feed(data)
                for envelope in decoder.frames():
                    request = decode_request(envelope)
                    reply = getattr(self, request.api.name)(request.body)
                    writer.write(encode_response(request.correlation_id, 0, reply))
        finally:
            writer.close()

    def api_versions(self, body: object) -> object:
        return api_versions_body()

    def metadata(self, body: object) -> object:
        part = {"partition": 0, "error": 0, "leader": 0, "leader_epoch": 0, "replicas": [0],
                "isr": [0]}  # fmt: skip
        return {
            "cluster_id": "fake",
            "controller_id": 0,
            "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": self.port}],
            "topics": [{"name": "idem", "error": 0, "partitions": [part]}],
        }

    def init_producer_id(self, body: Any) -> object:
        self.epochs.append((body["producer_id"], body["producer_epoch"]))
        return {"producer_id": 77, "producer_epoch": body["producer_epoch"] + 1}

    def produce(self, body: Any) -> object:
        data = body["topics"][0]["partitions"][0]["records"]
        error, first_offset = 0, self.next_offset
        for header in iter_batches(data):
            batch = bytes(data[: header.size])
            data = data[header.size :]
            index, self.batches_seen = self.batches_seen, self.batches_seen + 1
            epoch, expected = self.expected
            in_order = header.base_sequence == (expected if header.producer_epoch == epoch else 0)
            if index in self.fail_batches or error:
                error = error or 87
            elif not in_order:
                error = OutOfOrderSequenceError.code
            else:
                self.written.append((header.producer_epoch, header.base_sequence, batch))
                self.next_offset += header.records_count
                self.expected = (header.producer_epoch, header.base_sequence + header.records_count)
        result = {"partition": 0, "error": error, "message": None, "base_offset": first_offset}
        return {"topics": [{"name": "idem", "partitions": [result]}]}


async def test_idempotent_producer_starts_a_new_epoch_after_a_failed_batch() -> None:
    fake = ScriptedBroker(fail_batches={1})
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    fake.port = server.sockets[0].getsockname()[1]
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            async with Producer(
                f"127.0.0.1:{fake.port}", enable_idempotence=True, batch_size=200, linger_ms=0
            ) as producer:
                first = await producer.send_and_wait("idem", b"a" * 60)
                failed = await producer.send("idem", b"b" * 60)
                with pytest.raises(InvalidRecordError):
                    await failed  # refused for good: a gap in the sequence
                later = [await producer.send("idem", b"c%d" % i * 30) for i in range(10)]
                metas = await asyncio.gather(*later)
    finally:
        server.close()
        await server.wait_closed()
    assert first.offset == 0
    assert fake.epochs == [(-1, -1), (77, 0)]  # a new id, then a bump of its epoch
    epochs = [epoch for epoch, _, _ in fake.written]
    assert epochs[0] == 0
    assert set(epochs[1:]) == {1}
    assert next(seq for epoch, seq, _ in fake.written if epoch == 1) == 0
    assert len({m.offset for m in metas}) == 10
