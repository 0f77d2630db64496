"""The gauges of ``/metrics``, computed from the broker's state when someone scrapes.

Nothing here runs unless ``/metrics`` is asked for: lag, queue depth, sizes and
replication state are read in place (O(partitions + groups' committed offsets
+ loaded share partitions), capped by ``metrics_max_labelled`` per family),
plus at most one batch read per lagging group-partition and per queue with an
unread backlog, to learn a record's timestamp.

Where the numbers come from:

* consumer-group lag: this broker's coordinator's committed offsets, for the
  partitions this broker holds a replica of (the end is that replica's high
  watermark). A group's partitions hosted elsewhere are exported by no broker
  (the coordinator alone knows the offsets and would need a request to learn
  the end): on a single node, everything is there.
* queues: the share partitions loaded on this broker (the leader of each
  partition serves its queue): visible (with the unread backlog), in flight,
  delayed; the oldest visible message's age.
* replication: partitions led here with fewer in-sync replicas than replicas;
  offline partitions (without a leader) as the controller sees them (0 elsewhere,
  as Kafka's ``OfflinePartitionsCount``).

Thread safety: the event loop (an aiohttp handler).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from mq.broker.broker import Broker
from mq.broker.partition import Partition
from mq.errors import MQError
from mq.records.batch import parse_header
from mq.records.records import decode_records


def timestamp_at(partition: Partition, offset: int) -> int | None:
    """The timestamp (ms) of the record at ``offset`` (one batch read), or None."""
    try:
        found = partition.log.read(offset, 1, partition.high_watermark)
    except (MQError, OSError):
        return None
    if found is None or not found.data:
        return None
    header = parse_header(found.data)
    if offset <= header.base_offset:
        return header.base_timestamp
    batch = found.data[: header.size]
    for record in decode_records(batch):  # once per scrape and partition: not the hot path
        if record.offset >= offset:
            return record.timestamp
    return header.max_timestamp


class Capped:
    """A gauge family that keeps at most ``cap`` label sets and counts the rest."""

    def __init__(self, name: str, doc: str, labels: list[str], cap: int) -> None:
        self.family = GaugeMetricFamily(name, doc, labels=labels)
        self.name = name
        self.cap = cap
        self.series = 0
        self.dropped = 0

    def add(self, labels: list[str], value: float) -> None:
        if self.series >= self.cap:
            self.dropped += 1
            return
        self.series += 1
        self.family.add_metric(labels, value)


def state_gauges(broker: Broker, cap: int) -> Iterator[Metric]:
    """Every gauge of the broker's state, then ``mq_metrics_series_dropped``."""
    now_ms = time.time() * 1000
    capped: list[Capped] = []

    lag = Capped(
        "mq_consumer_group_lag",
        "Records a consumer group has not committed: end offset (high watermark) minus "
        "committed offset.",
        ["group", "topic", "partition"],
        cap,
    )
    lag_s = Capped(
        "mq_consumer_group_lag_seconds",
        "Age of the oldest record a consumer group has not committed (0 when caught up).",
        ["group", "topic", "partition"],
        cap,
    )
    capped += [lag, lag_s]
    coordinator = broker.coordinator
    if coordinator is not None:
        for group in sorted(coordinator.offsets.groups()):
            for tp, committed in sorted(coordinator.offsets.committed(group).items()):
                partition = broker.partitions.get((tp.topic, tp.partition))
                if partition is None:
                    continue  # hosted elsewhere: its end is not known here
                if lag.series >= cap:  # past the cap: no batch read either
                    lag.dropped += 1
                    lag_s.dropped += 1
                    continue
                start = max(committed.offset, partition.log.log_start_offset)
                end = partition.high_watermark
                labels = [group, tp.topic, str(tp.partition)]
                lag.add(labels, max(0, end - committed.offset))
                age = 0.0
                if start < end:
                    stamp = timestamp_at(partition, start)
                    if stamp is None:
                        continue
                    age = max(0.0, (now_ms - stamp) / 1000)
                lag_s.add(labels, age)

    messages = Capped(
        "mq_queue_messages",
        "Messages of a queue (share group) by state: visible (including those not read "
        "into the window yet), in_flight (leased), delayed.",
        ["queue", "group", "state"],
        cap,
    )
    oldest = Capped(
        "mq_queue_oldest_message_age_seconds",
        "Age of the oldest visible message of a queue (SQS's ApproximateAgeOfOldestMessage).",
        ["queue", "group"],
        cap,
    )
    capped += [messages, oldest]
    if broker.queues is not None:
        totals: dict[tuple[str, str], list[float]] = {}
        for session in broker.queues.loaded():
            share, partition = session.share, session.partition
            if session.closed or not partition.is_leader:
                continue
            attributes = share.attributes(int(now_ms))
            backlog = max(0, partition.high_watermark - share.end)
            row = totals.setdefault((session.key.topic, session.key.group), [0, 0, 0, -1.0])
            row[0] += attributes.visible + backlog
            row[1] += attributes.in_flight
            row[2] += attributes.delayed
            stamp = attributes.oldest_visible_ms
            if stamp is None and backlog:
                stamp = timestamp_at(partition, share.end)
            if stamp is not None:
                row[3] = max(row[3], (now_ms - stamp) / 1000)
        for (queue, group), (visible, in_flight, delayed, age) in sorted(totals.items()):
            messages.add([queue, group, "visible"], visible)
            messages.add([queue, group, "in_flight"], in_flight)
            messages.add([queue, group, "delayed"], delayed)
            oldest.add([queue, group], max(0.0, age))

    under = Capped(
        "mq_partition_under_replicated",
        "1 for a partition led here with fewer in-sync replicas than replicas.",
        ["topic", "partition"],
        cap,
    )
    size = Capped(
        "mq_log_size_bytes",
        "Bytes of a partition's log on this broker (every segment).",
        ["topic", "partition"],
        cap,
    )
    capped += [under, size]
    for (topic, index), partition in sorted(broker.partitions.items()):
        labels = [topic, str(index)]
        size.add(labels, partition.log.size_bytes)
        if partition.is_leader and partition.state is not None:
            under.add(labels, 1 if len(partition.isr) < len(partition.state.replicas) else 0)

    controller = broker.view.controller
    is_controller = controller is not None and controller.node_id == broker.node_id
    yield GaugeMetricFamily(
        "mq_is_controller", "1 on the cluster's controller.", value=1 if is_controller else 0
    )
    offline = 0
    if is_controller:
        offline = sum(1 for state in broker.view.partitions.values() if state.leader < 0)
    yield GaugeMetricFamily(
        "mq_offline_partitions",
        "Partitions without a leader (reported by the controller, 0 on other brokers).",
        value=offline,
    )
    dropped = GaugeMetricFamily(
        "mq_metrics_series_dropped",
        "Label sets left out of this scrape by metrics_max_labelled.",
        labels=["metric"],
    )
    for family in capped:
        yield family.family
        dropped.add_metric([family.name], family.dropped)
    yield dropped
