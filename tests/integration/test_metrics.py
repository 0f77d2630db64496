"""``/metrics`` of a real ``mq serve --http-port 0`` process, read with Prometheus's own
text parser after a known workload (issue 21).

Counters are checked against what the test produced, fetched, committed, received and
acknowledged: records in equal the records sent, bytes in equal the log's size (a fresh
topic's log holds exactly the batches produced), bytes out equal the bytes the consumer
read once, lag equals end offset minus committed offset, queue depth equals sent
minus acked. Each test uses topics of its own on the module's broker.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from prometheus_client.parser import text_string_to_metric_families

import mq

HTTP_TIMEOUT_S = 30.0
WAIT_S = 60.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    """Every sample of ``url``, parsed by ``prometheus_client.parser``: (name, labels) -> value."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=HTTP_TIMEOUT_S) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def matching(samples: Samples, name: str, **labels: str) -> list[float]:
    """Values of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return [v for (n, ls), v in samples.items() if n == name and wanted <= ls]


@pytest.fixture(scope="module")
def http_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("metrics") / "data", segment_bytes=16 << 20, http_port=0
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


async def produce(bootstrap: str, topic: str, batches: int, per_batch: int) -> None:
    async with mq.Producer(bootstrap=bootstrap, acks="all", client_id="metrics-test") as producer:
        for b in range(batches):
            sent = await producer.send_many(
                topic, [b"value %d-%d" % (b, i) for i in range(per_batch)], partition=0
            )
            await sent


def test_topic_counters_and_group_lag(http_broker: BrokerProcess) -> None:
    topic, group = unique("metered"), unique("readers")
    batches, per_batch, committed = 5, 200, 300
    total = batches * per_batch

    async def workload() -> int:
        bootstrap = http_broker.bootstrap
        async with mq.Admin(bootstrap=bootstrap) as admin:
            await admin.create_topic(
                topic, partitions=1, replication_factor=1, configs={"flush": "always"}
            )
        await produce(bootstrap, topic, batches, per_batch)
        read = 0
        async with mq.Consumer(
            topic,
            bootstrap=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        ) as consumer:
            deadline = time.monotonic() + WAIT_S
            while read < total and time.monotonic() < deadline:
                got = await consumer.getmany(timeout_ms=1000, max_records=total)
                read += sum(len(records) for records in got.values())
            await consumer.commit({mq.TopicPartition(topic, 0): committed})
        return read

    started_ms = time.time() * 1000
    assert asyncio.run(workload()) == total
    samples = scrape(http_broker.http_url)
    assert value(samples, "mq_topic_records_in_total", topic=topic) == total
    log_bytes = value(samples, "mq_log_size_bytes", topic=topic, partition="0")
    assert log_bytes > total * len(b"value 0-0")
    assert value(samples, "mq_topic_bytes_in_total", topic=topic) == log_bytes
    # every batch fetched once (the consumer never re-reads an offset it got)
    assert value(samples, "mq_topic_bytes_out_total", topic=topic) == log_bytes
    labels = {"group": group, "topic": topic, "partition": "0"}
    assert value(samples, "mq_consumer_group_lag", **labels) == total - committed
    age = value(samples, "mq_consumer_group_lag_seconds", **labels)
    assert 0 < age <= (time.time() * 1000 - started_ms) / 1000 + 1
    # the producer's client id is counted under the anonymous principal
    usage = {"principal": "User:ANONYMOUS", "client_id": "metrics-test"}
    assert value(samples, "mq_client_records_in_total", **usage) >= total
    assert value(samples, "mq_client_requests_total", **usage) >= batches
    # requests: one histogram per API, every produce counted, no error
    produced = value(samples, "mq_requests_total", api="produce", error="none")
    assert produced >= batches
    assert value(samples, "mq_request_duration_seconds_count", api="produce") >= produced
    inf = value(samples, "mq_request_duration_seconds_bucket", api="produce", le="+Inf")
    assert inf == value(samples, "mq_request_duration_seconds_count", api="produce")
    assert value(samples, "mq_is_controller") == 1
    assert value(samples, "mq_offline_partitions") == 0
    assert value(samples, "mq_partition_under_replicated", topic=topic, partition="0") == 0
    assert value(samples, "mq_connections", listener="http") >= 1
    # flush=always: each acknowledged produce was synced first (a sync may cover several)
    assert value(samples, "mq_log_flush_seconds_count") >= 1
    assert value(samples, "mq_log_flush_seconds_sum") > 0
    flushes = value(samples, "mq_log_flush_seconds_bucket", le="+Inf")
    assert flushes == value(samples, "mq_log_flush_seconds_count")


def test_caught_up_group_has_no_lag(http_broker: BrokerProcess) -> None:
    topic, group = unique("caught"), unique("all")

    async def workload() -> None:
        async with mq.Admin(bootstrap=http_broker.bootstrap) as admin:
            await admin.create_topic(topic, partitions=1, replication_factor=1)
        await produce(http_broker.bootstrap, topic, 2, 50)
        async with mq.Consumer(
            topic,
            bootstrap=http_broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        ) as consumer:
            await consumer.commit({mq.TopicPartition(topic, 0): 100})

    asyncio.run(workload())
    samples = scrape(http_broker.http_url)
    labels = {"group": group, "topic": topic, "partition": "0"}
    assert value(samples, "mq_consumer_group_lag", **labels) == 0
    assert value(samples, "mq_consumer_group_lag_seconds", **labels) == 0


def test_queue_depth_is_sent_minus_acked(http_broker: BrokerProcess) -> None:
    queue = unique("jobs")
    sent, received, acked = 40, 15, 10

    async def workload() -> None:
        async with mq.QueueClient(bootstrap=http_broker.bootstrap) as q:
            await q.create_queue(queue, partitions=1, visibility_timeout=300)
            for i in range(sent):
                await q.send(queue, b"job %d" % i)
            got: list[mq.QueueMessage] = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < received and time.monotonic() < deadline:
                got += await q.receive(queue, max_messages=received - len(got), wait=1)
            assert len(got) == received
            await q.ack(*got[:acked])

    asyncio.run(workload())
    samples = scrape(http_broker.http_url)
    labels = {"queue": queue, "group": queue}
    visible = value(samples, "mq_queue_messages", state="visible", **labels)
    in_flight = value(samples, "mq_queue_messages", state="in_flight", **labels)
    delayed = value(samples, "mq_queue_messages", state="delayed", **labels)
    assert (visible, in_flight, delayed) == (sent - received, received - acked, 0)
    assert visible + in_flight + delayed == sent - acked
    assert value(samples, "mq_queue_oldest_message_age_seconds", **labels) > 0
    assert value(samples, "mq_topic_records_in_total", topic=queue) == sent


def test_the_label_cap_folds_and_drops(tmp_path: Path) -> None:
    """With metrics_max_labelled 2, a third topic is folded into __other__ (counters)
    and left out of the gauges, both counted."""
    process = BrokerProcess(
        tmp_path / "data",
        segment_bytes=16 << 20,
        http_port=0,
        settings={"metrics_max_labelled": 2, "offsets_partitions": 1},
    )
    process.start()
    try:
        topics = [f"capped-{i}" for i in range(3)]

        async def workload() -> None:
            for topic in topics:
                await produce(process.bootstrap, topic, 1, 10)

        asyncio.run(workload())
        samples = scrape(process.http_url)
        exported = matching(samples, "mq_topic_records_in_total")
        assert len(exported) == 3  # two topics and __other__
        assert sum(exported) == 30  # nothing lost: the third topic's records are in __other__
        assert value(samples, "mq_topic_records_in_total", topic="__other__") == 10
        overflow = value(
            samples, "mq_metrics_label_overflow_total", metric="mq_topic_bytes_in_total"
        )
        assert overflow >= 1
        assert len(matching(samples, "mq_log_size_bytes")) == 2
        dropped = value(samples, "mq_metrics_series_dropped", metric="mq_log_size_bytes")
        assert dropped >= 2  # three user topics and __consumer_offsets: two left out
    finally:
        process.stop()


def test_dead_letters_are_counted(http_broker: BrokerProcess) -> None:
    queue = unique("poison")
    rejected = 3

    async def workload() -> None:
        async with mq.QueueClient(bootstrap=http_broker.bootstrap) as q:
            await q.create_queue(queue, partitions=1, dead_letter_queue=f"{queue}-dlq")
            for i in range(rejected + 2):
                await q.send(queue, b"poison %d" % i)
            got: list[mq.QueueMessage] = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < rejected and time.monotonic() < deadline:
                got += await q.receive(queue, max_messages=rejected - len(got), wait=1)
            await q.reject(*got)

    asyncio.run(workload())
    labels = {"queue": queue, "group": queue}
    deadline = time.monotonic() + WAIT_S  # the move to the dead-letter queue is in the background
    while time.monotonic() < deadline:
        samples = scrape(http_broker.http_url)
        if matching(samples, "mq_queue_dead_lettered_total", **labels) == [rejected]:
            break
        time.sleep(0.2)
    assert value(samples, "mq_queue_dead_lettered_total", **labels) == rejected
    dlq = matching(samples, "mq_log_size_bytes", topic=f"{queue}-dlq")
    assert len(dlq) == 1
    assert dlq[0] > 0  # the copies are there (appended by the broker, not a producer)
    assert value(samples, "mq_queue_messages", state="visible", **labels) == 2
    assert value(samples, "mq_queue_messages", state="in_flight", **labels) == 0
