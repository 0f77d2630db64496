"""The records of the broker's internal topics, read back when state is loaded.

``__consumer_offsets`` (:mod:`mq.broker.offsets`) and ``__share_state``
(:mod:`mq.broker.share_store`) are read from the start when a broker takes
over a partition of them. A record there that cannot be decoded (a batch an
older broker stored without checking its records, a record some bug wrote)
costs its own entry only: the loader skips it and logs it once, with its
offset, and loads everything else. Giving up instead left the whole partition
unloaded, so every group hashing there got NOT_COORDINATOR for good.

Thread safety: one event loop (the memory of what was logged is not locked).
"""

from __future__ import annotations

import logging
from typing import Final

from mq.errors import CorruptRecordError
from mq.records.batch import Buffer
from mq.records.records import Record, decode_records

log = logging.getLogger(__name__)

MAX_REMEMBERED_SKIPS: Final = 10_000
"""How many skipped (partition, offset) pairs are remembered so that each is logged
once, although a share-state partition is read again for every share partition
loaded from it. Past this many (a badly damaged partition), the memory starts
over and a record may be logged again: bounded memory over perfect silence."""

_logged: set[tuple[str, int]] = set()


def records_or_skip(batch: Buffer, where: str) -> list[Record]:
    """The records of one batch of internal topic partition ``where``, or none when
    they cannot be decoded (logged once, with the batch's offset)."""
    try:
        return decode_records(batch)
    except CorruptRecordError as exc:
        base_offset = int.from_bytes(bytes(batch[:8]), "big", signed=True)
        skipped(where, base_offset, f"the batch does not decode: {exc}")
        return []


def skipped(where: str, offset: int, why: object) -> None:
    """Log, once per (partition, offset), that a loader skipped what is there."""
    if (where, offset) in _logged:
        return
    if len(_logged) >= MAX_REMEMBERED_SKIPS:
        _logged.clear()
    _logged.add((where, offset))
    log.error("%s: skipping the record(s) at offset %d while loading: %s", where, offset, why)
