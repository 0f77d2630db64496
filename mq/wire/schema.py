"""Body schemas: a TypedDict is both the handler's type and the wire validator.

A body is a msgpack map with short string keys. Its schema is declared once,
as a ``TypedDict`` whose annotations carry the wire rules in ``Annotated``
metadata::

    class ProducePartition(TypedDict):
        partition: PartitionId                      # int in [0, 2**31 - 1]
        records: Bin                                # msgpack bin
        note: Annotated[str | None, Len(0, 80), Default(None), Since(1)]

mypy checks handlers against the TypedDict; :class:`Schema` turns the same
class into a tree of :class:`Node` descriptions (used by the tests to generate
valid bodies) and, per version, into a validator of closures. Validation is
one pass over the decoded maps and lists, checking types and bounds in place:
missing fields that have a :class:`Default` are filled in, so a handler always
sees every field; fields newer than the request's version (:class:`Since`) are
set to their default. Keys a schema does not name are ignored and left in
place: a newer peer may send optional fields an older one does not know.

The type vocabulary: ``int`` with a :class:`Range`, ``str``, ``bool``,
``bytes | bytearray | memoryview`` (msgpack bin; decoded as ``bytes``; a
memoryview of a segment is sent as it is, msgpack copying it once into the
frame), ``Literal[...]`` of ints
or strs, ``X | None``, ``list[X]`` and ``dict[str, X]`` with a :class:`Len`,
and nested TypedDicts. Lengths bound strings (characters), bins (bytes) and
containers (items); lists and maps must state theirs.

Cost: one Python call per map and per non-scalar value (scalars are tested
inline), nothing per byte of a bin: a produce request costs per partition,
never per record. An error stops at the first bad value found and names its
path, e.g.
``produce.topics[0].partitions[2].records: expected bytes, got str``.
"""

from __future__ import annotations

import typing
from typing import Annotated, Generic, TypeVar

from mq.errors import InvalidRequestError, MQError
from mq.wire import limits
from mq.wire.nodes import Default, Len, Range, Since, StructNode, struct_node
from mq.wire.validation import Check, check_defaults, compile_check, run_check

__all__ = [
    "I8",
    "I16",
    "I32",
    "I64",
    "Bin",
    "Default",
    "ErrorCode",
    "ErrorMessage",
    "Len",
    "Name",
    "NonNegI32",
    "NonNegI64",
    "PartitionId",
    "Range",
    "Schema",
    "Since",
    "Text",
    "TopicName",
]

T = TypeVar("T")

# -- the vocabulary the API modules declare their bodies with --------------------------

I8 = Annotated[int, Range(limits.I8_MIN, limits.I8_MAX)]
I16 = Annotated[int, Range(limits.I16_MIN, limits.I16_MAX)]
I32 = Annotated[int, Range(limits.I32_MIN, limits.I32_MAX)]
I64 = Annotated[int, Range(limits.I64_MIN, limits.I64_MAX)]
NonNegI32 = Annotated[int, Range(0, limits.I32_MAX)]
"""Durations, byte counts and sizes: a negative one is a malformed request."""
NonNegI64 = Annotated[int, Range(0, limits.I64_MAX)]
PartitionId = Annotated[int, Range(0, limits.I32_MAX)]
TopicName = Annotated[str, Len(1, limits.MAX_TOPIC_NAME_LEN)]
"""Only the length: the character rules are create_topics' to check
(:func:`~mq.wire.limits.validate_topic_name`, per topic, INVALID_TOPIC_EXCEPTION)."""
Name = Annotated[str, Len(0, limits.MAX_NAME_LEN)]
"""Identifiers: client, group, member and instance ids, config names, hosts."""
Text = Annotated[str, Len(0, limits.MAX_STRING_LEN)]
"""Free text such as config values."""
Bin = Annotated[bytes | bytearray | memoryview, Len(0, limits.MAX_FRAME_BYTES)]
"""msgpack bin: record batches. Decoded as ``bytes``; a sender may pass a
memoryview of a segment as it is (msgpack copies it once, into the frame)."""
ErrorCode = Annotated[int, Range(limits.I16_MIN, limits.I16_MAX), Default(0)]
"""A code of :mod:`mq.errors` (0 = none), per topic or partition in a response."""
ErrorMessage = Annotated[str | None, Len(0, limits.MAX_MESSAGE_LEN), Default(None)]
"""The message that goes with a non-zero ErrorCode, when there is more to say."""


class Schema(Generic[T]):
    """A message body: the TypedDict ``T``, its node tree and its validators per version."""

    def __init__(self, typed_dict: type[T]) -> None:
        self.typed_dict = typed_dict
        self.node: StructNode = struct_node(typed_dict)
        check_defaults(self.node)
        self._checks: dict[int, Check] = {}

    def validate(
        self,
        value: object,
        version: int,
        root: str,
        error: type[MQError] = InvalidRequestError,
    ) -> T:
        """``value`` as a ``T``, checked and completed in place for ``version``.

        Raises ``error`` with the path of the first bad value, prefixed by ``root``.
        """
        check = self._checks.get(version)
        if check is None:
            check = self._checks[version] = compile_check(self.node, version)
        run_check(check, value, root, error)
        return typing.cast(T, value)

    def __repr__(self) -> str:
        return f"Schema({self.node.name})"
