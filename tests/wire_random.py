"""Seeded random requests, record batches and damaged frames, for fuzzing a live broker.

The Hypothesis strategies of wire_strategies.py drive the sans-IO fuzz; a live
broker fuzz sends 100,000 frames drawn from one :class:`random.Random`, so a
failure replays from its seed. Bodies are generated from mq.wire's schema
trees (as :func:`wire_strategies.values` does) but steered to what reaches deep
into a broker: topic names from a small pool (the topic whose data must
survive, scratch topics, the offsets topic, invalid names), small partition
ids, odd offsets and byte limits, record batches that are whole or damaged
in one chosen way. Strings come from bounded pools or carry a character no
topic name may have, so the broker auto-creates a bounded number of topics
however many frames it gets.
"""

from __future__ import annotations

import copy
import random
import struct
from typing import Any, NamedTuple

import msgpack
from wire_strategies import slots, wrong_values

from mq.broker.catalog import TOPIC_CONFIG_KEYS
from mq.records import batch as fmt
from mq.records.compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from mq.records.records import Header, build_batch
from mq.wire import limits
from mq.wire.nodes import (
    REQUIRED,
    BinNode,
    BoolNode,
    IntNode,
    ListNode,
    LiteralNode,
    MapNode,
    Node,
    NullableNode,
    StrNode,
    StructNode,
)
from mq.wire.registry import Api

KNOWN_TOPIC = "fuzz-known"
"""The topic whose acknowledged records the fuzz must leave intact."""
OFFSETS_TOPIC = "__consumer_offsets"
SCRATCH_TOPICS = ("fuzz-scratch-a", "fuzz-scratch-b", "fuzz-scratch-c")
INVALID_TOPICS = ("", ".", "..", "bad name", "../escape", "x" * 250, "sn\u2603w", "nul\x00")
TOPICS = (KNOWN_TOPIC,) * 6 + SCRATCH_TOPICS * 3 + (OFFSETS_TOPIC, "fuzz-missing") + INVALID_TOPICS
WORDS = (
    "",
    "a",
    "fuzz~id",
    "range",
    "sticky",
    "roundrobin",
    "Stable",
    "Empty",
    "Dead",
    "SCRAM-SHA-256",
    "PLAIN",
    "z" * 255,
    "z" * 256,
    "\u00e9~",
    "\x00~",
    "\u2603~",
    "\U0001f600~",
)
"""Identifiers and free text (none is a valid topic name except "a")."""
GROUPS = ("fuzz-group-1", "fuzz-group-2", "", "g~" + "g" * 250)
MEMBERS = ("", "fuzz-member~1", "m" * 255)
CONFIG_KEYS = (*sorted(TOPIC_CONFIG_KEYS), "nope", "", "segment.bytes ", "flush\x00")
CONFIG_VALUES = (
    "65536",
    "1048576",
    "16777216",
    "0",
    "-1",
    "1",
    "",
    "always",
    "never",
    "interval",
    "delete",
    "compact",
    "compact,delete",
    "1e3",
    "abc",
    "99999999999999999999",
    "-5",
    "2147483648",
    " 65536",
)
CODECS = (CODEC_NONE,) * 24 + (CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD)
BASE_TIMESTAMP = 1_700_000_000_000
"""Fixed record timestamps: the same seed builds the same bytes on any day."""
BIG_INTS = (
    limits.I32_MAX,
    limits.I32_MAX + 1,
    limits.I32_MIN,
    limits.I32_MIN - 1,
    limits.I64_MAX,
    limits.I64_MIN,
    (1 << 64) - 1,
    -1,
    0,
)

BATCHES_KEPT = 64
"""Valid batches kept to be sent again or damaged (see RandomWire.whole_batch)."""
BASES_PER_API = 32
"""Valid bodies kept per API to be copied and damaged (see RandomWire.base)."""
MAX_HUGE_BYTES = 1 << 20
"""A huge list of copies of an item stays under this many bytes."""

_HINTS: dict[str, tuple[int, ...]] = {
    "partition": (0, 0, 0, 1, 1, 2, 3, 7, 1000, limits.I32_MAX),
    "partitions": (-1, 1, 1, 2, 3, 0, 4),
    "replication_factor": (-1, 1, 1, 0, 2, 3),
    "timeout_ms": (0, 1, 100, 5000, 30_000),
    "max_wait_ms": (0, 0, 0, 1, 10, 50),
    "min_bytes": (0, 1, 1, 1, 100, 1 << 20, limits.I32_MAX),
    "max_bytes": (0, 1, 60, 61, 62, 100, 4096, 1 << 20, limits.I32_MAX),
    "partition_max_bytes": (0, 1, 60, 61, 62, 100, 4096, 1 << 20, limits.I32_MAX),
    "fetch_offset": (-2, -1, 0, 0, 1, 5, 99, 100, 250, 10_000, limits.I64_MAX, limits.I64_MIN),
    "offset": (-1, 0, 1, 5, 100, 10_000, limits.I64_MAX),
    "timestamp": (-2, -1, 0, BASE_TIMESTAMP, BASE_TIMESTAMP + 1, limits.I64_MAX),
    "session_timeout_ms": (0, 999, 1000, 1500, 3000, 30 * 60_000 + 1),
    "rebalance_timeout_ms": (0, 100, 1000),
    "generation_id": (-1, 0, 1, 2, 1000),
    "producer_id": (-1, -1, 0, 1, 5, 1000, limits.I64_MAX),
    "producer_epoch": (-1, 0, 1, limits.I16_MAX),
    "current_leader_epoch": (-1, -1, 0, 1, 5),
    "leader_epoch": (-1, 0, 1),
    "key_type": (0, 1),
}
"""Values of the int fields by field name: boundaries and what exists on the broker."""


Records = list[tuple[bytes | None, bytes | None, tuple[Header, ...]]]


class SentRecords(NamedTuple):
    """What one partition entry of a generated produce carries."""

    records: Records
    """The records of every batch, in order, when the batches are whole."""
    must_fail: bool | None
    """True: a damaged batch the broker must refuse; False: whole batches; None: either."""


class RandomWire:
    """Random request bodies, batches and byte-level damage from one seeded Random."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._bases: dict[int, list[bytes]] = {}
        self._oversized: bytes | None = None
        self._batches: list[tuple[bytes, Records]] = []

    # -- values from schema nodes -----------------------------------------------------

    def body(self, api: Api[Any, Any]) -> dict[str, Any]:
        """A valid request body of ``api``."""
        body: dict[str, Any] = self.value(api.request.node, "")
        return body

    def base(self, api: Api[Any, Any]) -> dict[str, Any]:
        """A valid body of ``api`` to damage: often a copy of one drawn before (it is cheaper)."""
        rng = self.rng
        pool = self._bases.setdefault(api.key, [])
        if len(pool) < BASES_PER_API or rng.random() < 0.1:
            packed = msgpack.packb(self.body(api))
            if len(pool) < BASES_PER_API:
                pool.append(packed)
            else:
                pool[rng.randrange(len(pool))] = packed
            return msgpack.unpackb(packed)
        return msgpack.unpackb(rng.choice(pool))

    def value(self, node: Node, field: str) -> Any:
        rng = self.rng
        if isinstance(node, IntNode):
            hinted = _HINTS.get(field)
            if hinted is not None and rng.random() < 0.9:
                return min(max(rng.choice(hinted), node.lo), node.hi)
            return rng.choice((node.lo, node.hi, min(max(0, node.lo), node.hi), self.int_in(node)))
        if isinstance(node, StrNode):
            return self.string(node, field)
        if isinstance(node, BinNode):
            if field == "records":
                return self.batch()[0]
            return rng.randbytes(rng.choice((0, 1, 32, 300)))
        if isinstance(node, BoolNode):
            return rng.random() < 0.5
        if isinstance(node, LiteralNode):
            return rng.choice(node.values)
        if isinstance(node, NullableNode):
            return None if rng.random() < 0.3 else self.value(node.inner, field)
        if isinstance(node, ListNode):
            count = min(max(self.count(), node.lo), node.hi)
            return [self.value(node.item, field) for _ in range(count)]
        if isinstance(node, MapNode):
            count = min(max(self.count(), node.lo), node.hi)
            keys = [self.string(node.key, field + "{key}") for _ in range(count)]
            return {k: self.value(node.value, field) for k in keys}
        if isinstance(node, StructNode):
            out = {}
            for f in node.fields:
                if f.since == 0 and (f.default is REQUIRED or rng.random() < 0.7):
                    out[f.name] = self.value(f.node, f.name)
            return out
        raise TypeError(node)

    def count(self) -> int:
        return self.rng.choice((0, 1, 1, 1, 2, 3))

    def int_in(self, node: IntNode) -> int:
        return self.rng.randint(max(node.lo, -(1 << 40)), min(node.hi, 1 << 40))

    def string(self, node: StrNode, field: str) -> str:
        rng = self.rng
        if (node.lo, node.hi) == (1, limits.MAX_TOPIC_NAME_LEN):
            pool: tuple[str, ...] = TOPICS
        elif field == "group_id" or field == "groups":
            pool = GROUPS
        elif field == "member_id":
            pool = MEMBERS
        elif field == "group_instance_id":
            pool = ("fuzz-instance-1", "fuzz-instance-2", "")
        elif field in ("configs{key}", "keys"):
            pool = CONFIG_KEYS
        elif field == "configs":
            pool = CONFIG_VALUES
        elif field == "metadata":
            pool = ("", "meta", "m" * 4096, "m" * 4097, "m" * 20_000)
        else:
            pool = WORDS
        fitting = [s for s in pool if node.lo <= len(s) <= node.hi]
        return rng.choice(fitting) if fitting else "q" * node.lo

    # -- record batches ---------------------------------------------------------------

    def records(self) -> Records:
        rng = self.rng
        out: Records = []
        for _ in range(rng.choice((1, 1, 2, 3, 5))):
            key = None if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 16))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.choice((0, 1, 10, 100)))
            headers: tuple[Header, ...] = ()
            if rng.random() < 0.2:
                headers = (("h", rng.randbytes(3)), ("\u00e9", None))
            out.append((key, value, headers))
        return out

    def whole_batch(self) -> tuple[bytes, Records]:
        """A valid batch and its records: often one built before (building costs the most)."""
        rng = self.rng
        if len(self._batches) < BATCHES_KEPT or rng.random() < 0.1:
            records = self.records()
            stamped = [(k, v, h, BASE_TIMESTAMP + i) for i, (k, v, h) in enumerate(records)]
            built = build_batch(stamped, codec=rng.choice(CODECS)), records
            if len(self._batches) < BATCHES_KEPT:
                self._batches.append(built)
            else:
                self._batches[rng.randrange(BATCHES_KEPT)] = built
            return built
        return rng.choice(self._batches)

    def batch(self) -> tuple[bytes, SentRecords]:
        """One or two record batches, whole or damaged: the bytes and what they should do."""
        rng = self.rng
        data, records = self.whole_batch()
        roll = rng.random()
        if roll < 0.45:
            if rng.random() < 0.15:  # two whole batches in one partition entry
                more, more_records = self.whole_batch()
                return data + more, SentRecords(records + more_records, False)
            return data, SentRecords(records, False)
        if roll < 0.55:  # bytes outside the CRC that the broker overwrites
            damaged = bytearray(data)
            damaged[rng.choice((0, 7, 12, 15))] ^= rng.randint(1, 255)
            return bytes(damaged), SentRecords(records, False)
        damaged_data = self.damaged(data)
        if rng.random() < 0.2:  # a whole batch before the damaged one: neither may be stored
            return data + damaged_data, SentRecords([], True)
        return damaged_data, SentRecords([], True)

    def damaged(self, data: bytes) -> bytes:
        """``data`` (one whole batch) broken so that the broker must refuse it."""
        rng = self.rng
        out = bytearray(data)
        kind = rng.randrange(11)
        if kind == 0:  # a bit flip in what the CRC covers
            out[rng.randrange(fmt.ATTRIBUTES_AT, len(out))] ^= 1 << rng.randrange(8)
        elif kind == 1:  # the CRC itself
            out[rng.randrange(fmt.CRC_AT, fmt.ATTRIBUTES_AT)] ^= rng.randint(1, 255)
        elif kind == 2:  # the magic byte
            out[fmt.MAGIC_AT] = rng.choice((0, 1, 3, 0x7F, 0xFF))
        elif kind == 3:  # batchLength
            length = len(out) - fmt.LOG_OVERHEAD
            bad = rng.choice((-1, 0, 48, length - 1, length + 1, length + 1000, limits.I32_MAX))
            struct.pack_into(">i", out, fmt.LENGTH_AT, bad)
        elif kind == 4:  # cut short (not to nothing: after a whole batch that is no damage)
            del out[rng.randrange(1, len(out)) :]
        elif kind == 5:  # bytes after the batch
            out += rng.randbytes(rng.choice((1, 11, 12, 60, 61, 100)))
        else:  # a header field the CRC covers, with the CRC made right again
            header = fmt.parse_header(out)
            if kind == 6:
                count = rng.choice((0, -1, header.records_count + 1))
                header = header._replace(records_count=count)
            elif kind == 7:
                header = header._replace(last_offset_delta=rng.choice((-1, header.records_count)))
            elif kind == 8:
                header = header._replace(attributes=header.attributes | fmt.CONTROL_BIT)
            elif kind == 9:
                header = header._replace(base_timestamp=-5, max_timestamp=-7)
            else:
                header = header._replace(max_timestamp=header.base_timestamp - 1)
            fmt.write_header(out, header)
        return bytes(out)

    def oversized_batch(self) -> bytes:
        """A whole batch longer than the default ``max.message.bytes`` (1 MiB + 12)."""
        if self._oversized is None:
            record = (None, bytes(limits.MiB + 100), [], BASE_TIMESTAMP)
            self._oversized = build_batch([record])
        return self._oversized

    def odd_batch(self) -> bytes:
        """A batch with a valid CRC the broker may store or refuse (never for the known topic).

        Records that do not parse, an unknown codec, or an idempotent
        producer's id, epoch and sequence out of nowhere.
        """
        rng = self.rng
        data, _ = self.whole_batch()
        out = bytearray(data)
        header = fmt.parse_header(out)
        kind = rng.randrange(3)
        if kind == 0:
            out[fmt.RECORDS_AT :] = rng.randbytes(max(0, len(out) - fmt.RECORDS_AT))
        elif kind == 1:
            header = header._replace(attributes=(header.attributes & ~7) | rng.choice((5, 6, 7)))
        else:
            header = header._replace(
                producer_id=rng.choice((0, 1, 7, limits.I64_MAX)),
                producer_epoch=rng.choice((0, 1, limits.I16_MAX)),
                base_sequence=rng.choice((0, 1, 5, limits.I32_MAX)),
            )
        header = header._replace(batch_length=len(out) - fmt.LOG_OVERHEAD)
        fmt.write_header(out, header)
        return bytes(out)

    # -- damage to bodies and bytes --------------------------------------------------

    def mutate_body(self, api: Api[Any, Any], body: dict[str, Any]) -> None:
        """Break one to three fields of a valid body in place (most breaks are invalid)."""
        rng = self.rng
        places = list(slots(api.request.node, body))
        if not places:
            body[rng.choice(("topics", "x", ""))] = self.junk()
            return
        for slot in rng.sample(places, min(len(places), rng.choice((1, 1, 2, 3)))):
            try:
                current = slot.container[slot.key]
            except (KeyError, IndexError):
                continue  # taken out by an earlier edit
            kind = rng.randrange(8)
            if kind == 0:
                del slot.container[slot.key]
            elif kind == 1:
                slot.container[slot.key] = rng.choice(wrong_values(slot.node))
            elif kind == 2:
                slot.container[slot.key] = rng.choice(BIG_INTS)
            elif kind == 3:
                slot.container[slot.key] = self.junk()
            elif kind == 4 and isinstance(current, list | dict) and rng.random() < 0.3:
                slot.container[slot.key] = self.huge(current)
            elif kind == 5 and isinstance(current, dict):
                current[rng.choice(("unknown", "", "\u2603"))] = self.junk()
            elif kind == 6 and isinstance(current, str):
                slot.container[slot.key] = (current or "s") * 2 + "s" * rng.choice((0, 300, 40_000))
            else:
                slot.container[slot.key] = self.value(slot.node, str(slot.key))

    def huge(self, container: list[Any] | dict[str, Any]) -> list[Any] | dict[str, Any]:
        """A long list (copies of an item, or junk) or a wide map in place of ``container``."""
        rng = self.rng
        size = rng.choice((100, 100, 1_000, 1_000, 5_000))
        if isinstance(container, dict):
            return {f"k~{i}": i for i in range(size)}
        if container and rng.random() < 0.7:
            item = copy.deepcopy(container[0])  # later edits of the original do not multiply
            item_bytes = len(msgpack.packb(item))
            return [item] * max(1, min(size, MAX_HUGE_BYTES // item_bytes))
        return [rng.choice((0, "x", None, 1.5))] * size

    def junk(self, depth: int = 0) -> Any:
        """A random msgpack-able value (strings from the pools, or with a ``~`` in them)."""
        rng = self.rng
        kind = rng.randrange(12 if depth < 3 else 8)
        if kind == 0:
            return None
        if kind == 1:
            return rng.random() < 0.5
        if kind == 2:
            return rng.choice(BIG_INTS)
        if kind == 3:
            return rng.randint(-1000, 1000)
        if kind == 4:
            return rng.choice((0.5, -0.0, float("inf"), float("nan"), 1e300))
        if kind == 5:
            return rng.choice(WORDS + TOPICS)
        if kind == 6:
            return rng.randbytes(rng.choice((0, 1, 8, 64)))
        if kind == 7:
            return "~" + "".join(chr(rng.randint(32, 0x2FF)) for _ in range(rng.randint(0, 12)))
        if kind in (8, 9):
            return [self.junk(depth + 1) for _ in range(rng.randint(0, 4))]
        return {rng.choice(WORDS): self.junk(depth + 1) for _ in range(rng.randint(0, 4))}

    def document(self, api_keys: list[int], field_names: dict[int, list[str]]) -> bytes:
        """A random msgpack payload: mostly a sound envelope around a random body.

        One in five has a broken envelope (the broker closes the connection):
        not an array of five, an ext type or non-str key, or one header field
        of the wrong type or out of range.
        """
        rng = self.rng
        api = rng.choice(api_keys) if rng.random() < 0.8 else rng.choice((4, 999, 1000, 32767))
        header = [
            api,
            rng.choice((0, 0, 0, 0, 1, 32767)),
            rng.randint(limits.I32_MIN, limits.I32_MAX),
            rng.choice((None, "fuzz", "", "c" * 255)),
        ]
        names = field_names.get(api) or ["x"]
        if rng.random() < 0.8:
            body: Any = {rng.choice(names): self.junk() for _ in range(rng.randint(0, 5))}
        else:
            body = self.junk()
        if rng.random() < 0.8:
            return msgpack.packb([*header, body])
        kind = rng.randrange(4)
        if kind == 0:
            return msgpack.packb(self.junk())
        if kind == 1:  # the wrong number of envelope items
            return msgpack.packb([*header, body, None][: rng.choice((0, 1, 3, 4, 6))])
        if kind == 2:  # an ext type, a non-str map key
            return rng.choice(
                (
                    msgpack.packb([*header, msgpack.ExtType(1, b"x")]),
                    msgpack.packb([*header, {1: 2}], strict_types=False),
                    msgpack.packb([*header, {b"k": 2}]),
                )
            )
        at = rng.randrange(4)
        header[at] = rng.choice(
            (
                (-1, 1 << 15, "18", None),
                (-1, 1 << 15, "0", None),
                (limits.I32_MAX + 1, limits.I32_MIN - 1, "1", 2.0),
                ("c" * 256, 7, b"fuzz"),
            )[at]
        )
        return msgpack.packb([*header, body])

    def damage_frame(self, frame: bytes) -> bytes:
        """A whole frame with bytes flipped, set, cut, inserted or dropped (one to four edits)."""
        rng = self.rng
        out = bytearray(frame)
        for _ in range(rng.choice((1, 1, 2, 4))):
            at = rng.randrange(len(out) + 1)
            kind = rng.choice((0, 0, 0, 1, 1, 1, 2, 3, 4, 5))  # flips and sets keep the framing
            if kind == 0 and at < len(out):
                out[at] ^= 1 << rng.randrange(8)
            elif kind == 1 and at < len(out):
                out[at] = rng.choice((0x00, 0x7F, 0x80, 0xC0, 0xC1, 0xFF, rng.randrange(256)))
            elif kind == 2:
                del out[at:]
            elif kind == 3:
                out[at:at] = rng.randbytes(rng.randint(1, 8))
            elif kind == 4:
                del out[at : at + rng.randint(1, 8)]
            elif at < 4:  # the length prefix, which then disagrees with the payload
                size = len(out) - 4 + rng.choice((-3, -1, 1, 2, 100))
                out[0:4] = struct.pack(">I", max(0, size))
        return bytes(out)

    def raw_bytes(self) -> bytes:
        """Random bytes behind a length prefix that is right, zero, oversized or truncated."""
        rng = self.rng
        payload = rng.randbytes(rng.choice((1, 2, 5, 30, 200, 3000)))
        kind = rng.randrange(8)
        if kind <= 2:
            prefix = struct.pack(">I", len(payload))
        elif kind == 3:
            prefix = struct.pack(">I", 0)
        elif kind == 4:
            prefix = struct.pack(">I", rng.choice((limits.MAX_FRAME_BYTES + 1, (1 << 32) - 1)))
        elif kind == 5:  # announces more than follows
            prefix = struct.pack(">I", len(payload) + rng.choice((1, 10, 1 << 16)))
        elif kind == 6:  # a truncated prefix
            return payload[: rng.randint(1, 3)]
        else:
            return payload  # no prefix at all: the first four bytes are one
        return prefix + payload
