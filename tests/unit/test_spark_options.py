"""The Spark connector's pure parts: options, offset resolution, range planning, rate limits."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_connector.options import OptionError, parse_read_options, parse_write_options
from spark_connector.ranges import (
    OffsetRange,
    from_json_dict,
    plan,
    rate_limit,
    resolve,
    to_json_dict,
)


def test_read_options_defaults_differ_for_batch_and_stream() -> None:
    batch = parse_read_options({"topic": "a, b,a"}, "batch")
    assert batch.topics == ("a", "b")
    assert (batch.starting, batch.ending) == ("earliest", "latest")
    assert batch.bootstrap == "127.0.0.1:9292"
    assert batch.fail_on_data_loss
    assert batch.poll_timeout_ms == 120_000
    stream = parse_read_options({"TOPIC": "a", "MaxOffsetsPerTrigger": "10"}, "stream")
    assert stream.starting == "latest"
    assert stream.max_offsets_per_trigger == 10
    assert not stream.include_headers
    assert stream.retry_timeout_ms == 30_000


def test_batch_reads_ignore_stream_only_options_as_kafka_does() -> None:
    batch = parse_read_options({"topic": "t", "maxOffsetsPerTrigger": "5"}, "batch")
    assert batch.max_offsets_per_trigger is None
    options = {"topic": "t", "includeHeaders": "TRUE", "retryTimeoutMs": "5000"}
    stream = parse_read_options(options, "stream")
    assert (stream.include_headers, stream.retry_timeout_ms) == (True, 5000)


def test_offset_json_is_kafkas_format() -> None:
    options = parse_read_options(
        {
            "topic": "t",
            "startingOffsets": '{"t": {"0": 5, "1": -2}}',
            "endingOffsets": '{"t": {"0": -1}}',
        },
        "batch",
    )
    assert options.starting == {"t": {0: 5, 1: -2}}
    assert options.ending == {"t": {0: -1}}


@pytest.mark.parametrize(
    ("options", "mode", "message"),
    [
        ({}, "batch", "option 'subscribe' (mq alias 'topic') is required"),
        ({"topic": "a,,b"}, "batch", "empty name"),
        ({"topic": "t", "startingOffset": "earliest"}, "batch", "unknown option(s) startingoffset"),
        ({"topic": "t", "endingOffsets": "latest"}, "stream", "endingOffsets is for batch reads"),
        ({"topic": "t", "maxOffsetsPerTrigger": "0"}, "batch", "maxOffsetsPerTrigger is"),
        ({"topic": "t", "includeHeaders": "1"}, "batch", "includeHeaders is true or false"),
        ({"topic": "t", "retryTimeoutMs": "-5"}, "stream", "retryTimeoutMs is a whole number"),
        ({"topic": "t", "startingOffsets": "first"}, "batch", "startingOffsets is 'earliest'"),
        ({"topic": "t", "startingOffsets": "[1]"}, "batch", "must be an object of topics"),
        ({"topic": "t", "startingOffsets": '{"t": 3}'}, "batch", "must map partitions"),
        ({"topic": "t", "startingOffsets": '{"t": {"x": 3}}'}, "batch", "not a partition number"),
        ({"topic": "t", "startingOffsets": '{"t": {"0": -3}}'}, "batch", "is not an offset"),
        ({"topic": "t", "startingOffsets": '{"u": {"0": 1}}'}, "batch", "names topic"),
        ({"topic": "t", "endingOffsets": "earliest"}, "batch", "cannot be 'earliest'"),
        ({"topic": "t", "endingOffsets": '{"t": {"0": -2}}'}, "batch", "cannot name -2"),
        ({"topic": "t", "minPartitions": "0"}, "batch", "minPartitions is a whole number > 0"),
        ({"topic": "t", "maxOffsetsPerTrigger": "x"}, "stream", "maxOffsetsPerTrigger is"),
        ({"topic": "t", "failOnDataLoss": "yes"}, "batch", "failOnDataLoss is true or false"),
    ],
)
def test_bad_read_options_say_what_is_wrong(
    options: dict[str, str], mode: str, message: str
) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_read_options(options, mode)  # type: ignore[arg-type]


def test_write_options() -> None:
    options = parse_write_options(
        {"topic": "out", "compression": "zstd", "path": "p", "queryName": "q"}
    )
    assert (options.topic, options.compression, options.linger_ms) == ("out", "zstd", 5)
    assert parse_write_options({}).topic is None
    with pytest.raises(OptionError, match="one topic name"):
        parse_write_options({"topic": "a,b"})
    with pytest.raises(OptionError, match="compression is"):
        parse_write_options({"compression": "brotli"})
    with pytest.raises(OptionError, match="unknown option"):
        parse_write_options({"startingOffsets": "earliest"})
    assert parse_write_options({}).resume_max_records == 1_000_000
    assert parse_write_options({"resumeMaxRecords": "5000"}).resume_max_records == 5000
    with pytest.raises(OptionError, match="resumeMaxRecords"):
        parse_write_options({"resumeMaxRecords": "-1"})


PARTS = [("a", 0), ("a", 1), ("b", 0)]
EARLIEST = {("a", 0): 10, ("a", 1): 0, ("b", 0): 5}
LATEST = {("a", 0): 100, ("a", 1): 50, ("b", 0): 5}


def test_resolve_names_defaults_and_explicit_offsets() -> None:
    assert resolve("earliest", PARTS, EARLIEST, LATEST, "latest") == EARLIEST
    assert resolve("latest", PARTS, EARLIEST, LATEST, "earliest") == LATEST
    spec = {"a": {0: 42, 1: -1}}
    assert resolve(spec, PARTS, EARLIEST, LATEST, "earliest") == {
        ("a", 0): 42,
        ("a", 1): 50,
        ("b", 0): 5,
    }
    with pytest.raises(OptionError, match=r"partitions \[7\]"):
        resolve({"a": {7: 1}}, PARTS, EARLIEST, LATEST, "earliest")


def test_plan_leaves_out_empty_ranges_and_splits_the_biggest() -> None:
    start = {("a", 0): 0, ("a", 1): 0, ("b", 0): 5}
    end = {("a", 0): 100, ("a", 1): 30, ("b", 0): 5}
    assert plan(start, end, None) == [OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 0, 30)]
    assert plan(start, end, 4) == [
        OffsetRange("a", 0, 0, 33),
        OffsetRange("a", 0, 33, 66),
        OffsetRange("a", 0, 66, 100),
        OffsetRange("a", 1, 0, 30),
    ]
    assert len(plan({("a", 0): 0}, {("a", 0): 3}, 10)) == 3  # one record per piece at most


@given(
    sizes=st.lists(st.integers(0, 500), min_size=1, max_size=6),
    min_partitions=st.integers(1, 40),
)
def test_plan_covers_every_offset_once(sizes: list[int], min_partitions: int) -> None:
    start = {("t", i): 7 * i for i in range(len(sizes))}
    end = {("t", i): 7 * i + size for i, size in enumerate(sizes)}
    ranges = plan(start, end, min_partitions)
    covered = sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert covered == sorted((i, o) for i, s in enumerate(sizes) for o in range(7 * i, 7 * i + s))
    assert all(r.size > 0 for r in ranges)
    total = sum(sizes)
    nonempty = sum(1 for s in sizes if s)
    assert len(ranges) == min(total, max(nonempty, min_partitions))
    pieces = [r.size for r in ranges if (r.topic, r.partition) == ("t", 0)]
    assert not pieces or max(pieces) - min(pieces) <= 1  # a partition splits into equal pieces


@given(
    backlog=st.lists(st.integers(0, 1000), min_size=1, max_size=6),
    max_rows=st.integers(1, 3000),
)
def test_rate_limit_takes_at_most_max_rows_in_proportion(backlog: list[int], max_rows: int) -> None:
    start = {("t", i): 100 for i in range(len(backlog))}
    latest = {("t", i): 100 + lag for i, lag in enumerate(backlog)}
    end = rate_limit(start, latest, max_rows)
    taken = [end[tp] - start[tp] for tp in start]
    assert sum(taken) == min(max_rows, sum(backlog))
    assert all(0 <= t <= lag for t, lag in zip(taken, backlog, strict=True))
    total = sum(backlog)
    if total > max_rows:  # each share within one record of its exact proportion
        assert all(
            abs(t - max_rows * lag / total) < 1 for t, lag in zip(taken, backlog, strict=True)
        )


def test_offsets_round_trip_through_checkpoint_json() -> None:
    offsets = {("a", 0): 3, ("a", 10): 4, ("b", 1): 0}
    as_json = to_json_dict(offsets)
    assert as_json == {"a": {"0": 3, "10": 4}, "b": {"1": 0}}
    assert from_json_dict(as_json) == offsets
