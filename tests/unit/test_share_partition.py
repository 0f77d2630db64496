"""A share partition (SQS semantics on a log) held against a dict (Hypothesis stateful).

Worked examples of each behaviour, one at a time, are in
``test_share_partition_examples.py``.

The model is every record of the log with, for the share group, its state,
delivery count and ``until`` (the lease deadline, or when it becomes visible),
and the dead-letter reason. Everything else (the window's start, what
``acquire`` leases, the FIFO heads, attributes, dedup) is recomputed by
brute-force scans of that list on each call; none of the implementation's heaps,
deques or indexes are reused. A restart restores the persisted snapshot (through
JSON, as the broker stores it), seeds the dedup ids of the records below its
start and re-reads the log from there: the restored partition must then match
the very same model.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from mq.errors import InvalidReceiptError
from mq.queues.headers import DEDUP_ID, DELAY_MS
from mq.queues.share_partition import (
    MAX_IN_FLIGHT,
    SETTLED_MEMORY,
    Acquired,
    Attributes,
    DeadLetter,
    RecordMeta,
    ShareConfig,
    SharePartition,
    State,
)

T0 = 1_700_000_000_000
DEDUP_MS = 50
DONE = (State.ACKED, State.ARCHIVED)
LIVE = (State.AVAILABLE, State.ACQUIRED)
DELAYS: dict[bytes, int | None] = {b"0": 0, b"20": 20, b"80": 80, b"-5": 0, b"soon": None}
"""``mq.delay.ms`` values and the delay they mean (None: not a number, the queue's default)."""
NULL = b"<null>"
"""A header without a value (Kafka allows that)."""
Wanted = dict[str, set[bytes]] | None
FILTERS: list[Wanted] = [
    *[None] * 4,
    {},
    {"tag": {b"x"}},
    {"tag": {b"x", b"y"}},
    {DELAY_MS: {b"20"}},  # reserved headers are not filterable
]


@dataclass
class Rec:
    meta: RecordMeta
    tags: dict[str, bytes]
    state: State
    count: int
    until: int
    reason: str = ""
    gone: bool = False
    """Below the log's start: truncated away."""

    @property
    def offset(self) -> int:
        return self.meta.offset


def size(record: RecordMeta) -> int:
    return len(record.key or b"") + len(record.value or b"")


def wanted_by(tags: Mapping[str, bytes], wanted: Wanted) -> bool:
    return not wanted or all(tags.get(name) in values for name, values in wanted.items())


Spec = tuple[bytes | None, bytes | None, bytes | None, str | None, bytes | None]
LEASES = st.sampled_from([10, 10, 20, 50, 200])
MODES = st.sampled_from([*["valid"] * 5, "wrong", "issued", "settled", "any"])
"""How a receipt is picked: a lease held now, one with a wrong count, any receipt handed
out so far (often stale), one that settled its record already (a client's repeat), or any
offset and count."""
record_specs = st.lists(
    st.tuples(
        st.sampled_from([None, b"a", b"bb"]),  # key
        st.sampled_from([None, b"v", b"v" * 8]),  # value
        st.sampled_from([*[None] * 4, *DELAYS]),  # mq.delay.ms
        st.sampled_from([None, None, "d1", "d2"]),  # mq.dedup.id
        st.sampled_from([None, b"x", b"y", NULL]),  # a "tag" header, for filters
    ),
    min_size=1,
    max_size=5,
)


class ShareMachine(RuleBasedStateMachine):
    @initialize(
        fifo=st.booleans(),
        dead_letter=st.booleans(),
        max_deliveries=st.integers(2, 3),
        max_in_flight=st.sampled_from([2, 3, MAX_IN_FLIGHT]),
        settled_memory=st.sampled_from([2, SETTLED_MEMORY]),
        delay_ms=st.sampled_from([0, 0, 0, 30]),
        start=st.sampled_from([0, 5]),
        specs=record_specs,
    )
    def setup(
        self,
        fifo: bool,
        dead_letter: bool,
        max_deliveries: int,
        max_in_flight: int,
        settled_memory: int,
        delay_ms: int,
        start: int,
        specs: list[Spec],
    ) -> None:
        self.config = ShareConfig(
            max_deliveries=max_deliveries,
            delay_ms=delay_ms,
            fifo=fifo,
            dead_letter=dead_letter,
            max_in_flight=max_in_flight,
            dedup_window_ms=DEDUP_MS,
            settled_memory=settled_memory,
        )
        self.sp = SharePartition(self.config, start)
        self.now = T0
        self.end = start
        self.last_ts = T0 - 1_000
        self.log: list[Rec] = []
        self.dedup: dict[str, int] = {}
        self.acked = self.dead_lettered = self.deduplicated = 0
        self.deliveries: dict[int, list[int]] = {}
        """Offset → the delivery count of every receipt handed out for it."""
        self.settled: dict[tuple[int, int], str] = {}
        """(offset, count) → how that receipt settled it (the last ``settled_memory``)."""
        self.first_delivered: dict[bytes | None, int] = {}
        self.add(specs, 0, 0)  # (rules may be switched off: start with something to do)

    # -- the model ----------------------------------------------------------------------

    @property
    def start(self) -> int:
        pending = [r.offset for r in self.log if not r.gone and r.state not in DONE]
        return min(pending, default=self.end)

    def window(self) -> list[Rec]:
        start = self.start
        return [r for r in self.log if not r.gone and r.offset >= start]

    def head(self, key: bytes | None) -> int | None:
        """The oldest unfinished record of a key (the only one FIFO may deliver)."""
        live = [r.offset for r in self.window() if r.meta.key == key and r.state in LIVE]
        return min(live, default=None)

    def eligible(self, r: Rec) -> bool:
        if r.state is not State.AVAILABLE or r.until > self.now:
            return False
        return not self.config.fifo or self.head(r.meta.key) == r.offset

    def in_flight(self) -> int:
        return sum(r.state is State.ACQUIRED for r in self.window())

    def held(self, offset: int, count: int) -> Rec | None:
        for r in self.window():
            if r.offset == offset and r.state is State.ACQUIRED and r.count == count:
                return r
        return None

    def give_back(self, r: Rec, delay: int, error: str) -> None:
        if r.count >= self.config.max_deliveries:
            self.dead_letter(r, f"{error} (delivery {r.count})")
        else:
            r.state, r.until = State.AVAILABLE, self.now + max(0, delay)

    def dead_letter(self, r: Rec, reason: str) -> None:
        r.reason = reason
        r.state = State.DEAD_LETTERING if self.config.dead_letter else State.ARCHIVED

    # -- rules ----------------------------------------------------------------------------

    @rule(specs=record_specs, lag=st.sampled_from([0, 0, 20, 200]), gap=st.sampled_from([0, 0, 2]))
    def add(self, specs: list[Spec], lag: int, gap: int) -> None:
        ts = self.last_ts = max(self.last_ts, self.now - lag)
        metas = []
        for i, (key, value, delay, dedup_id, tag) in enumerate(specs):
            headers: list[tuple[str, bytes | None]] = []
            if delay is not None:
                headers.append((DELAY_MS, delay))
            if dedup_id is not None:
                headers.append((DEDUP_ID, dedup_id.encode()))
            if tag is not None:
                headers.append(("tag", None if tag == NULL else tag))
            meta = RecordMeta(self.end + i, ts, key, value, tuple(headers))
            metas.append(meta)
            ms = DELAYS[delay] if delay is not None else None
            until = ts + (self.config.delay_ms if ms is None else ms)
            tags = {"tag": tag} if tag and tag != NULL else {}
            r = Rec(meta, tags, State.AVAILABLE, 0, until)
            if dedup_id is not None:
                seen = self.dedup.get(dedup_id)
                if seen is not None and ts - seen < DEDUP_MS:
                    r.state = State.ARCHIVED
                    self.deduplicated += 1
                else:
                    self.dedup[dedup_id] = ts
            self.log.append(r)
        self.end += len(specs) + gap
        self.sp.add(metas, self.end, self.now)

    @rule(ms=st.sampled_from([10, 10, 20, 50, 150]))
    def advance_clock(self, ms: int) -> None:
        self.now += ms

    # (two rules for acquire and for settling: Hypothesis' swarm testing turns rules off)

    @rule(max_records=st.integers(1, 4), lease=LEASES)
    def acquire(self, max_records: int, lease: int) -> None:
        self.acquire_with(max_records, lease, None, None)

    @rule(
        max_records=st.integers(1, 4),
        lease=LEASES,
        wanted=st.sampled_from(FILTERS),
        max_bytes=st.sampled_from([None, 1, 6, 20]),
    )
    def acquire_matching(
        self, max_records: int, lease: int, wanted: Wanted, max_bytes: int | None
    ) -> None:
        self.acquire_with(max_records, lease, wanted, max_bytes)

    def acquire_with(
        self, max_records: int, lease: int, wanted: Wanted, max_bytes: int | None
    ) -> None:
        got = self.sp.acquire(self.now, max_records, lease, wanted, max_bytes)
        expected: list[Acquired] = []
        in_flight, taken = self.in_flight(), 0
        for r in self.window():
            if len(expected) >= max_records or in_flight >= self.config.max_in_flight:
                break
            if max_bytes is not None and expected and taken >= max_bytes:
                break  # past the byte budget (but always one record)
            if self.eligible(r) and wanted_by(r.tags, wanted):
                r.state, r.count, r.until = State.ACQUIRED, r.count + 1, self.now + lease
                in_flight += 1
                taken += size(r.meta)
                expected.append(Acquired(r.offset, r.count, r.until))
        assert got == expected
        by_offset = {r.offset: r for r in self.log}
        for a in got:
            self.deliveries.setdefault(a.offset, []).append(a.deliveries)
            key = by_offset[a.offset].meta.key
            if self.config.fifo and a.deliveries == 1:  # a key's records go out in order
                assert self.first_delivered.get(key, -1) < a.offset
                self.first_delivered[key] = a.offset

    def receipt(self, mode: str, pick: int) -> tuple[int, int]:
        held = [r for r in self.window() if r.state is State.ACQUIRED]
        issued = [(offset, c) for offset, counts in self.deliveries.items() for c in counts]
        if mode == "valid" and held:
            r = held[pick % len(held)]
            return r.offset, r.count
        if mode == "wrong" and held:
            r = held[pick % len(held)]
            return r.offset, r.count + (1 if pick % 2 else -1)
        if mode == "issued" and issued:  # often stale: redelivered, acked, expired...
            return issued[pick % len(issued)]
        settled = list(self.settled)
        if mode == "settled" and settled:
            return settled[pick % len(settled)]
        return pick % (self.end + 2), pick % 4

    def settle_with(self, action: str, offset: int, count: int, arg: int) -> int | None:
        sp, now = self.sp, self.now
        if action == "ack":
            sp.ack(offset, count, now)
        elif action == "release":
            sp.release(offset, count, now, delay_ms=arg)
        elif action == "reject":
            sp.reject(offset, count, now)
        else:
            return sp.extend(offset, count, now, arg)
        return None

    @rule(mode=MODES, pick=st.integers(0, 1_000))
    def ack(self, mode: str, pick: int) -> None:
        self.settle("ack", mode, pick, 0)

    @rule(mode=MODES, pick=st.integers(0, 1_000), visibility=st.sampled_from([0, 10, 50, 200]))
    def extend(self, mode: str, pick: int, visibility: int) -> None:
        self.settle("extend", mode, pick, visibility)

    @rule(
        action=st.sampled_from(["release", "reject"]),
        mode=MODES,
        pick=st.integers(0, 1_000),
        delay=st.sampled_from([0, 0, 10, 50]),
    )
    def give_up(self, action: str, mode: str, pick: int, delay: int) -> None:
        self.settle(action, mode, pick, delay)

    def settle(self, action: str, mode: str, pick: int, arg: int) -> None:
        """ack / release(delay) / reject / extend(visibility), with a valid or stale receipt."""
        offset, count = self.receipt(mode, pick)
        how = "release" if action == "extend" and arg <= 0 else action
        r = self.held(offset, count)
        if r is None:
            if self.settled.get((offset, count)) == how:  # a repeat succeeds, changes nothing
                result = self.settle_with(action, offset, count, arg)
                assert result == (self.now if action == "extend" else None)
                return
            with pytest.raises(InvalidReceiptError):
                self.settle_with(action, offset, count, arg)
            return
        result = self.settle_with(action, offset, count, arg)
        if how != "extend":
            self.settled[(offset, count)] = how
            while len(self.settled) > self.config.settled_memory:
                del self.settled[next(iter(self.settled))]
        if action == "ack":
            r.state = State.ACKED
            self.acked += 1
        elif action == "release":
            self.give_back(r, arg, "released by the consumer")
        elif action == "reject":
            self.dead_letter(r, "rejected by the consumer")
        elif arg <= 0:  # extend(0): a release, at once
            self.give_back(r, 0, "released by the consumer")
            assert result == self.now
        else:
            r.until = self.now + arg
            assert result == r.until

    def expire_model(self) -> int:
        due = [r for r in self.window() if r.state is State.ACQUIRED and r.until <= self.now]
        for r in due:
            self.give_back(r, 0, "visibility timeout expired")
        return len(due)

    @rule()
    def tick(self) -> None:
        """What the broker's timer does: end leases, then look for work and the next wake-up."""
        assert self.sp.expire(self.now) == self.expire_model()
        visible = any(self.eligible(r) for r in self.window())
        expected = visible and self.in_flight() < self.config.max_in_flight
        assert self.sp.has_visible(self.now) == expected
        assert self.sp.ready_count >= sum(self.eligible(r) for r in self.window())  # a bound
        events = [
            r.until
            for r in self.window()
            if r.state is State.ACQUIRED or (r.state is State.AVAILABLE and r.until > self.now)
        ]
        deadline = self.sp.next_deadline()
        assert deadline is None or deadline > self.now  # else the timer would spin
        if events:
            assert deadline is not None
            assert deadline <= min(events)

    @precondition(lambda self: any(r.state is State.DEAD_LETTERING for r in self.window()))
    @rule(pick=st.integers(0, 100))
    def dead_lettered_at(self, pick: int) -> None:
        pending = [r for r in self.window() if r.state is State.DEAD_LETTERING]
        r = pending[pick % len(pending)]
        self.sp.dead_lettered_at(r.offset)
        r.state = State.ARCHIVED
        self.dead_lettered += 1

    @rule(ahead=st.sampled_from([0, 0, 0, 1, 1, 3]))  # mostly a no-op: it loses records
    def truncate_below(self, ahead: int) -> None:
        log_start = self.start + ahead
        for r in self.log:
            r.gone = r.gone or r.offset < log_start
        self.end = max(self.end, log_start)
        self.sp.truncate_below(log_start, self.now)

    def reopen(self, snapshot: dict[str, Any], chunk: int, chunks: int | None) -> SharePartition:
        """A restart: restore, seed dedup ids, re-read the log from the start in chunks."""
        sp = SharePartition.restore(self.config, json.loads(json.dumps(snapshot)))
        sp.seed_dedup(r.meta for r in self.log if r.offset < sp.start)
        todo = [r.meta for r in self.log if r.offset >= sp.start]
        while todo and chunks != 0:
            part, todo = todo[:chunk], todo[chunk:]
            sp.add(part, part[-1].offset + 1 if todo else self.end, self.now)
            chunks = None if chunks is None else chunks - 1
        if chunks is None:
            sp.add([], self.end, self.now)
        return sp

    @rule(chunk=st.sampled_from([1, 3, 1_000]), twice=st.booleans())
    def restart(self, chunk: int, twice: bool) -> None:
        """Snapshot → restore; ``twice``: a second restart while the first is re-reading."""
        snapshot = self.sp.snapshot()
        if twice:
            snapshot = self.reopen(snapshot, chunk, 1).snapshot()
        self.sp = self.reopen(snapshot, chunk, None)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        sp, window, now = self.sp, self.window(), self.now
        assert (sp.start, sp.end) == (self.start, self.end)
        assert not sp.restoring
        entries = list(sp.entries())
        assert [(o, s, c) for o, s, c, _ in entries] == [
            (r.offset, r.state, r.count) for r in window
        ]
        assert {o: u for o, s, _, u in entries if s in LIVE} == {
            r.offset: r.until for r in window if r.state in LIVE
        }
        assert sp.in_flight == self.in_flight()
        states = {r.offset: (r.state, r.count) for r in window}
        sizes = {r.offset: size(r.meta) for r in window}
        for offset in range(self.end + 2):
            assert sp.state_of(offset) == states.get(offset)
            assert sp.size_of(offset) == sizes.get(offset, 0)
        assert sp.pending_dead_letters() == [
            DeadLetter(r.offset, r.count, r.reason)
            for r in window
            if r.state is State.DEAD_LETTERING
        ]
        available = [r for r in window if r.state is State.AVAILABLE]
        visible = [r.meta.timestamp for r in available if r.until <= now]
        assert sp.attributes(now) == Attributes(
            visible=len(visible),
            delayed=len(available) - len(visible),
            in_flight=self.in_flight(),
            dead_lettering=len(sp.pending_dead_letters()),
            oldest_visible_ms=min(visible, default=None),
        )
        assert (sp.acked, sp.dead_lettered, sp.deduplicated) == (
            self.acked,
            self.dead_lettered,
            self.deduplicated,
        )

    @invariant()
    def one_holder_at_a_time(self) -> None:
        """Each delivery has a new count, so only the last receipt names the lease;
        in FIFO mode only a key's oldest unfinished record is leased."""
        keys = {r.offset: r.meta.key for r in self.log}
        entries = list(self.sp.entries())
        for offset, state, count, _ in entries:
            counts = self.deliveries.get(offset, [])
            assert all(a < b for a, b in itertools.pairwise(counts))
            if state is State.ACQUIRED:
                assert counts[-1] == count
                if self.config.fifo:
                    assert not any(
                        keys[o] == keys[offset] and s in LIVE
                        for o, s, _, _ in entries
                        if o < offset
                    )


TestShareMachine = ShareMachine.TestCase
TestShareMachine.settings = settings(max_examples=200, stateful_step_count=40, deadline=None)
