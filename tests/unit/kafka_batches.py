"""Record batches from kafka-python's encoder, an implementation independent of mq's.

Test-only helpers: a segment of these batches checks mq's header walk and CRC
against someone else's bytes, not only against mq's own writer.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from mq.records.batch import set_base_offset

with warnings.catch_warnings():
    # kafka-python 3 loads its protocol schemas with importlib.resources' legacy
    # read_text/open_text, deprecated since Python 3.11: their warning, not ours.
    warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\)", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

SEGMENT = "00000000000000000000.log"
"""The name of a partition's first segment (base offset 0)."""
T0 = 1_700_000_000_000


def kafka_batch(base_offset: int, count: int, timestamp: int) -> bytearray:
    """A batch from kafka-python's encoder, with its baseOffset rewritten."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for i in range(count):
        value = b"value-%d-" % (base_offset + i) * 4
        builder.append(i, timestamp=timestamp + i, key=b"key-%d" % i, value=value, headers=[])
    data = bytearray(builder.build())
    set_base_offset(data, 0, base_offset)  # outside the CRC: it stays valid
    return data


def kafka_segment(counts: list[int], first: int = 0) -> tuple[bytearray, list[int], list[int]]:
    """Batches back to back with dense offsets from ``first``: (bytes, positions, bases)."""
    data, positions, bases = bytearray(), [], []
    offset = first
    for k, count in enumerate(counts):
        positions.append(len(data))
        bases.append(offset)
        data += kafka_batch(offset, count, T0 + 1000 * k)
        offset += count
    return data, positions, bases


def write_segment(directory: Path, data: bytes | bytearray, name: str = SEGMENT) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(bytes(data))
    return path
