"""Client quotas end to end: real clients against a real ``mq serve`` process.

The observed rates are measured by the clients over 10 s and must stay within
±20 % of the quota, with no error, no retry, no reconnection and no breaker
failure: the broker throttles (``throttle_time_ms``), the client waits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from broker_process import BrokerProcess
from click.testing import CliRunner
from mq_cli.main import main as cli

import mq
from mq.client.client import Client

MEASURE_S = 10.0
RATE = 256 * 1024
"""Bytes per second of the quotas under test: far below what this machine moves."""
VALUE = bytes(1000)


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("quotas") / "data", segment_bytes=16 * 1024 * 1024
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def connections(client: Client) -> list[mq.client.connection.Connection]:
    return list(client._conns.values())


def breaker_failures(client: Client) -> int:
    return sum(b.failures for b in client._breakers.values())


async def set_quota(bootstrap: str, entity: mq.QuotaEntity, **values: int) -> None:
    async with mq.Admin(bootstrap) as admin:
        await admin.alter_client_quotas(entity, values)


async def test_a_produce_quota_holds_the_rate_without_errors_or_retries(
    quota_broker: BrokerProcess,
) -> None:
    bootstrap = quota_broker.bootstrap
    async with mq.Admin(bootstrap) as admin:
        await admin.create_topic("q-produce", partitions=1, replication_factor=1)
    await set_quota(bootstrap, mq.QuotaEntity(client_id="tenant-p"), producer_byte_rate=RATE)
    async with mq.Producer(bootstrap, client_id="tenant-p", acks=1, retries=0) as producer:
        await producer.send_and_wait("q-produce", VALUE)  # connected, metadata known
        conns = {id(c) for c in connections(producer._client)}
        acked = 0
        started = time.monotonic()
        pending: list[mq.RecordFuture] = []
        while time.monotonic() - started < MEASURE_S:
            pending.append(await producer.send("q-produce", VALUE))
            if len(pending) >= 256:
                for future in pending[:128]:
                    await future  # raises if the broker failed it (no retries)
                    acked += len(VALUE)
                del pending[:128]
        elapsed = time.monotonic() - started
        rate = acked / elapsed
        throttled = sum(c.throttled_ms for c in connections(producer._client))
        assert {id(c) for c in connections(producer._client)} == conns  # no reconnection
        assert breaker_failures(producer._client) == 0
        for future in pending:
            await future
    assert throttled > 0
    assert 0.8 * RATE <= rate <= 1.2 * RATE, f"{rate:.0f} B/s against a quota of {RATE}"


async def test_a_fetch_quota_holds_the_rate(quota_broker: BrokerProcess) -> None:
    bootstrap = quota_broker.bootstrap
    async with mq.Admin(bootstrap) as admin:
        await admin.create_topic("q-fetch", partitions=1, replication_factor=1)
    total = int(RATE * MEASURE_S * 2)
    async with mq.Producer(bootstrap, acks=1) as producer:
        sent = await producer.send_many("q-fetch", [VALUE] * (total // len(VALUE)), partition=0)
        await sent
    await set_quota(bootstrap, mq.QuotaEntity(client_id="tenant-f"), consumer_byte_rate=RATE)
    tp = mq.TopicPartition("q-fetch", 0)
    async with mq.Consumer(
        bootstrap=bootstrap,
        client_id="tenant-f",
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=64 * 1024,
    ) as consumer:
        consumer.assign([tp])
        await consumer.getmany(timeout_ms=10_000, max_records=1)  # connected and reading
        conns = {id(c) for c in connections(consumer._client)}
        got = 0
        started = time.monotonic()
        while time.monotonic() - started < MEASURE_S:
            batch = await consumer.getmany(timeout_ms=200)
            got += sum(len(r.value or b"") for records in batch.values() for r in records)
        rate = got / (time.monotonic() - started)
        throttled = sum(c.throttled_ms for c in connections(consumer._client))
        assert {id(c) for c in connections(consumer._client)} == conns
        assert breaker_failures(consumer._client) == 0
    assert throttled > 0
    assert 0.8 * RATE <= rate <= 1.2 * RATE, f"{rate:.0f} B/s against a quota of {RATE}"


async def test_a_quota_change_applies_within_a_second(quota_broker: BrokerProcess) -> None:
    bootstrap = quota_broker.bootstrap
    async with mq.Admin(bootstrap) as admin:
        await admin.create_topic("q-change", partitions=1, replication_factor=1)
    async with mq.Producer(bootstrap, client_id="tenant-c", acks=1, retries=0) as producer:
        await producer.send_and_wait("q-change", VALUE)
        changed_at = time.monotonic()
        await set_quota(bootstrap, mq.QuotaEntity(client_id="tenant-c"), producer_byte_rate=1_000)
        first_throttle = None
        while time.monotonic() - changed_at < 5:
            await producer.send_and_wait("q-change", bytes(5_000))
            if sum(c.throttled_ms for c in connections(producer._client)):
                first_throttle = time.monotonic()
                break
        assert first_throttle is not None
        assert first_throttle - changed_at < 1.0
        # removed: the client is served at full speed again within a second
        async with mq.Admin(bootstrap) as admin:
            await admin.alter_client_quotas(
                mq.QuotaEntity(client_id="tenant-c"), remove=["producer_byte_rate"]
            )
        await asyncio.sleep(
            max(
                0.0,
                max(c._throttled_until for c in connections(producer._client))
                - asyncio.get_running_loop().time(),
            )
        )
        before = sum(c.throttled_ms for c in connections(producer._client))
        for _ in range(20):
            await producer.send_and_wait("q-change", bytes(5_000))
        assert sum(c.throttled_ms for c in connections(producer._client)) == before


async def test_a_request_percentage_quota_throttles_busy_clients(
    quota_broker: BrokerProcess,
) -> None:
    bootstrap = quota_broker.bootstrap
    await set_quota(bootstrap, mq.QuotaEntity(client_id="tenant-r"), request_percentage=1)
    client = Client(bootstrap, client_id="tenant-r")
    await client.start()
    try:
        from mq.wire.apis_core import METADATA

        started = time.monotonic()
        calls = 0
        while time.monotonic() - started < 3:
            await client.call_any(METADATA, {"topics": None})
            calls += 1
        throttled = sum(c.throttled_ms for c in connections(client))
        assert breaker_failures(client) == 0
    finally:
        await client.close()
    assert throttled > 0


def test_the_cli_sets_describes_and_removes_quotas(quota_broker: BrokerProcess) -> None:
    runner = CliRunner()
    bootstrap = ["--bootstrap", quota_broker.bootstrap]
    result = runner.invoke(
        cli,
        [
            "quota",
            "set",
            "--user",
            "alice",
            "--default-client-id",
            "--produce-bytes-per-sec",
            "1000000",
            "--request-percentage",
            "20",
            *bootstrap,
        ],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["quota", "describe", "--user", "alice", *bootstrap])
    assert result.exit_code == 0, result.output
    assert "user=alice,client-id=<default>" in result.output
    assert "producer_byte_rate" in result.output
    assert "1000000" in result.output
    result = runner.invoke(
        cli,
        [
            "quota",
            "remove",
            "--user",
            "alice",
            "--default-client-id",
            "--request-percentage",
            *bootstrap,
        ],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(cli, ["quota", "describe", *bootstrap])
    assert "request_percentage" not in result.output.split("alice")[-1].split("\n")[0]
    result = runner.invoke(
        cli, ["quota", "set", "--user", "bob", "--request-percentage", "300", *bootstrap]
    )
    assert result.exit_code != 0
    result = runner.invoke(cli, ["quota", "set", "--produce-bytes-per-sec", "5", *bootstrap])
    assert result.exit_code != 0


async def test_bad_quotas_are_refused_with_a_clear_error(quota_broker: BrokerProcess) -> None:
    async with mq.Admin(quota_broker.bootstrap) as admin:
        with pytest.raises(mq.MQError, match="unknown quota"):
            await admin.alter_client_quotas(mq.QuotaEntity(user="x"), {"bogus_rate": 5})
        with pytest.raises(mq.MQError, match="at most 100"):
            await admin.alter_client_quotas(mq.QuotaEntity(user="x"), {"request_percentage": 101})
        await admin.alter_client_quotas(
            mq.QuotaEntity(default_user=True), {"consumer_byte_rate": 10**9}, validate_only=True
        )
        assert not [q for q in await admin.describe_client_quotas() if q.entity.default_user]
