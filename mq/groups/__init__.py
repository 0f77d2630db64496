"""Consumer-group bookkeeping: who should own which partition, and when it may.

Pure code with no I/O and no asyncio, so every rule is tested exhaustively
without a broker (STYLE habit 10). The group coordinator in the broker feeds it
join, heartbeat and leave requests and a clock, and sends back what it answers.

- :mod:`mq.groups.assignors`: the ``range``, ``roundrobin`` and ``sticky``
  strategies, pure functions from members, subscriptions and partition counts
  to a target assignment.
- :mod:`mq.groups.rebalance`: the cooperative (incremental) rebalance protocol
  as a state machine (:class:`~mq.groups.rebalance.GroupAssignment`), static
  membership, and session deadlines on an injected clock
  (:class:`~mq.groups.rebalance.Sessions`).
"""
