"""Golden tests against kafka-python, an independent implementation of the same format.

Batches cross both ways (kafka-python builds, mq decodes; mq builds,
kafka-python decodes and checks the CRC), uncompressed batches are compared
byte for byte, and one tiny batch is pinned as hex so a format change cannot
pass silently. kafka-python's snappy, lz4 and zstd need python-snappy, lz4 and
zstandard; where one is not installed its cases are skipped, never faked.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mq.errors import CorruptRecordError
from mq.records import compression
from mq.records.records import Record, build_batch, decode_records

with warnings.catch_warnings():
    # kafka-python 3.0 calls importlib.resources.read_text on import, which
    # Python 3.11 deprecates; the suite turns warnings into errors.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import codec as kafka_codec
    from kafka.record._crc32c import crc as pure_python_crc32c
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

RecordTuple = tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]

_KAFKA_HAS = {
    compression.CODEC_NONE: lambda: True,
    compression.CODEC_GZIP: kafka_codec.has_gzip,
    compression.CODEC_SNAPPY: kafka_codec.has_snappy,
    compression.CODEC_LZ4: kafka_codec.has_lz4,
    compression.CODEC_ZSTD: kafka_codec.has_zstd,
}


def kafka_codecs(*codecs: int) -> list[object]:
    """Codec parameters, each skipped when kafka-python cannot do it here."""
    return [
        pytest.param(
            codec,
            id=compression.CODEC_NAMES[codec],
            marks=pytest.mark.skipif(
                not _KAFKA_HAS[codec](),
                reason=f"kafka-python has no {compression.CODEC_NAMES[codec]} library installed",
            ),
        )
        for codec in codecs
    ]


ALL = kafka_codecs(*compression.CODEC_NAMES)
COMPRESSED = kafka_codecs(*list(compression.CODEC_NAMES)[1:])

# Compressible values, so kafka-python (which falls back to no compression when
# it does not pay) really compresses, plus null keys, null values and headers.
SAMPLE: list[RecordTuple] = [
    (b"key-%d" % i, b"value %d " % i * 40, [("trace", b"t-%d" % i)] if i % 3 else [], 1_000 + i)
    for i in range(50)
]
SAMPLE += [
    (None, b"no key", [], 900),
    (b"no value", None, [("null-header", None), ("\u00fcnicode", b"")], 2_000),
    (None, None, [], 1_500),
    (b"big", os.urandom(300) * 300, [], 1_600),
]


def kafka_build(
    records: Sequence[RecordTuple],
    codec: int = 0,
    *,
    producer: tuple[int, int, int] = (-1, -1, -1),
    transactional: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, transactional, *producer, batch_size=2**31)
    for offset, (key, value, headers, timestamp) in enumerate(records):
        assert builder.append(offset, timestamp, key, value, list(headers)) is not None
    return bytes(builder.build())


def kafka_decode(buf: bytes) -> tuple[DefaultRecordBatch, list[Record]]:
    """kafka-python's view of a batch: the batch object (CRC checked) and its records."""
    kafka_batch = DefaultRecordBatch(buf)
    assert kafka_batch.validate_crc()
    records = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in kafka_batch]
    return kafka_batch, records


def expected(records: Sequence[RecordTuple], base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, ts, key, value, tuple(headers))
        for i, (key, value, headers, ts) in enumerate(records)
    ]


@pytest.mark.parametrize("codec", ALL)
def test_kafka_python_batches_decode_in_mq(codec: int) -> None:
    buf = kafka_build(SAMPLE, codec, producer=(12, 3, 40))
    assert DefaultRecordBatch(buf).compression_type == codec
    assert decode_records(buf) == expected(SAMPLE)


@pytest.mark.parametrize("codec", ALL)
def test_mq_batches_decode_in_kafka_python(codec: int) -> None:
    buf = build_batch(
        SAMPLE,
        codec=codec,
        base_offset=5_000,
        producer_id=12,
        producer_epoch=3,
        base_sequence=40,
        transactional=True,
    )
    kafka_batch, records = kafka_decode(buf)
    assert records == expected(SAMPLE, 5_000)
    assert kafka_batch.compression_type == codec
    assert kafka_batch.is_transactional
    assert (kafka_batch.base_offset, kafka_batch.last_offset_delta) == (5_000, len(SAMPLE) - 1)
    assert (kafka_batch.first_timestamp, kafka_batch.max_timestamp) == (1_000, 2_000)
    assert (kafka_batch.producer_id, kafka_batch.producer_epoch) == (12, 3)
    assert kafka_batch.base_sequence == 40


def test_log_append_time_means_the_same_in_both() -> None:
    buf = build_batch([(None, b"a", [], 5), (None, b"b", [], 9)], timestamp_type=1)
    kafka_batch, records = kafka_decode(buf)
    assert kafka_batch.timestamp_type == 1
    assert records == decode_records(buf)


def test_uncompressed_bytes_equal_kafka_python_bytes() -> None:
    ours = build_batch(SAMPLE, leader_epoch=0, producer_id=12, producer_epoch=3, base_sequence=40)
    assert ours == kafka_build(SAMPLE, producer=(12, 3, 40))


records_st = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=30),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3),
        st.integers(-1, 2**45),
    ),
    min_size=1,
    max_size=15,
)


@settings(max_examples=200, deadline=None)
@given(records=records_st, transactional=st.booleans())
def test_uncompressed_bytes_equal_kafka_python_bytes_for_any_records(
    records: list[RecordTuple], transactional: bool
) -> None:
    producer = (7, 1, 0) if transactional else (-1, -1, -1)
    ours = build_batch(
        records,
        leader_epoch=0,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        transactional=transactional,
    )
    assert ours == kafka_build(records, producer=producer, transactional=transactional)
    assert kafka_decode(ours)[1] == decode_records(ours) == expected(records)


# Two records, hand-checked field by field (leader epoch 0 as kafka-python writes).
TINY = [(b"k", b"v", [("h", b"x")], 1_700_000_000_000), (None, None, [], 1_700_000_000_005)]
TINY_HEX = (
    "0000000000000000"  # baseOffset 0
    "00000045"  # batchLength 69 = 81 - 12
    "00000000"  # partitionLeaderEpoch 0
    "02"  # magic
    "d7bd8f47"  # CRC-32C of everything from attributes on
    "0000"  # attributes: no codec, create time, not transactional
    "00000001"  # lastOffsetDelta 1
    "0000018bcfe56800"  # baseTimestamp 1_700_000_000_000
    "0000018bcfe56805"  # maxTimestamp 1_700_000_000_005
    "ffffffffffffffff"  # producerId -1
    "ffff"  # producerEpoch -1
    "ffffffff"  # baseSequence -1
    "00000002"  # recordsCount 2
    "18"  # record 0: length 12 (zigzag 24)
    "00"
    "00"
    "00"  # attributes, timestampDelta 0, offsetDelta 0
    "02"
    "6b"
    "02"
    "76"  # key "k", value "v" (lengths 1 = zigzag 2)
    "02"
    "02"
    "68"
    "02"
    "78"  # one header: "h" = b"x"
    "0c"  # record 1: length 6
    "00"
    "0a"
    "02"  # attributes, timestampDelta 5, offsetDelta 1
    "01"
    "01"
    "00"  # null key, null value (-1 = zigzag 1), no headers
)


def test_tiny_batch_is_pinned() -> None:
    buf = build_batch(TINY, leader_epoch=0)
    assert buf.hex() == TINY_HEX
    assert pure_python_crc32c(buf[21:]) == 0xD7BD8F47
    assert kafka_build(TINY) == buf
    assert decode_records(bytes.fromhex(TINY_HEX)) == expected(TINY)


# -- the codecs alone ---------------------------------------------------------------

# Over 64 KiB, so snappy writes several xerial blocks and lz4 several frame blocks.
PAYLOAD = b"".join(b"record %d;" % i for i in range(10_000)) + os.urandom(5_000)

_KAFKA_ENCODE = {
    compression.CODEC_GZIP: kafka_codec.gzip_encode,
    compression.CODEC_SNAPPY: kafka_codec.snappy_encode,
    compression.CODEC_LZ4: kafka_codec.lz4_encode,
    compression.CODEC_ZSTD: kafka_codec.zstd_encode,
}
_KAFKA_DECODE = {
    compression.CODEC_GZIP: kafka_codec.gzip_decode,
    compression.CODEC_SNAPPY: kafka_codec.snappy_decode,
    compression.CODEC_LZ4: kafka_codec.lz4_decode,
    compression.CODEC_ZSTD: kafka_codec.zstd_decode,
}


@pytest.mark.parametrize("codec", COMPRESSED)
def test_kafka_python_decodes_what_mq_compresses(codec: int) -> None:
    packed = compression.compress(codec, PAYLOAD)
    assert len(packed) < len(PAYLOAD)
    assert _KAFKA_DECODE[codec](packed) == PAYLOAD


@pytest.mark.parametrize("codec", COMPRESSED)
def test_mq_decompresses_what_kafka_python_compresses(codec: int) -> None:
    packed = _KAFKA_ENCODE[codec](PAYLOAD)
    assert compression.decompress(codec, packed, len(PAYLOAD)) == PAYLOAD
    with pytest.raises(CorruptRecordError, match="more than"):
        compression.decompress(codec, packed, len(PAYLOAD) - 1)


@pytest.mark.parametrize("codec", kafka_codecs(compression.CODEC_SNAPPY))
def test_mq_reads_kafka_python_raw_snappy(codec: int) -> None:
    packed = kafka_codec.snappy_encode(PAYLOAD, xerial_compatible=False)
    assert not packed.startswith(compression.XERIAL_MAGIC)
    assert compression.decompress(codec, packed, len(PAYLOAD)) == PAYLOAD
