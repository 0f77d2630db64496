from collections.abc import Sequence
from typing import Any

def parse_records(
    data: bytes,
    pos: int,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int | None,
    last_delta: int,
    kind: type[tuple[Any, ...]],
    topic: str | None,
    partition: int,
    timestamp_type: int,
    corrupt: type[Exception],
    /,
) -> tuple[list[Any], int]: ...
def append_record(
    buf: bytearray,
    ts_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]],
    limit: int,
    /,
) -> bool: ...
def append_values(
    buf: bytearray,
    values: Sequence[bytes | None],
    start: int,
    first_delta: int,
    ts_delta: int,
    limit: int,
    /,
) -> int: ...
def validate_records(
    data: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    count: int,
    invalid: type[Exception],
    /,
) -> None: ...
