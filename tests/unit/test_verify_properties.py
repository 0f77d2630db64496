"""Properties of mq.storage.verify, held over many generated damages.

Every flip of a byte the checks cover and every cut of a file is caught at the
batch where it happened, and verify and dump agree on any bytes at all.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from kafka_batches import kafka_segment, write_segment

from mq.records.batch import LEADER_EPOCH_AT, LENGTH_AT, MAGIC_AT
from mq.storage.verify import BatchInfo, Damage, Padding, dump_buffer, verify

SEG, POSITIONS, BASES = kafka_segment([2, 1, 4, 3])
SIZES = [b - a for a, b in zip(POSITIONS, [*POSITIONS[1:], len(SEG)], strict=True)]
K = range(len(POSITIONS))


def _uncovered(at: int) -> bool:
    """baseOffset and partitionLeaderEpoch are outside the CRC (the broker rewrites them)."""
    return at < LENGTH_AT or LEADER_EPOCH_AT <= at < MAGIC_AT


@given(
    k=st.sampled_from(K),
    at=st.integers(0, min(SIZES) - 1).filter(lambda at: not _uncovered(at)),
    xor=st.integers(1, 255),
)
def test_any_checked_byte_flip_is_caught_at_its_batch(k: int, at: int, xor: int) -> None:
    data = bytearray(SEG)
    data[POSITIONS[k] + at] ^= xor
    with tempfile.TemporaryDirectory() as tmp:
        bad = verify(write_segment(Path(tmp), data)).errors[0]
    assert (bad.position, bad.offset) == (POSITIONS[k], BASES[k])
    entries = list(dump_buffer(data))
    assert entries[:k] == list(dump_buffer(SEG))[:k]
    hit = entries[k]
    assert isinstance(hit, Damage) or (isinstance(hit, BatchInfo) and not hit.crc_ok)


@given(cut=st.integers(0, len(SEG)))
def test_a_cut_file_is_fine_only_at_a_batch_boundary(cut: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = verify(write_segment(Path(tmp), SEG[:cut]))
    k = max(k for k in K if POSITIONS[k] <= cut)
    stub = SEG[POSITIONS[k] : cut]  # what is left of the batch the cut went through
    # a stub of only zeros (the high bytes of a small baseOffset) looks like padding
    assert report.ok == (cut == len(SEG) or not any(stub))
    if not report.ok:
        assert report.errors[0].position == POSITIONS[k]


@given(st.binary(max_size=300) | st.builds(lambda n: bytes(SEG[:n]), st.integers(0, 400)))
def test_any_bytes_give_a_report_that_agrees_with_the_dump(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = verify(write_segment(Path(tmp), data))
    entries = list(dump_buffer(data))
    sound = [isinstance(e, Padding) or (isinstance(e, BatchInfo) and e.crc_ok) for e in entries]
    if report.ok:
        assert all(sound)
    else:  # verify stops where the dump has an entry: the two walk the same boundaries
        assert report.errors[0].position in [e.position for e in entries]
