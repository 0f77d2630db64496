"""The fetcher's buffers: raw batches in, records out lazily, positions, stale responses."""

from __future__ import annotations

from typing import Any

import pytest

from mq.client.client import Client
from mq.client.fetch_buffer import walk as _walk
from mq.client.fetcher import CORRUPT_RETRY_MAX, Fetcher
from mq.client.types import TopicPartition
from mq.errors import CorruptDataError, CorruptRecordError, OffsetOutOfRangeError
from mq.records.batch import CONTROL_BIT, parse_header, set_base_offset, write_header
from mq.records.records import build_batch

TP = TopicPartition("t", 0)


def batch(base: int, count: int, *, control: bool = False) -> bytes:
    data = bytearray(
        build_batch([(None, b"%d" % (base + i), [], 5) for i in range(count)], base_offset=base)
    )
    if control:
        header = parse_header(data)
        write_header(data, header._replace(attributes=header.attributes | CONTROL_BIT))
    set_base_offset(data, 0, base)
    return bytes(data)


def fetcher_at(position: int | None, reset: str = "earliest") -> Fetcher:
    fetcher = Fetcher(Client("127.0.0.1:1"), auto_offset_reset=reset)
    fetcher.add(TP, position)
    return fetcher


def feed(fetcher: Fetcher, records: bytes, *, error: int = 0) -> None:
    state = fetcher.states[TP]
    response: Any = {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition": 0,
                        "error": error,
                        "message": None,
                        "high_watermark": 99,
                        "records": records,
                    }
                ],
            }
        ]
    }
    fetcher._take_response(response, {TP: (state, state.epoch, state.fetch_offset)})


def values(fetcher: Fetcher, max_records: int = 1000) -> list[int]:
    return [int(r.value or b"") for r in fetcher.take(None, max_records).get(TP, [])]


def test_records_below_the_position_are_skipped_and_batches_decode_lazily() -> None:
    fetcher = fetcher_at(3)
    feed(fetcher, batch(0, 5) + batch(5, 5) + batch(10, 5))
    state = fetcher.states[TP]
    assert state.fetch_offset == 15
    assert state.high_watermark == 99
    assert state.chunks[0].records == []  # nothing decoded before the application asks
    assert values(fetcher, 4) == [3, 4, 5, 6]
    assert state.position == 7
    assert len(state.chunks[0].records) == 5  # only the batch being handed out
    assert values(fetcher) == list(range(7, 15))
    assert state.position == 15
    assert not state.chunks
    assert state.buffered == 0


def test_a_partial_trailing_batch_is_left_for_the_next_fetch() -> None:
    data = batch(0, 3) + batch(3, 3)
    assert _walk(data) == (len(data), 6)
    assert _walk(data[:-1]) == (len(batch(0, 3)), 3)
    fetcher = fetcher_at(0)
    feed(fetcher, data[:-1])
    assert fetcher.states[TP].fetch_offset == 3
    assert values(fetcher) == [0, 1, 2]


def test_control_batches_are_skipped() -> None:
    fetcher = fetcher_at(0)
    feed(fetcher, batch(0, 2) + batch(2, 1, control=True) + batch(3, 2))
    assert values(fetcher) == [0, 1, 3, 4]


def test_records_carry_their_batch_timestamp_type() -> None:
    fetcher = fetcher_at(0)
    log_append = build_batch([(None, b"2", [], 5)], base_offset=2, timestamp_type=1)
    feed(fetcher, batch(0, 2) + log_append + batch(3, 1))
    records = fetcher.take(None, 10)[TP]
    assert [(r.offset, r.timestamp_type) for r in records] == [(0, 0), (1, 0), (2, 1), (3, 0)]


def test_raw_chunks_come_whole_and_move_the_position() -> None:
    fetcher = fetcher_at(3)
    first, second = batch(0, 5) + batch(5, 5), batch(10, 5)
    feed(fetcher, first)
    feed(fetcher, second)
    assert fetcher.take_raw(None) == {TP: (first, 3, 10)}  # offsets 0-2 are the caller's to skip
    assert fetcher.states[TP].position == 10
    assert fetcher.take_raw(None) == {TP: (second, 10, 15)}
    assert fetcher.take_raw(None) == {}
    assert fetcher.states[TP].buffered == 0


def test_raw_after_records_resends_the_half_handed_out_batch() -> None:
    fetcher = fetcher_at(0)
    feed(fetcher, batch(0, 5) + batch(5, 5))
    assert values(fetcher, 7) == list(range(7))
    [(data, position, next_offset)] = fetcher.take_raw(None).values()
    assert (data, position, next_offset) == (batch(5, 5), 7, 10)


def test_a_response_from_before_a_seek_is_dropped() -> None:
    fetcher = fetcher_at(0)
    state = fetcher.states[TP]
    asked = {TP: (state, state.epoch, state.fetch_offset)}
    fetcher.seek(TP, 100)
    response: Any = {
        "topics": [
            {
                "name": "t",
                "partitions": [
                    {
                        "partition": 0,
                        "error": 0,
                        "message": None,
                        "high_watermark": 5,
                        "records": batch(0, 5),
                    }
                ],
            }
        ]
    }
    fetcher._take_response(response, asked)
    assert not state.chunks
    assert state.position == 100


def test_a_corrupt_batch_is_raised_to_the_application() -> None:
    fetcher = fetcher_at(0)
    data = bytearray(batch(0, 3))
    data[-1] ^= 0xFF
    feed(fetcher, bytes(data))
    with pytest.raises(CorruptRecordError, match="CRC"):
        fetcher.take(None, 10)


def test_out_of_range_resets_or_raises_by_policy() -> None:
    fetcher = fetcher_at(50, reset="earliest")
    feed(fetcher, b"", error=OffsetOutOfRangeError.code)
    state = fetcher.states[TP]
    assert state.position is None
    assert state.reset == "earliest"
    strict = fetcher_at(50, reset="none")
    feed(strict, b"", error=OffsetOutOfRangeError.code)
    with pytest.raises(OffsetOutOfRangeError):
        strict.take(None, 10)


def test_records_are_shared_fairly_across_partitions() -> None:
    fetcher = Fetcher(Client("127.0.0.1:1"))
    other = TopicPartition("t", 1)
    fetcher.add(TP, 0)
    fetcher.add(other, 0)
    for tp in (TP, other):
        state = fetcher.states[tp]
        response: Any = {
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition": tp.partition,
                            "error": 0,
                            "message": None,
                            "high_watermark": 9,
                            "records": batch(0, 9),
                        }
                    ],
                }
            ]
        }
        fetcher._take_response(response, {tp: (state, state.epoch, state.fetch_offset)})
    got = fetcher.take(None, 12)
    assert sum(map(len, got.values())) == 12
    assert set(got) == {TP, other}
    one = fetcher.take_one()
    assert one is not None


def test_paused_and_held_partitions_hand_out_nothing_and_wake_no_one() -> None:
    """Their buffered records must not count as data: a ``getmany`` waiting for
    data would return at once, and its caller's loop spin without yielding."""
    fetcher = fetcher_at(0)
    feed(fetcher, batch(0, 3))
    for pause, hold in ((True, False), (False, True)):
        fetcher.states[TP].paused = pause
        if hold:
            fetcher.hold([TP])
        assert not fetcher.has_data()
        assert fetcher.take(None, 10) == {}
        assert fetcher.take_one() is None
    fetcher._data.clear()
    fetcher.release([TP])
    assert fetcher.held == set()
    assert fetcher._data.is_set()  # a waiting getmany wakes up
    assert values(fetcher) == [0, 1, 2]
    fetcher.hold([TP])
    fetcher.remove([TP])
    assert fetcher.held == set()


# -- corrupt data: never waited on silently -------------------------------------------------


def test_a_retriable_corrupt_message_is_raised_after_a_bounded_number_of_attempts() -> None:
    fetcher = Fetcher(Client("127.0.0.1:1"), auto_offset_reset="earliest")
    fetcher.add(TP, 5)
    for _ in range(CORRUPT_RETRY_MAX - 1):
        feed(fetcher, b"", error=CorruptRecordError.code)
        assert fetcher.states[TP].error is None  # retried: the leader may move
    feed(fetcher, b"", error=CorruptRecordError.code)
    with pytest.raises(CorruptRecordError, match="at offset 5: still corrupt after"):
        fetcher.take(None, 10)


def test_a_retriable_corrupt_message_is_raised_after_a_bounded_time() -> None:
    fetcher = Fetcher(Client("127.0.0.1:1"), auto_offset_reset="earliest", corrupt_retry_s=0.0)
    fetcher.add(TP, 5)
    feed(fetcher, b"", error=CorruptRecordError.code)
    with pytest.raises(CorruptRecordError, match="still corrupt after 1 attempts"):
        fetcher.take(None, 10)


def test_data_between_corrupt_answers_starts_the_count_again() -> None:
    fetcher = Fetcher(Client("127.0.0.1:1"), auto_offset_reset="earliest")
    fetcher.add(TP, 0)
    for _ in range(CORRUPT_RETRY_MAX - 1):
        feed(fetcher, b"", error=CorruptRecordError.code)
    feed(fetcher, batch(0, 2))  # the leader moved to a healthy replica
    for _ in range(CORRUPT_RETRY_MAX - 1):
        feed(fetcher, b"", error=CorruptRecordError.code)
    assert values(fetcher) == [0, 1]


def test_corrupt_data_with_no_healthy_copy_is_raised_at_once() -> None:
    fetcher = fetcher_at(5)
    feed(fetcher, b"", error=CorruptDataError.code)
    with pytest.raises(CorruptDataError):
        fetcher.take(None, 10)
