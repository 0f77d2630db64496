"""A fuzzing client of a live broker: one connection at a time, every answer accounted for.

A :class:`Lane` draws frames from its own seeded ``random.Random`` (see
wire_random.py) and runs the broker's own sans-IO decoding over each before
sending it, so it knows what the broker must do: answer the frame (with an
error, or with a body that fits the API's response schema), stay silent (a
produce with acks=0), or close the connection (a protocol error, or EOF in the
middle of a frame). Responses are read concurrently and matched by
correlation id; the lane records as a failure any answer missing, unexpected
or malformed, any ``UNKNOWN_SERVER_ERROR``, a connection closed when it should
not be or left open when it should be closed, and a damaged batch stored.

Requests that would legitimately destroy data are not sent (see
:func:`refuse_to_send`): the broker may delete or change what it is asked to.
The known topic is written only by produces whose answers are checked, so
:class:`KnownLog` knows every offset it must hold.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wire_random import KNOWN_TOPIC, OFFSETS_TOPIC, SCRATCH_TOPICS, TOPICS, RandomWire, SentRecords

from mq.broker.server import HANDLERS
from mq.errors import InvalidRequestError, MQError, ProtocolError
from mq.records import batch as fmt
from mq.records.records import Header
from mq.wire import apis_core, apis_data, apis_queues, apis_replication
from mq.wire.frames import FrameDecoder
from mq.wire.messages import (
    Request,
    decode_request,
    decode_response,
    encode_request,
    unpack_request,
    unpack_response,
)
from mq.wire.registry import Api, all_apis

MAX_PENDING = 48
"""Answers a lane waits for before it sends more (below the broker's 64 in flight)."""
ANSWER_TIMEOUT_S = 20.0
"""How long a lane waits for an answer, or for a close, before it calls the broker stuck."""
MAX_FETCH_WAIT_MS = 200
"""Longer long polls are not sent: they only slow the fuzz down."""
MAX_NEW_PARTITIONS = 8
"""create_topics asking for more partitions is not sent: each one preallocates disk."""
FLUSH_BYTES = 1 << 16
"""Frames are written when this many bytes wait (or at random, sooner)."""
KEEP_ENDING = 0.15
"""Share of the drawn frames that would end their connection that are sent (see Lane.plan)."""
DESTRUCTIVE = {apis_core.DELETE_TOPICS, apis_core.DELETE_RECORDS, apis_core.ALTER_CONFIGS}
PROTECTED = {KNOWN_TOPIC, OFFSETS_TOPIC}
APIS = all_apis()
WEIGHTED_APIS = [
    api for api in APIS for _ in range(1 if api in DESTRUCTIVE | {apis_core.CREATE_TOPICS} else 3)
]
"""APIs to draw from: those that change topics (and sync the catalog) a third as often."""
FIELD_NAMES = {a.key: [f.name for f in a.request.node.fields] for a in APIS}
Record = tuple[bytes | None, bytes | None, tuple[Header, ...]]


class Rejected(Exception):
    """A drawn frame the fuzz does not send (see :func:`refuse_to_send`)."""


@dataclass
class Expect:
    """A response the broker owes: an error (api None) or a body of ``api``."""

    api: Api[Any, Any] | None
    check: Callable[[Any], None] | None = None
    required: bool = True
    """False when the connection closes right after: the answer may be cancelled."""


@dataclass
class KnownLog:
    """What each partition of the known topic must hold: offset -> record."""

    partitions: int
    records: dict[int, dict[int, Record]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def add(self, partition: int, base_offset: int, records: list[Record], why: str) -> None:
        held = self.records.setdefault(partition, {})
        for offset, record in enumerate(records, base_offset):
            if offset in held:
                self.failures.append(f"{why}: offset {partition}/{offset} was handed out twice")
            held[offset] = record


@dataclass
class Planned:
    """Bytes to send and what the broker must do with them."""

    data: bytes
    expects: list[tuple[int, Expect]]
    ends: bool
    """The broker must close the connection after these bytes (a protocol error)."""
    tail: bytes
    """Bytes of an incomplete frame the broker holds afterwards (the lane then sends EOF)."""


@dataclass
class Lane:
    """Sends ``frames`` frames over as many connections as they need."""

    seed: int
    index: int
    host: str
    port: int
    frames: int
    known: KnownLog
    failures: list[str]
    stats: Counter[str]
    sent: int = 0
    cid: int = 0
    pending: dict[int, Expect] = field(default_factory=dict)
    used: set[int] = field(default_factory=set)
    """Correlation ids of this connection (a function of the frames, unlike ``pending``)."""
    required: int = 0
    progress: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    close_expected: bool = False
    kind: str = ""
    """What the last frame drawn is (for the statistics)."""

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}-{self.index}")
        self.io_rng = random.Random(f"{self.seed}-{self.index}-io")
        """How frames are written, which depends on timing: apart, so the frames do not."""
        self.gen = RandomWire(self.rng)

    def fail(self, message: str) -> None:
        self.failures.append(f"lane {self.index}, after frame {self.sent}: {message}")

    # -- what to send -------------------------------------------------------------------

    def plan(self) -> Planned:
        """The next frame to send and what the broker must do with it.

        Frames that end the connection (a protocol error, or a frame left
        incomplete) are sent only with probability KEEP_ENDING: each costs a
        new connection, and the fuzz is after what reaches the handlers.
        """
        while True:
            data, intact, check = self.draw()
            try:
                planned = self.classify(data, intact, check)
            except Rejected as exc:
                self.stats[f"not sent: {exc}"] += 1
                continue
            if not (planned.ends or planned.tail) or self.rng.random() < KEEP_ENDING:
                self.stats[f"sent: {self.kind}"] += 1
                return planned
            self.stats["not sent: would end the connection"] += 1

    def draw(self) -> tuple[bytes, bytes | None, Callable[[Any], None] | None]:
        """(bytes, the payload of the intact request in them or None, the check of its answer)."""
        rng, gen = self.rng, self.gen
        roll = rng.random()
        api = rng.choice(WEIGHTED_APIS)
        if roll < 0.22 or (roll < 0.34 and api is apis_data.PRODUCE):
            self.kind = "produce"
            return self.produce()
        if roll < 0.34:
            self.kind = "valid request"
            frame = self.encode(api, gen.body(api))
            return frame, frame[4:], self.check_fetch if api is apis_data.FETCH else None
        if roll < 0.76:
            self.kind = "broken fields"
            body = gen.base(api)
            gen.mutate_body(api, body)
            return self.encode(api, body), None, None
        if roll < 0.86:
            self.kind = "random document"
            payload = gen.document([a.key for a in APIS], FIELD_NAMES)
            return len(payload).to_bytes(4, "big") + payload, None, None
        if roll < 0.87:
            self.kind = "random bytes"
            return gen.raw_bytes(), None, None
        self.kind = "damaged frame"
        return gen.damage_frame(self.encode(api, gen.base(api))), None, None

    def encode(self, api: Api[Any, Any], body: Any) -> bytes:
        self.cid += 1
        client = self.rng.choice((None, "fuzz", "", "c" * 255))
        return encode_request(api, 0, (self.index << 24) + self.cid, client, body)

    def produce(self) -> tuple[bytes, bytes, Callable[[Any], None]]:
        """A produce of whole, damaged and odd batches, and the check of its answer."""
        rng, gen = self.rng, self.gen
        acks = rng.choice((-1, -1, 1, 0))
        entries: list[tuple[str, int, SentRecords]] = []
        topics = []
        for _ in range(rng.choice((1, 1, 2))):
            name = rng.choice(TOPICS)
            if acks == 0 and name == KNOWN_TOPIC:  # no answer, so no offsets for the known log
                name = rng.choice(SCRATCH_TOPICS)
            partitions = []
            for _ in range(rng.choice((1, 1, 2, 3))):
                partition = rng.choice((0, 0, 1, 1, 2))
                if name != KNOWN_TOPIC and rng.random() < 0.2:
                    data, sent = gen.odd_batch(), SentRecords([], None)
                elif rng.random() < 0.0005:
                    data, sent = gen.oversized_batch(), SentRecords([], True)
                else:
                    data, sent = gen.batch()
                partitions.append({"partition": partition, "records": data})
                entries.append((name, partition, sent))
            topics.append({"name": name, "partitions": partitions})
        frame = self.encode(
            apis_data.PRODUCE, {"acks": acks, "timeout_ms": 30_000, "topics": topics}
        )
        return frame, frame[4:], lambda response: self.check_produce(response, entries)

    def check_produce(self, response: Any, entries: list[tuple[str, int, SentRecords]]) -> None:
        results = [(t["name"], p) for t in response["topics"] for p in t["partitions"]]
        if [(n, p["partition"]) for n, p in results] != [(n, p) for n, p, _ in entries]:
            self.fail(f"produce answered other partitions than asked: {results}")
            return
        named = Counter((n, p) for n, p, _ in entries)
        for (name, result), (_, partition, sent) in zip(results, entries, strict=True):
            where = f"produce to {name}-{partition}"
            if named[(name, partition)] > 1:  # issue 18, F5: none of a repeated entry goes in
                if result["error"] != InvalidRequestError.code:
                    self.fail(f"{where}: named twice in one produce, not refused: {result}")
                continue
            if result["error"] == 0 and sent.must_fail:
                self.fail(f"{where}: a damaged batch was stored at {result['base_offset']}")
            if name != KNOWN_TOPIC:
                continue
            hosted = partition < self.known.partitions
            if result["error"] == 0 and not hosted:
                self.fail(f"{where}: stored in a partition that does not exist")
            if result["error"] != 0 and hosted and sent.must_fail is False:
                self.fail(f"{where}: whole batches refused: {result}")
            if result["error"] == 0 and hosted:
                self.known.add(partition, result["base_offset"], sent.records, where)

    def check_fetch(self, response: Any) -> None:
        """Whatever a fetch returns is whole batches that pass their CRC."""
        for topic in response["topics"]:
            for part in topic["partitions"]:
                try:
                    for _ in fmt.iter_batches(part["records"]):
                        pass
                except MQError as exc:
                    self.fail(f"fetch of {topic['name']}-{part['partition']} returned {exc!r}")

    def classify(
        self, data: bytes, intact: bytes | None, check: Callable[[Any], None] | None
    ) -> Planned:
        """Run the broker's own decoding over ``data`` to see what it must answer."""
        decoder: FrameDecoder[bytes] = FrameDecoder()
        expects: list[tuple[int, Expect]] = []
        ends = False
        try:
            decoder.feed(data)
            for payload in decoder.frames():
                envelope = unpack_request(payload)
                try:
                    request = decode_request(envelope)
                except MQError:
                    expects.append((envelope.correlation_id, Expect(None)))
                    continue
                own_check = check if payload == intact else None
                refuse_to_send(request, checked=own_check is not None)
                if request.api.key not in HANDLERS:
                    expects.append((request.correlation_id, Expect(None)))
                elif request.api is not apis_data.PRODUCE or request.body["acks"] != 0:
                    expects.append((request.correlation_id, Expect(request.api, own_check)))
        except ProtocolError:
            ends = True
        cids = [cid for cid, _ in expects]
        if len(set(cids)) < len(cids) or not self.used.isdisjoint(cids):
            raise Rejected("a correlation id used before on the connection")
        tail = b"" if ends else data[len(data) - decoder.buffered_bytes :]
        return Planned(data, expects, ends, tail)

    # -- sending and reading ------------------------------------------------------------

    async def run(self) -> None:
        while self.sent < self.frames:
            await self.session()

    async def session(self) -> None:
        """One connection: frames until one ends it, or the lane's budget does.

        Frames are written a few at a time (pipelined, as a client does), and now
        and then a few bytes at a time, so the broker's reads split them anywhere.
        """
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.stats["connections"] += 1
        self.pending, self.used, self.required, self.close_expected = {}, set(), 0, False
        self.closed = asyncio.Event()
        reading = asyncio.create_task(self.read(reader))
        out = bytearray()
        try:
            while self.sent < self.frames and not self.closed.is_set():
                planned = self.plan()
                ending = planned.ends or bool(planned.tail)
                if ending:
                    await self.flush(writer, out)
                    await self.answered()  # answers in flight when it closes may be cancelled
                for cid, expect in planned.expects:
                    expect.required = not ending
                    self.pending[cid] = expect
                    self.used.add(cid)
                    self.required += expect.required
                out += planned.data
                self.sent += 1
                if ending:
                    self.close_expected = True
                    await self.flush(writer, out)
                    if planned.tail:  # the broker waits for the rest of a frame: send EOF
                        writer.write_eof()
                    self.stats["closed after EOF" if planned.tail else "closed by the broker"] += 1
                    await self.wait_closed()
                    return
                if len(out) >= FLUSH_BYTES or self.io_rng.random() < 0.03:
                    await self.flush(writer, out)
                if self.required >= MAX_PENDING:
                    await self.flush(writer, out)
                    while self.required >= MAX_PENDING and not self.closed.is_set():
                        await self.wait_progress()
            await self.flush(writer, out)
            await self.answered()
        except (ConnectionError, OSError) as exc:
            if not self.close_expected:
                self.fail(f"the connection failed: {exc!r}")
        finally:
            writer.close()
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)

    async def flush(self, writer: asyncio.StreamWriter, out: bytearray) -> None:
        data = bytes(out)
        out.clear()
        if not data:
            return
        if len(data) < 2000 and self.io_rng.random() < 0.02:  # a few bytes per segment
            for pos in range(0, len(data), step := self.io_rng.randint(1, 7)):
                if writer.is_closing() or self.closed.is_set():
                    return  # closed by a protocol error in the first bytes
                writer.write(data[pos : pos + step])
                await asyncio.sleep(0)
        else:
            writer.write(data)
        await writer.drain()

    async def wait_progress(self) -> None:
        self.progress.clear()
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                await self.progress.wait()
        except TimeoutError:
            owed = [(cid, e.api.name if e.api else "error") for cid, e in self.pending.items()]
            self.fail(f"no answer within {ANSWER_TIMEOUT_S} s; owed {owed[:10]}")
            raise AssertionError(self.failures[-1]) from None

    async def answered(self) -> None:
        """Wait until every required answer came (or the connection closed)."""
        while self.required > 0 and not self.closed.is_set():
            await self.wait_progress()
        if self.required > 0:
            self.fail(f"the broker closed the connection with {self.required} answers owed")

    async def wait_closed(self) -> None:
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                await self.closed.wait()
        except TimeoutError:
            self.fail("the broker left the connection open after a protocol error or EOF")
            raise AssertionError(self.failures[-1]) from None

    async def read(self, reader: asyncio.StreamReader) -> None:
        decoder: FrameDecoder[bytes] = FrameDecoder()
        try:
            while data := await reader.read(1 << 16):
                decoder.feed(data)
                for payload in decoder.frames():
                    self.answer(payload)
        except (ConnectionError, OSError):
            pass  # a reset after a protocol error: judged below like an EOF
        except ProtocolError as exc:
            self.fail(f"the broker sent a bad frame: {exc}")
        if not self.close_expected:
            self.fail("the broker closed the connection without a protocol error")
        self.closed.set()
        self.progress.set()

    def answer(self, payload: bytes) -> None:
        """Match a response to the request it answers and check it."""
        try:
            envelope = unpack_response(payload)
        except ProtocolError as exc:
            self.fail(f"the broker sent a malformed response: {exc}")
            return
        cid, code = envelope.correlation_id, envelope.error_code
        self.stats[f"answered with error {code}"] += 1
        expect = self.pending.pop(cid, None)
        if expect is None:
            self.fail(f"an answer to correlation id {cid} that nobody asked for")
            return
        self.required -= expect.required
        self.progress.set()
        name = expect.api.name if expect.api else "a request due an error"
        if code == MQError.code:
            self.fail(f"UNKNOWN_SERVER_ERROR for {name}: {envelope.body!r}")
        if code != 0:
            if expect.check is not None:
                self.fail(f"{name} failed as a whole: {code} {envelope.body!r}")
            try:
                decode_response(envelope, expect.api or apis_core.API_VERSIONS, 0)
            except ProtocolError as exc:
                self.fail(f"a malformed error response to {name}: {exc}")
        elif expect.api is None:
            self.fail(f"the broker accepted what its own decoder refuses: {envelope.body!r}")
        else:
            try:
                body = decode_response(envelope, expect.api, 0).body
            except ProtocolError as exc:
                self.fail(f"a {name} response that breaks its schema: {exc}")
                return
            if expect.check is not None:
                expect.check(body)


def topics_named(request: Request[Any]) -> set[str]:
    """The topics a produce or a destructive request acts on."""
    topics = request.body["topics"]
    if request.api is apis_core.DELETE_TOPICS:
        return set(topics)
    return {topic["name"] for topic in topics}


def refuse_to_send(request: Request[Any], *, checked: bool) -> None:
    """Raise Rejected for a request that would legitimately destroy data or stall the fuzz.

    ``checked``: the request is a produce whose answer updates the known log.
    """
    body = request.body
    if request.api in DESTRUCTIVE and topics_named(request) & PROTECTED:
        raise Rejected("it would delete or change protected data")
    writes_known = request.api is apis_data.PRODUCE and KNOWN_TOPIC in topics_named(request)
    if writes_known and (not checked or body["acks"] == 0):
        raise Rejected("it would write to the known topic unchecked")
    long_polls = (apis_data.FETCH, apis_queues.QUEUE_RECEIVE, apis_replication.REPLICA_FETCH)
    if request.api in long_polls and body["max_wait_ms"] > MAX_FETCH_WAIT_MS:
        # a queue_receive may wait 20 s (the answer timeout), a replica_fetch for
        # a partition that gets nothing new up to its max_wait_ms (an int32)
        raise Rejected("a long poll")
    creates = request.api is apis_core.CREATE_TOPICS and not body["validate_only"]
    if creates and sum(max(1, t["partitions"]) for t in body["topics"]) > MAX_NEW_PARTITIONS:
        raise Rejected("too many new partitions")
