"""The share state of one partition for one share group: SQS semantics on a log.

Pure bookkeeping: no I/O and no clock (every method that needs the time takes
``now`` in milliseconds), so it is tested against a reference model
(``tests/unit/test_share_partition.py``).

Each record of the partition is, for this share group::

    AVAILABLE --acquire--> ACQUIRED --ack--> ACKED
        ^                    |  |
        +--release/expire----+  +--reject, or release/expire at max_deliveries-->
                                   DEAD_LETTERING --dead_lettered--> ARCHIVED

An acquired record has a lease: a deadline (the visibility timeout) and a
delivery count, incremented by each acquisition. A receipt names the record
and that count, so a consumer whose lease expired (and whose record went to
someone else) cannot ack it. Settling is idempotent: an ack, release or reject
repeated with a receipt that already settled the record the same way succeeds and
changes nothing (the last :data:`SETTLED_MEMORY` settlements are remembered, and
saved). Released records come back AVAILABLE, possibly
only after a delay; a record's first visibility is its timestamp plus its
delay (the ``mq.delay.ms`` header, or the queue's default).
``DEAD_LETTERING`` records wait for the broker to copy them to the dead-letter
queue; without one they go straight to ARCHIVED (dropped). A record whose
``mq.dedup.id`` was seen in the dedup window is ARCHIVED when read: it is
never delivered.

The *window* ``[start, end)`` holds the records read from the log and not yet
done; everything below ``start`` is done (acked, archived or gone) and
everything from ``end`` on has not been read yet. The broker feeds records
with :meth:`SharePartition.add` while :attr:`SharePartition.wants_records`.
In FIFO mode only the oldest unfinished record of each key may be acquired,
so a key's records are delivered one at a time and in order.

Thread safety: none; one event loop owns each instance.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from mq.errors import InvalidReceiptError
from mq.queues.entries import (
    DEDUP_WINDOW_MS,
    DONE,
    MAX_DELAY_MS,
    MAX_IN_FLIGHT,
    MAX_VISIBILITY_MS,
    MAX_WINDOW,
    SETTLED_MEMORY,
    Acquired,
    Attributes,
    DeadLetter,
    Entry,
    Filter,
    RecordMeta,
    Run,
    Settle,
    ShareConfig,
    State,
    delay_of,
    matches,
)
from mq.queues.headers import DEDUP_ID, is_reserved


class SharePartition:
    """One partition's records as seen by one share group."""

    def __init__(self, config: ShareConfig, start: int = 0) -> None:
        self.config = config
        self.start = start
        self.end = start
        self.version = 0
        """Bumped by every change worth persisting (acquisitions, acks, releases…)."""
        self.in_flight = 0
        self.acked = 0
        self.dead_lettered = 0
        self.deduplicated = 0
        self._entries: dict[int, Entry] = {}
        self._order: deque[int] = deque()
        self._ready: list[int] = []
        self._delayed: list[tuple[int, int]] = []
        self._leases: list[tuple[int, int, int]] = []
        self._keys: dict[bytes | None, deque[int]] = {}
        self._dead_letters: dict[int, Entry] = {}
        self._dedup: dict[str, int] = {}
        self._dedup_order: deque[tuple[int, str]] = deque()
        self._restored: deque[Run] = deque()
        self._settled: dict[tuple[int, int], Settle] = {}
        """(offset, count) → how that receipt settled it (bounded)."""
        self._settled_order: deque[tuple[int, int, int]] = deque()
        """The same, oldest first, as saved (a snapshot copies it in one step)."""
        self._touched_end = -1
        """No record above this offset has left its first state (bounds a snapshot's scan)."""

    # -- reading the log ------------------------------------------------------------------

    @property
    def wants_records(self) -> bool:
        """Whether the broker should read more records (from :attr:`end`) into the window."""
        return len(self._entries) < self.config.max_window or self.restoring

    @property
    def restoring(self) -> bool:
        """Whether persisted state waits for records not read yet (read them before acks)."""
        return bool(self._restored)

    def forget_restored(self) -> None:
        """The log ends before records the saved state names (it lost them): drop those."""
        self._restored.clear()

    def seed_dedup(self, records: Iterable[RecordMeta]) -> None:
        """Learn the dedup ids of records just below :attr:`start` (after a restore)."""
        for record in records:
            if record.offset < self.start:
                self._dedup_check(record)

    def add(self, records: Iterable[RecordMeta], next_offset: int, now: int) -> None:
        """Records read from :attr:`end` on; ``next_offset`` is the offset after the read."""
        config = self.config
        for record in records:
            offset = record.offset
            if offset < self.end or offset < self.start:
                continue
            tags: dict[str, bytes] | None = None
            if record.headers:
                tags = {
                    name: value
                    for name, value in record.headers
                    if value is not None and not is_reserved(name)
                }
            duplicate = self._dedup_check(record)
            until = record.timestamp + delay_of(record.headers, config.delay_ms)
            size = len(record.key or b"") + len(record.value or b"")
            entry = Entry(
                State.AVAILABLE, 0, until, record.timestamp, record.key, tags or None, size
            )
            if self._apply_restored(offset, entry):
                self._touched_end = offset
            elif duplicate:  # (a restored record was counted before the restart)
                entry.state = State.ARCHIVED
                self.deduplicated += 1
                self._touched_end = offset
            self._entries[offset] = entry
            self._order.append(offset)
            self.end = offset + 1
            if entry.state in DONE:
                continue
            if config.fifo and entry.state is not State.DEAD_LETTERING:
                self._keys.setdefault(entry.key, deque()).append(offset)
            if entry.state is State.AVAILABLE:
                self._schedule(offset, entry, now)
            elif entry.state is State.ACQUIRED:
                self.in_flight += 1
                heapq.heappush(self._leases, (entry.until, offset, entry.count))
            else:
                self._dead_letters[offset] = entry
        self.end = max(self.end, next_offset)
        self._advance()

    def _dedup_check(self, record: RecordMeta) -> bool:
        """True if the record is a duplicate; otherwise its dedup id (if any) is remembered."""
        dedup_id = None
        for name, value in record.headers:
            if name == DEDUP_ID and value is not None:
                dedup_id = value.decode("utf-8", "replace")
        if dedup_id is None:
            return False
        window = self.config.dedup_window_ms
        order = self._dedup_order
        while order and order[0][0] <= record.timestamp - window:
            ts, old = order.popleft()
            if self._dedup.get(old) == ts:
                del self._dedup[old]
        seen = self._dedup.get(dedup_id)
        if seen is not None and record.timestamp - seen < window:
            return True
        self._dedup[dedup_id] = record.timestamp
        order.append((record.timestamp, dedup_id))
        return False

    def _apply_restored(self, offset: int, entry: Entry) -> bool:
        restored = self._restored
        while restored and restored[0][1] < offset:
            restored.popleft()
        if not restored or restored[0][0] > offset:
            return False
        _, last, state, count, until, error = restored[0]
        if last == offset:  # the run is all read: drop it (else ``restoring`` stays on)
            restored.popleft()
        entry.state, entry.count, entry.error = State(state), count, error
        if state != State.AVAILABLE or until:
            entry.until = until
        return True

    # -- consumers ------------------------------------------------------------------------

    def acquire(
        self,
        now: int,
        max_records: int,
        lease_ms: int,
        wanted: Filter | None = None,
        max_bytes: int | None = None,
    ) -> list[Acquired]:
        """Lease up to ``max_records`` visible records, oldest first (matching ``wanted``);
        past ``max_bytes`` of keys and values no more (but always one, if any)."""
        self._promote(now)
        out: list[Acquired] = []
        budget = max_bytes if max_bytes is not None else -1
        skipped: set[int] = set()
        ready, entries, fifo = self._ready, self._entries, self.config.fifo
        while ready and len(out) < max_records and self.in_flight < self.config.max_in_flight:
            if max_bytes is not None and out and budget <= 0:
                break
            offset = heapq.heappop(ready)
            entry = entries.get(offset)
            if entry is None or entry.state is not State.AVAILABLE or entry.until > now:
                continue
            if fifo and self._keys[entry.key][0] != offset:
                continue
            if wanted and not matches(entry.tags, wanted):
                skipped.add(offset)
                continue
            entry.state = State.ACQUIRED
            entry.count += 1
            entry.until = now + lease_ms
            heapq.heappush(self._leases, (entry.until, offset, entry.count))
            self.in_flight += 1
            budget -= entry.size
            out.append(Acquired(offset, entry.count, entry.until))
        for offset in skipped:
            heapq.heappush(ready, offset)
        if out:
            self.version += 1
            self._touched_end = max(self._touched_end, out[-1].offset)
        return out

    def ack(self, offset: int, count: int, now: int) -> None:
        if self._settled.get((offset, count)) is Settle.ACK:
            return  # a repeat: it took effect
        entry = self._held(offset, count)
        entry.state = State.ACKED
        self.in_flight -= 1
        self.acked += 1
        self._finished(offset, entry, now)
        self._remember(offset, count, Settle.ACK)
        self.version += 1

    def release(
        self, offset: int, count: int, now: int, delay_ms: int = 0, error: str | None = None
    ) -> None:
        """Give a record back (a nack): visible again after ``delay_ms``, unless it is out
        of deliveries, in which case it is dead-lettered."""
        if self._settled.get((offset, count)) is Settle.RELEASE:
            return
        entry = self._held(offset, count)
        self.in_flight -= 1
        self._give_back(offset, entry, now, delay_ms, error or "released by the consumer")
        self._remember(offset, count, Settle.RELEASE)
        self.version += 1

    def reject(self, offset: int, count: int, now: int, error: str | None = None) -> None:
        """The consumer cannot process the record: dead-letter it now."""
        if self._settled.get((offset, count)) is Settle.REJECT:
            return
        entry = self._held(offset, count)
        self.in_flight -= 1
        self._dead_letter(offset, entry, now, error or "rejected by the consumer")
        self._remember(offset, count, Settle.REJECT)
        self.version += 1

    def extend(self, offset: int, count: int, now: int, visibility_ms: int) -> int:
        """Set the lease to end ``visibility_ms`` from now (0 releases the record at once,
        as SQS's ChangeMessageVisibility); returns the new deadline."""
        if visibility_ms <= 0 and self._settled.get((offset, count)) is Settle.RELEASE:
            return now
        entry = self._held(offset, count)
        if visibility_ms <= 0:
            self.release(offset, count, now)
            return now
        entry.until = now + visibility_ms
        heapq.heappush(self._leases, (entry.until, offset, count))
        self.version += 1
        return entry.until

    def _remember(self, offset: int, count: int, how: Settle) -> None:
        settled, order = self._settled, self._settled_order
        settled[(offset, count)] = how
        order.append((offset, count, int(how)))
        while len(order) > self.config.settled_memory:
            old_offset, old_count, _ = order.popleft()
            del settled[(old_offset, old_count)]

    def _held(self, offset: int, count: int) -> Entry:
        entry = self._entries.get(offset)
        if entry is None or entry.state is not State.ACQUIRED or entry.count != count:
            raise InvalidReceiptError(
                f"offset {offset} (delivery {count}) is not leased under this receipt: "
                "its lease expired, or it was redelivered, acked or dead-lettered"
            )
        return entry

    def never_delivered(self, offset: int, count: int) -> bool:
        """Whether no delivery ``count`` of ``offset`` ever happened (a receipt naming no
        delivery: a record not read yet, or fewer deliveries so far), as opposed to a
        delivery whose lease ended or that was settled. Below :attr:`start` everything
        is done, so a receipt there counts as settled."""
        if count < 1:
            return True
        entry = self._entries.get(offset)
        if entry is not None:
            return entry.count < count
        if offset < self.end:
            return False
        return not any(
            first <= offset <= last and count <= n for first, last, _, n, _, _ in self._restored
        )

    # -- time -----------------------------------------------------------------------------

    def expire(self, now: int) -> int:
        """End the leases whose deadline passed; returns how many ended."""
        leases, entries, ended = self._leases, self._entries, 0
        while leases and leases[0][0] <= now:
            until, offset, count = heapq.heappop(leases)
            entry = entries.get(offset)
            if (
                entry is None
                or entry.state is not State.ACQUIRED
                or entry.count != count
                or entry.until != until
            ):
                continue
            self.in_flight -= 1
            self._give_back(offset, entry, now, 0, "visibility timeout expired")
            ended += 1
        if ended:
            self.version += 1
        return ended

    def next_deadline(self) -> int | None:
        """The earliest moment something may change by itself (a lease or a delay ends)."""
        times = [heap[0][0] for heap in (self._leases, self._delayed) if heap]
        return min(times) if times else None

    @property
    def ready_count(self) -> int:
        """Records that may be visible now (an upper bound: some may be stale)."""
        return len(self._ready)

    def has_visible(self, now: int) -> bool:
        """Whether :meth:`acquire` (without a filter) could lease something now."""
        self._promote(now)
        ready, entries, keys = self._ready, self._entries, self._keys
        while ready:  # drop stale offsets (acquire would skip them too)
            entry = entries.get(ready[0])
            if (
                entry is not None
                and entry.state is State.AVAILABLE
                and entry.until <= now
                and (not self.config.fifo or keys[entry.key][0] == ready[0])
            ):
                break
            heapq.heappop(ready)
        return bool(ready) and self.in_flight < self.config.max_in_flight

    # -- dead letters ---------------------------------------------------------------------

    @property
    def has_dead_letters(self) -> bool:
        """Whether records wait to be copied to the dead-letter queue."""
        return bool(self._dead_letters)

    def pending_dead_letters(self) -> list[DeadLetter]:
        return [
            DeadLetter(offset, entry.count, entry.error or "")
            for offset, entry in sorted(self._dead_letters.items())
        ]

    def drop_dead_letters(self) -> None:
        """The queue no longer has a dead-letter queue: the waiting letters are dropped."""
        for entry in self._dead_letters.values():
            entry.state = State.ARCHIVED
        if self._dead_letters:
            self._dead_letters.clear()
            self._advance()
            self.version += 1

    def dead_lettered_at(self, offset: int) -> None:
        """The broker copied the record to the dead-letter queue."""
        entry = self._dead_letters.pop(offset)
        entry.state = State.ARCHIVED
        self.dead_lettered += 1
        self._advance()
        self.version += 1

    # -- transitions ----------------------------------------------------------------------

    def _give_back(self, offset: int, entry: Entry, now: int, delay_ms: int, error: str) -> None:
        entry.error = error
        if entry.count >= self.config.max_deliveries:
            self._dead_letter(offset, entry, now, f"{error} (delivery {entry.count})")
            return
        entry.state = State.AVAILABLE
        entry.until = now + max(0, delay_ms)
        self._schedule(offset, entry, now)

    def _dead_letter(self, offset: int, entry: Entry, now: int, reason: str) -> None:
        entry.error = reason
        if self.config.dead_letter:
            entry.state = State.DEAD_LETTERING
            self._dead_letters[offset] = entry
        else:
            entry.state = State.ARCHIVED
        self._finished(offset, entry, now)

    def _finished(self, offset: int, entry: Entry, now: int) -> None:
        """The record left the deliverable states: free its key, move the window on."""
        if self.config.fifo:
            keyed = self._keys[entry.key]
            keyed.popleft()
            if not keyed:
                del self._keys[entry.key]
            else:
                head = keyed[0]
                nxt = self._entries[head]
                if nxt.state is State.AVAILABLE and nxt.until <= now:
                    heapq.heappush(self._ready, head)
        self._advance()

    def _schedule(self, offset: int, entry: Entry, now: int) -> None:
        if entry.until > now:
            heapq.heappush(self._delayed, (entry.until, offset))
        elif not self.config.fifo or self._keys[entry.key][0] == offset:
            heapq.heappush(self._ready, offset)

    def _promote(self, now: int) -> None:
        delayed, entries, fifo = self._delayed, self._entries, self.config.fifo
        while delayed and delayed[0][0] <= now:
            until, offset = heapq.heappop(delayed)
            entry = entries.get(offset)
            if entry is None or entry.state is not State.AVAILABLE or entry.until != until:
                continue
            if not fifo or self._keys[entry.key][0] == offset:
                heapq.heappush(self._ready, offset)

    def _advance(self) -> None:
        order, entries = self._order, self._entries
        while order and entries[order[0]].state in DONE:
            del entries[order.popleft()]
        self.start = order[0] if order else self.end

    def truncate_below(self, log_start: int, now: int) -> None:
        """The log's start moved past records of the window (retention, purge): forget them."""
        if log_start <= self.start:
            return
        order, entries = self._order, self._entries
        while order and order[0] < log_start:
            offset = order.popleft()
            entry = entries.pop(offset)
            if entry.state is State.ACQUIRED:
                self.in_flight -= 1
            self._dead_letters.pop(offset, None)
            if self.config.fifo and entry.state in (State.AVAILABLE, State.ACQUIRED):
                keyed = self._keys[entry.key]
                was_head = keyed[0] == offset
                keyed.remove(offset)
                if not keyed:
                    del self._keys[entry.key]
                elif was_head:
                    self._schedule(keyed[0], entries[keyed[0]], now)
        self.end = max(self.end, log_start)
        self._advance()  # the window starts at its first unfinished record
        self.version += 1

    # -- views ----------------------------------------------------------------------------

    def state_of(self, offset: int) -> tuple[State, int] | None:
        """A record's state and delivery count, if it is in the window."""
        entry = self._entries.get(offset)
        return None if entry is None else (entry.state, entry.count)

    def size_of(self, offset: int) -> int:
        """Bytes of a windowed record's key and value (0 if it is not in the window)."""
        entry = self._entries.get(offset)
        return 0 if entry is None else entry.size

    def entries(self) -> Iterator[tuple[int, State, int, int]]:
        """(offset, state, count, until) of every record in the window, in offset order."""
        for offset in self._order:
            entry = self._entries[offset]
            yield offset, entry.state, entry.count, entry.until

    def attributes(self, now: int) -> Attributes:
        visible = delayed = 0
        oldest: int | None = None
        for entry in self._entries.values():
            if entry.state is not State.AVAILABLE:
                continue
            if entry.until > now:
                delayed += 1
            else:
                visible += 1
                if oldest is None or entry.timestamp < oldest:
                    oldest = entry.timestamp
        return Attributes(visible, delayed, self.in_flight, len(self._dead_letters), oldest)

    # -- persistence ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything a restart needs: the start, and runs of records in a non-initial
        state (leases keep their deadlines, so a consumer can still ack after a restart)."""
        runs: list[list[Any]] = []
        last: list[Any] | None = None
        touched_end = self._touched_end
        for offset in self._order:
            if offset > touched_end:
                break
            entry = self._entries[offset]
            if entry.state is State.AVAILABLE and entry.count == 0:
                last = None
                continue
            until = entry.until if entry.state is not State.AVAILABLE or entry.count else 0
            row = [int(entry.state), entry.count, until, entry.error]
            if last is not None and last[2:] == row:
                last[1] = offset
            else:
                last = [offset, offset, *row]
                runs.append(last)
        runs.extend(list(run) for run in self._restored)
        return {
            "start": self.start,
            "runs": runs,
            "acked": self.acked,
            "dead_lettered": self.dead_lettered,
            "deduplicated": self.deduplicated,
            "settled": list(self._settled_order),
        }

    @classmethod
    def restore(cls, config: ShareConfig, snapshot: Mapping[str, Any]) -> SharePartition:
        """The state :meth:`snapshot` saved; records come back as the broker reads them."""
        share = cls(config, int(snapshot["start"]))
        share.acked = int(snapshot.get("acked", 0))
        share.dead_lettered = int(snapshot.get("dead_lettered", 0))
        share.deduplicated = int(snapshot.get("deduplicated", 0))
        for offset, count, how in snapshot.get("settled", ()):
            share._remember(int(offset), int(count), Settle(how))
        share._restored = deque(
            (int(a), int(b), int(s), int(c), int(u), e) for a, b, s, c, u, e in snapshot["runs"]
        )
        return share


__all__ = [
    "DEDUP_WINDOW_MS",
    "DONE",
    "MAX_DELAY_MS",
    "MAX_IN_FLIGHT",
    "MAX_VISIBILITY_MS",
    "MAX_WINDOW",
    "SETTLED_MEMORY",
    "Acquired",
    "Attributes",
    "DeadLetter",
    "Entry",
    "Filter",
    "RecordMeta",
    "Run",
    "Settle",
    "ShareConfig",
    "SharePartition",
    "State",
    "delay_of",
    "matches",
]
