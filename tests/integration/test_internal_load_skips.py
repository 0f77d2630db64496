"""A record of ``__consumer_offsets`` that cannot be decoded costs that record only.

Issue 17, point 7: one undecodable record in an offsets partition made the
loader give up, so after the next restart every group hashing there got
NOT_COORDINATOR for good. Here a real broker commits offsets, stops, gets a
record with a key that is not msgpack and a batch whose records do not parse
(CRC-valid, as an older broker could have stored it) written into its offsets
partition, then a valid commit after them; restarted, it serves the group's
offsets, both the earlier and the later ones, and logs each skipped offset.
"""

from __future__ import annotations

import struct
import time
import zlib

import msgpack
from broker_process import BrokerProcess
from test_broker_protocol import Raw, create

from mq.broker.catalog import OFFSETS_TOPIC
from mq.broker.config import BrokerConfig
from mq.errors import CoordinatorLoadInProgressError, NotCoordinatorError
from mq.records import batch as fmt
from mq.records.records import build_batch
from mq.storage.config import LogConfig
from mq.storage.log import Log
from mq.wire import apis_groups

GROUP = "survivors"
LOAD_DEADLINE_S = 15.0


def _commit(raw: Raw, partition: int, offset: int) -> None:
    body = {
        "group_id": GROUP,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": "orders", "partitions": [{"partition": partition, "offset": offset}]}],
    }
    result = raw.call(apis_groups.OFFSET_COMMIT, body)
    assert result["topics"][0]["partitions"][0]["error"] == 0, result


def _fetch_when_loaded(bootstrap: str) -> dict[int, int]:
    """The group's committed offsets, once the coordinator has loaded them (bounded wait)."""
    deadline = time.monotonic() + LOAD_DEADLINE_S
    with Raw(bootstrap) as raw:
        while True:
            try:
                fetched = raw.call(apis_groups.OFFSET_FETCH, {"group_id": GROUP})
                break
            except (CoordinatorLoadInProgressError, NotCoordinatorError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    return {p["partition"]: p["offset"] for t in fetched["topics"] for p in t["partitions"]}


def _unparseable(base_offset: int) -> bytes:
    """A CRC-valid batch whose one record has key length -3."""
    good = build_batch([(b"k", b"v", [], int(time.time() * 1000))], base_offset=base_offset)
    out = bytearray(good)
    key_length_at = fmt.RECORDS_AT + 4  # record length, attributes, two deltas
    assert out[key_length_at] == 2  # zigzag(1)
    out[key_length_at] = 5  # zigzag(-3)
    struct.pack_into(">I", out, fmt.CRC_AT, fmt.compute_crc(out))
    return bytes(out)


def test_an_undecodable_offsets_record_is_skipped_after_a_restart(
    own_broker: BrokerProcess,
) -> None:
    with Raw(own_broker.bootstrap) as raw:
        create(raw, "orders", partitions=2)
        _commit(raw, 0, 42)
    own_broker.stop()

    index = zlib.crc32(GROUP.encode()) % BrokerConfig().offsets_partitions
    log = Log.open(own_broker.data_dir / f"{OFFSETS_TOPIC}-{index}", LogConfig())
    try:
        now = int(time.time() * 1000)
        bad_key = log.next_offset
        log.append_replicated(build_batch([(b"\xc1", b"\x00", [], now)], base_offset=bad_key))
        bad_batch = log.next_offset
        log.append_replicated(_unparseable(bad_batch))
        later = msgpack.packb([0, GROUP, "orders", 1]), msgpack.packb([7, -1, None, now])
        log.append_replicated(build_batch([(*later, [], now)], base_offset=log.next_offset))
        log.flush()
    finally:
        log.close()

    own_broker.start()
    assert _fetch_when_loaded(own_broker.bootstrap) == {0: 42, 1: 7}
    output = "".join(own_broker.output)
    name = f"{OFFSETS_TOPIC}-{index}"
    assert f"{name}: skipping the record(s) at offset {bad_key} while loading" in output
    assert f"{name}: skipping the record(s) at offset {bad_batch} while loading" in output
    assert "negative length -3" in output
