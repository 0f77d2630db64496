"""Encryption at rest on a real broker: no known plaintext in any file of the data dir.

Records (keys, values, headers) of a topic, a consumer group's commits and a queue's
messages and settlements (its share state, dedup ids, a dead letter) go through a
real ``mq serve --encryption-key-file``; then every file under the data dir is
searched for the plaintext: none of it is there, and the consumers got it all back.
The same workload on a broker without a key file is the control: there, the
plaintext is on disk (so the search can fail). Then rotation (a new key
encrypts, the old one still decrypts) and a missing key (a clear error naming
its id, other partitions still served).
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from broker_process import BrokerProcess

from mq import Admin, Consumer, Producer, QueueClient, QueueMessage, TopicPartition
from mq.errors import EncryptionKeyNotFoundError
from mq.storage.keyfile import add_key, read_keys
from mq.storage.verify import dump_segment, partition_segments

TEST_TIMEOUT_S = 90
TOPIC = "orders"
QUEUE = "jobs"
TAG = uuid.uuid4().hex[:12].encode()
SECRETS = {
    "key": b"KEY-SECRET-" + TAG,
    "value": b"VALUE-SECRET-" + TAG,
    "header": b"HEADER-SECRET-" + TAG,
    "queue body": b"QUEUE-BODY-SECRET-" + TAG,
    "dedup id": b"DEDUP-SECRET-" + TAG,
    "nack reason": b"NACK-REASON-SECRET-" + TAG,
}
GROUP = "group-" + TAG.decode()
SERVE = [sys.executable, "-m", "mq_cli.main", "serve", "--port", "0"]
SETTINGS: dict[str, int | str] = {"offsets_partitions": 1, "share_state_partitions": 1}


def keygen(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mq_cli.main", "storage", "keygen", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


async def workload(bootstrap: str) -> None:
    """Write every kind of record with the secrets, and read them all back in clear."""
    tp = TopicPartition(TOPIC, 0)
    async with Admin(bootstrap=bootstrap) as admin:
        await admin.create_topic(TOPIC, 1)
    async with Producer(bootstrap, linger_ms=1) as producer:
        for i in range(50):
            await producer.send(
                TOPIC,
                SECRETS["value"] + b"-%d" % i,
                key=SECRETS["key"],
                headers=[("h", SECRETS["header"])],
            )
        await producer.flush()
    async with Consumer(
        bootstrap=bootstrap, group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False
    ) as consumer:
        consumer.assign([tp])
        got = []
        while len(got) < 50:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                got += records
        assert [r.value for r in got] == [SECRETS["value"] + b"-%d" % i for i in range(50)]
        assert {r.key for r in got} == {SECRETS["key"]}
        assert {tuple(r.headers) for r in got} == {(("h", SECRETS["header"]),)}
        await consumer.commit({tp: 50})
    async with Consumer(bootstrap=bootstrap, group_id=GROUP) as consumer:
        assert await consumer.committed(tp) == 50
    async with QueueClient(bootstrap=bootstrap) as q:
        await q.create_queue(QUEUE, 1, max_deliveries=1, dead_letter_queue=QUEUE + "-dlq")
        await q.send(QUEUE, SECRETS["queue body"], dedup_id=SECRETS["dedup id"].decode())
        await q.send(QUEUE, SECRETS["queue body"] + b"-2")
        received = []
        while len(received) < 2:
            received += await q.receive(QUEUE, 10, 1.0)
        assert sorted(m.body for m in received) == [
            SECRETS["queue body"],
            SECRETS["queue body"] + b"-2",
        ]
        first = next(m for m in received if m.body == SECRETS["queue body"])
        second = next(m for m in received if m is not first)
        await q.ack(first)
        await q.nack(second, error=SECRETS["nack reason"].decode())  # dead-lettered


def storage_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mq_cli.main", "storage", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def reloaded(bootstrap: str) -> None:
    """After a restart the broker's loaders read its internal topics back: the commit,
    the queue's settled messages (nothing comes again) and the dead letter."""
    async with Consumer(bootstrap=bootstrap, group_id=GROUP) as consumer:
        assert await consumer.committed(TopicPartition(TOPIC, 0)) == 50
    async with QueueClient(bootstrap=bootstrap) as q:
        assert await q.receive(QUEUE, 10, 1.0) == []
        dead: list[QueueMessage] = []
        for _ in range(20):
            dead += await q.receive(QUEUE + "-dlq", 10, 0.5)
            if dead:
                break
        assert [m.body for m in dead] == [SECRETS["queue body"] + b"-2"]
        assert SECRETS["nack reason"] in b"".join(v or b"" for _, v in dead[0].headers)


def files_holding(data_dir: Path, needle: bytes) -> list[str]:
    return sorted(
        str(p.relative_to(data_dir))
        for p in data_dir.rglob("*")
        if p.is_file() and needle in p.read_bytes()
    )


def key_ids(directory: Path) -> list[int | None]:
    ids: list[int | None] = []
    for path in partition_segments(directory):
        entries = dump_segment(path)
        ids += [e.key_id for e in entries if hasattr(e, "key_id")]
    return ids


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted", "control-plain"])
async def test_no_known_plaintext_reaches_the_disk(tmp_path: Path, encrypted: bool) -> None:
    keys = tmp_path / "keys.toml"
    settings = dict(SETTINGS)
    if encrypted:
        assert keygen(keys) == f"added key 1 to {keys}"
        settings["encryption_key_file"] = str(keys)
    broker = BrokerProcess(tmp_path / "data", settings=settings)
    broker.start()
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            await workload(broker.bootstrap)
        await asyncio.to_thread(broker.restart)
        async with asyncio.timeout(TEST_TIMEOUT_S):
            await reloaded(broker.bootstrap)
    finally:
        broker.stop()  # every segment synced and trimmed
    found = {name: files_holding(broker.data_dir, s) for name, s in SECRETS.items()}
    if encrypted:
        assert found == {name: [] for name in SECRETS}
        assert set(key_ids(broker.data_dir / f"{TOPIC}-0")) == {1}
        assert set(key_ids(broker.data_dir / "__consumer_offsets-0")) == {1}
        # the admin tools check the stored bytes with no key
        verified = storage_cli("verify", str(broker.data_dir))
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert verified.stdout.startswith("OK: ")
        segment = partition_segments(broker.data_dir / f"{TOPIC}-0")[0]
        dumped = storage_cli("dump", str(segment))
        assert "none+key1" in dumped.stdout
        assert "BAD" not in dumped.stdout
    else:  # the control: the same workload without a key leaves each secret on disk
        assert all(found.values()), found


async def test_rotation_and_a_missing_key(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    add_key(keys)
    settings = {**SETTINGS, "encryption_key_file": str(keys)}
    broker = BrokerProcess(tmp_path / "data", settings=settings)
    tp = TopicPartition(TOPIC, 0)
    broker.start()
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            async with Producer(broker.bootstrap, linger_ms=1) as producer:
                await producer.send_and_wait(TOPIC, b"under key 1", partition=0)
        add_key(keys)  # rotation: key 2 encrypts once the broker reloads the file
        os.kill(broker.pid, signal.SIGHUP)
        async with asyncio.timeout(TEST_TIMEOUT_S):
            async with Producer(broker.bootstrap, linger_ms=1) as producer:
                # the signal is handled between two of the broker's loop turns: wait for it
                for _ in range(100):
                    await producer.send_and_wait(TOPIC, b"under key 2", partition=0)
                    if key_ids(broker.data_dir / f"{TOPIC}-0")[-1] == 2:
                        break
                    await asyncio.sleep(0.2)
                await producer.send_and_wait("other", b"elsewhere", partition=0)
            values = await read_all(broker.bootstrap, tp)
            assert values[0] == b"under key 1"
            assert set(values[1:]) == {b"under key 2"}
        ids = key_ids(broker.data_dir / f"{TOPIC}-0")
        assert ids[0] == 1
        assert ids[-1] == 2
        assert set(ids) == {1, 2}
        await asyncio.to_thread(broker.restart)  # the restart keeps key 2 encrypting
        async with asyncio.timeout(TEST_TIMEOUT_S):
            async with Producer(broker.bootstrap, linger_ms=1) as producer:
                await producer.send_and_wait(TOPIC, b"after the restart", partition=0)
        assert key_ids(broker.data_dir / f"{TOPIC}-0")[-1] == 2
        # key 1 leaves the file: its batch fails naming it, the rest is served
        only_two = read_keys(keys)[2]
        keys.write_text(f'2 = "{base64.b64encode(only_two).decode()}"\n')
        await asyncio.to_thread(broker.restart)
        async with asyncio.timeout(TEST_TIMEOUT_S):
            with pytest.raises(EncryptionKeyNotFoundError, match=r"offset 0 of orders-0.*key id 1"):
                await read_all(broker.bootstrap, tp)
            async with Consumer(bootstrap=broker.bootstrap) as consumer:
                consumer.assign([tp])
                consumer.seek(tp, 1)
                got = await consumer.getmany(timeout_ms=5_000)
                assert got[tp]
                assert {r.value for r in got[tp]} <= {b"under key 2", b"after the restart"}
            assert await read_all(broker.bootstrap, TopicPartition("other", 0)) == [b"elsewhere"]
    finally:
        broker.stop()


async def read_all(bootstrap: str, tp: TopicPartition) -> list[bytes | None]:
    out: list[bytes | None] = []
    async with Consumer(bootstrap=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out += [r.value for r in records]
    return out


@pytest.mark.parametrize(
    ("mode", "text", "message"),
    [
        (0o644, None, "chmod 600"),
        (0o600, "1 = 'short'\n", "not base64"),
        (0o600, "", "holds no key"),
    ],
)
def test_a_broker_refuses_a_bad_key_file_at_start(
    tmp_path: Path, mode: int, text: str | None, message: str
) -> None:
    keys = tmp_path / "keys.toml"
    if text is None:
        add_key(keys)
    else:
        keys.write_text(text)
    os.chmod(keys, mode)
    done = subprocess.run(
        [*SERVE, "--data-dir", str(tmp_path / "data"), "--encryption-key-file", str(keys)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr


async def test_an_encrypted_compacted_topic_is_compacted_and_stays_encrypted(
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys.toml"
    add_key(keys)
    broker = BrokerProcess(
        tmp_path / "data",
        settings={**SETTINGS, "cleaner_backoff_ms": 100, "encryption_key_file": str(keys)},
        log_settings={"segment.bytes": 64 * 1024, "max.message.bytes": 32 * 1024},
    )
    tp = TopicPartition("table", 0)
    broker.start()
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            async with Admin(bootstrap=broker.bootstrap) as admin:
                await admin.create_topic("table", 1, configs={"cleanup.policy": "compact"})
            async with Producer(broker.bootstrap, acks="all", linger_ms=1) as producer:
                futures = [
                    await producer.send(
                        "table", SECRETS["value"] + b"%d;" % i + b"." * 100, key=b"k%d" % (i % 25)
                    )
                    for i in range(4_000)
                ]
                await asyncio.gather(*futures)
            for _ in range(150):
                values = await read_all(broker.bootstrap, tp)
                if len(values) < 1_000:
                    break
                await asyncio.sleep(0.2)
        assert len(values) < 1_000, "the cleaner did not compact the topic"
        newest = {v.split(b";")[0] for v in values[-25:] if v is not None}
        assert newest == {SECRETS["value"] + b"%d" % i for i in range(4_000 - 25, 4_000)}
    finally:
        broker.stop()
    assert files_holding(broker.data_dir, SECRETS["value"]) == []
    assert set(key_ids(broker.data_dir / "table-0")) == {1}


async def test_a_forgotten_key_file_refuses_to_start(tmp_path: Path) -> None:
    """A restart without the key file would store new batches in clear next to the
    encrypted ones: it refuses, naming the setting, unless clear storage is asked for."""
    keys = tmp_path / "keys.toml"
    add_key(keys)
    data = tmp_path / "data"
    broker = BrokerProcess(data, settings={**SETTINGS, "encryption_key_file": str(keys)})
    broker.start()
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            async with Producer(broker.bootstrap, linger_ms=1) as producer:
                await producer.send_and_wait(TOPIC, b"secret", partition=0)
    finally:
        broker.stop()
    done = await asyncio.to_thread(
        subprocess.run,
        [*SERVE, "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "encrypted at rest" in done.stderr
    assert "--encryption-key-file" in done.stderr
    assert "Traceback" not in done.stderr
    assert key_ids(data / f"{TOPIC}-0") == [1]  # nothing was written in clear
    clear = BrokerProcess(data, settings={**SETTINGS, "allow_plaintext_storage": True})
    clear.start()
    try:
        async with asyncio.timeout(TEST_TIMEOUT_S):
            async with Producer(clear.bootstrap, linger_ms=1) as producer:
                await producer.send_and_wait(TOPIC, b"in clear, as asked", partition=0)
        assert key_ids(data / f"{TOPIC}-0") == [1, None]
    finally:
        clear.stop()
    assert any("stored in clear" in line for line in clear.output)
