"""Repair of a damaged replica from an in-sync one, and withdrawal from the ISR.

When the scrubber (or a read) finds a damaged batch in a sealed segment of a
replica hosted here, :func:`repair`:

1. records the damage on the partition and takes this replica out of the ISR
   with a compare-and-swap of the partition's state (:func:`withdraw`); if it
   leads, the same write hands leadership to the first live in-sync replica in
   the next leader epoch. Out of the ISR it cannot be elected, by a failover or
   a preferred-leader election, until it has caught up again;
2. once it follows, fetches the damaged segment's offsets from the leader
   (consumer fetches), checks them (:func:`mq.storage.scrub.check_replacement`:
   sound, exactly the segment's range), writes them aside and syncs them in a
   worker thread, then swaps them in on the log's writer: rename over the
   segment file, sync the directory, drop the old indexes, reopen the segment
   (indexes rebuilt). The follower copied the leader's batches as they were,
   so the segment comes back byte-identical. When the leader cannot serve the
   range as one sound segment, it truncates its log at the damaged segment's
   base offset instead (truncation never walks into the damage) and its
   replica fetcher copies everything from there again. A broker that encrypts at
   rest always truncates (a consumer fetch brings batches opened, in clear);
3. the leader adds it back to the ISR when it has caught up, as for any follower
   (until the damaged range is back, the replica leaves again if a leader acting
   on an older view wrote it back).

With no other live in-sync replica (one replica, or all of them damaged) the
data cannot be repaired here: the partition is marked unrepairable and reads
of the damaged range fail with CORRUPT_DATA until an operator runs
``mq storage repair``. The same withdrawal takes a replica whose log fails to
open out of the ISR, so the controller's elections go elsewhere.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from mq.broker.cluster_io import fetch_body
from mq.broker.partition import Partition, Role
from mq.errors import MQError, error_for_code
from mq.records.batch import parse_header
from mq.replication import cluster_state
from mq.storage import scrub
from mq.storage.scrub import SegmentDamage
from mq.wire.apis_data import FETCH

if TYPE_CHECKING:
    from mq.broker.broker import Broker

log = logging.getLogger(__name__)

WITHDRAW_ATTEMPTS: Final = 10
"""Compare-and-swap attempts at leaving the ISR: each fails only when the state
changed meanwhile (an election, an ISR change), which settles within a few."""
REPAIR_WAIT_S: Final = 60.0
"""How long a repair waits for leadership to move away, and then for the
re-fetch to cover the damaged range, before it gives up (the scrubber tries
again at its next pass): ten session timeouts, far more than a failover takes."""
FETCH_ROUNDS: Final = 1_000
"""Fetches at most for one damaged segment's range: each brings at least one whole
batch and up to a segment's bytes, so a sound range takes one or a few."""
POLL_S: Final = 0.05
FETCH_DRAIN_S: Final = 0.5
"""Added to ``replica_fetch_wait_max_ms`` when waiting for a replica fetch sent before
a withdrawal to be answered: a loaded leader's answer is late by a little more."""
"""How often a repair looks at the partition while it waits."""


async def withdraw(broker: Broker, topic: str, index: int) -> bool:
    """Take this node out of the partition's ISR, handing leadership on if it leads.

    True once it is out (or the partition is gone); False when no other live
    in-sync replica exists to take over: the state is left as it is.
    """
    me = broker.node_id
    for _ in range(WITHDRAW_ATTEMPTS):
        found = await cluster_state.read_partition(broker.store, topic, index)
        if found is None:
            return True
        state, revision = found
        if me not in state.isr and state.leader != me:
            return True
        live = set(broker.view.brokers)
        others = [r for r in state.isr if r != me and r in live]
        if not others:
            return False
        wanted = state._replace(isr=tuple(r for r in state.isr if r != me))
        if state.leader == me:
            wanted = wanted._replace(leader=others[0], leader_epoch=state.leader_epoch + 1)
        written = await cluster_state.replace_partition_state(
            broker.store, topic, index, wanted, revision
        )
        if written is not None:
            log.warning(
                "%s-%d: node %d leaves the ISR %s → %s, leader %d (epoch %d)",
                topic,
                index,
                me,
                list(state.isr),
                list(wanted.isr),
                wanted.leader,
                wanted.leader_epoch,
            )
            return True
    raise MQError(f"{topic}-{index}: the state keeps changing while node {me} leaves the ISR")


async def _until(ready: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


async def _refetched(broker: Broker, partition: Partition, end: int) -> bool:
    """Wait until the log holds everything before ``end`` again (bounded).

    Meanwhile this replica must stay out of the ISR: a leader that changed the ISR
    from a view older than the withdrawal may have written it back, so it leaves
    again whenever the view shows it in.
    """
    deadline = time.monotonic() + REPAIR_WAIT_S
    key = (partition.topic, partition.index)
    while partition.local_end < end:
        if time.monotonic() >= deadline:
            return False
        state = broker.view.partitions.get(key)
        if state is not None and broker.node_id in state.isr:
            await withdraw(broker, *key)
        await asyncio.sleep(POLL_S)
    return True


async def _fetch_range(broker: Broker, partition: Partition, start: int, end: int) -> bytes:
    """The leader's batches holding offsets ``[start, end)``, as one buffer.

    Consumer fetches (below the leader's high watermark; they move nothing on
    the leader), at most :data:`FETCH_ROUNDS` of them. Raises MQError or
    ValueError when the leader cannot serve the range whole.
    """
    topic, index = partition.topic, partition.index
    limit = partition.log.config.segment_bytes
    out = bytearray()
    offset = start
    for _ in range(FETCH_ROUNDS):
        body = fetch_body(topic, index, offset, limit, min_bytes=1)
        response = await broker.peers.call_leader(topic, index, FETCH, body)
        part = response["topics"][0]["partitions"][0]
        if part["error"]:
            raise error_for_code(part["error"])(part["message"])
        data = bytes(part["records"])
        if not data:
            raise ValueError(f"the leader has nothing at offset {offset} (below {end})")
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            if header.base_offset >= end:
                return bytes(out)
            out += data[pos : pos + header.size]
            pos += header.size
            offset = header.next_offset
            if offset >= end:
                return bytes(out)
            if len(out) > 2 * limit:
                raise ValueError(f"offsets {start}-{end - 1} hold more than a segment's bytes")
    raise ValueError(f"offsets {start}-{end - 1} not fetched in {FETCH_ROUNDS} fetches")


async def _rewrite_from_leader(
    broker: Broker, partition: Partition, damage: SegmentDamage, end: int
) -> bool:
    """Rewrite the damaged segment with the leader's batches of its range, in place.

    True once swapped in; False when the leader cannot serve the range as one
    sound segment of the same offsets (then the caller truncates instead).
    """
    base = damage.segment_base
    if partition.log.keyring is not None:
        # consumer fetches bring batches opened: written here they would be in clear
        log.info("%s: encrypted at rest: truncating instead of rewriting", partition.name)
        return False
    try:
        data = await _fetch_range(broker, partition, base, end)
        epochs = [(e.epoch, e.start_offset) for e in partition.log.epochs.entries]
        scrub.check_replacement(data, damage.path, base, end, epochs)
        aside = await asyncio.to_thread(scrub.write_aside, damage.path, data)
        await partition.writer.call(lambda log_: scrub.replace_sealed(log_, base, aside))
    except (MQError, ValueError, OSError) as exc:
        log.warning(
            "%s: cannot rewrite segment %d from the leader (%s); truncating instead",
            partition.name,
            base,
            exc,
        )
        return False
    return True


async def repair(broker: Broker, partition: Partition, damage: SegmentDamage, end: int) -> bool:
    """Repair ``partition``'s replica here from an in-sync one (see the module docstring).

    ``end``: the offset the damaged range ends before (the next segment's base).
    True once the replica holds the range again; False when it cannot be
    repaired now (no healthy in-sync copy, or leadership did not move in time).
    """
    started = time.monotonic()
    topic, index = partition.topic, partition.index
    partition.damage = damage
    # no fetch from here from now on: a leader would take a fetch at the log end as
    # "caught up" and bring this replica back into the ISR
    partition.repairing = True
    for fetcher in broker.replicas.fetchers.values():
        fetcher.remove(topic, index)
    try:
        return await _repair(broker, partition, damage, end, started)
    finally:
        partition.repairing = False
        broker.replicas.apply_written(partition)  # back to its leader's fetcher


async def _repair(
    broker: Broker, partition: Partition, damage: SegmentDamage, end: int, started: float
) -> bool:
    topic, index = partition.topic, partition.index
    if not await withdraw(broker, topic, index):
        if not partition.unrepairable:
            log.error(
                "%s: offsets %s are damaged on broker %d and no other live in-sync replica "
                "has a healthy copy: reads of them fail with CORRUPT_DATA until an operator "
                "runs `mq storage repair --cut` or `--skip` (%s)",
                partition.name,
                damage.offsets(end),
                broker.node_id,
                damage,
            )
        partition.unrepairable = True
        return False
    partition.unrepairable = False
    if not await _until(lambda: partition.role is not Role.LEADER, REPAIR_WAIT_S):
        log.warning("%s: leadership did not move within %s s", partition.name, REPAIR_WAIT_S)
        return False
    if await _rewrite_from_leader(broker, partition, damage, end):
        how = "rewritten from the leader's copy"
    else:
        # a truncated replica must never be elected: a fetch sent before the withdrawal
        # may have brought it back into the ISR; wait until any such fetch is answered,
        # leave again if so, and only then truncate
        await asyncio.sleep(broker.config.replica_fetch_wait_max_ms / 1000 + FETCH_DRAIN_S)
        if not await withdraw(broker, topic, index):
            return False
        await partition.truncate_to(damage.segment_base)
        how = "truncated and fetched again"
    partition.repairing = False
    broker.replicas.apply_written(partition)  # back to its leader's fetcher
    if not await _refetched(broker, partition, end):
        log.warning("%s: the re-fetch did not reach offset %d in time", partition.name, end)
        return False
    partition.damage = None
    log.warning(
        "%s: repaired offsets %s on broker %d (%s) in %.2f s",
        partition.name,
        damage.offsets(end),
        broker.node_id,
        how,
        time.monotonic() - started,
    )
    return True
