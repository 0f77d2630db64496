"""A leader's ISR write computed from an older state never undoes a withdrawal.

A damaged (or offline) follower leaves the ISR with its own compare-and-swap;
its leader, acting on the state it had before (a fetch from that follower,
sent before the withdrawal, made it look caught up), writes the ISR with the
follower in it. Without a check of the revision the leader's ISR came from,
that write put the damaged replica back in the ISR for the milliseconds until
the repair noticed, and an election then could pick it. The write must be
refused (Kafka's partition epoch), and accepted again once based on the
current state.
"""

from __future__ import annotations

from types import SimpleNamespace

from mq.broker.repair import withdraw
from mq.replication import cluster_state
from mq.replication.cluster_state import alter_isr, partition_key, read_partition
from mq.replication.local_store import LocalStore
from mq.replication.placement import PartitionState
from mq.replication.store import Put


async def test_a_stale_isr_write_does_not_bring_a_withdrawn_replica_back() -> None:
    store = LocalStore()
    await store.start()
    state = PartitionState((1, 2, 3), 1, 4, (1, 2))  # 3 is catching up
    assert await store.commit([], [Put(partition_key("t", 0), cluster_state._pack_state(state))])
    found = await read_partition(store, "t", 0)
    assert found is not None
    leader_view = found[1]  # the revision the leader's ISR comes from

    # follower 2 finds damage in its replica and leaves the ISR
    broker = SimpleNamespace(node_id=2, store=store, view=SimpleNamespace(brokers={1: 0, 2: 0}))
    assert await withdraw(broker, "t", 0)  # type: ignore[arg-type]
    found = await read_partition(store, "t", 0)
    assert found is not None
    assert found[0].isr == (1,)

    # the leader, from its older view, adds 3 (caught up) to the ISR it knew: {1, 2, 3}
    stale = await alter_isr(store, "t", 0, 1, 4, [1, 2, 3], based_on=leader_view)
    assert stale is None
    found = await read_partition(store, "t", 0)
    assert found is not None
    assert found[0].isr == (1,), "the withdrawn replica is back in the ISR"

    # from the current state, the same change without 2 goes through
    written = await alter_isr(store, "t", 0, 1, 4, [1, 3], based_on=found[1])
    assert written is not None
    assert written[0].isr == (1, 3)
