"""Checks of a topic's configs that need the cluster: changes applied to what the
topic has, and ``min.insync.replicas`` against the brokers registered.

Pure functions but :func:`broker_count` (one read of the metadata store); the
broker calls them before it writes anything (:meth:`~mq.broker.broker.Broker.create_topic`,
:meth:`~mq.broker.broker.Broker.alter_topics_configs`).
"""

from __future__ import annotations

from collections.abc import Mapping

from mq.broker.catalog import topic_log_config
from mq.errors import InvalidConfigError, UnknownTopicOrPartitionError
from mq.queues.config import FIFO, share_config
from mq.replication.cluster_state import TopicRecord
from mq.replication.membership import live_brokers
from mq.replication.store import MetadataStore
from mq.storage.config import LogConfig


def altered_configs(
    name: str,
    info: TopicRecord | None,
    changes: Mapping[str, str | None],
    defaults: LogConfig,
    brokers: int,
) -> dict[str, str]:
    """Topic ``name``'s configs (``info``: what it has now) with ``changes`` applied (None:
    back to the default), checked; InvalidConfigError or UnknownTopicOrPartitionError."""
    if info is None:
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    configs = dict(info.configs)
    for key, value in changes.items():
        if value is None:
            configs.pop(key, None)
        else:
            configs[key] = value
    topic_log_config(defaults, configs)  # raises InvalidConfigError
    check_min_insync(configs, brokers)
    if share_config(configs).fifo != share_config(info.configs).fifo:
        raise InvalidConfigError(f"{FIFO} of {name} cannot change (as SQS: a new queue)")
    return configs


def check_min_insync(configs: Mapping[str, str], brokers: int) -> None:
    """INVALID_CONFIG if ``min.insync.replicas`` (already checked to be an integer) is
    above the cluster's ``brokers``: no acks=all produce could ever succeed."""
    value = configs.get("min.insync.replicas")
    if value is not None and int(value) > brokers:
        raise InvalidConfigError(
            f"min.insync.replicas is {value}, above the {brokers} broker(s) of the "
            "cluster: no acks=all produce could succeed (range: 1 to the broker count)"
        )


async def broker_count(store: MetadataStore, node_id: int) -> int:
    """The brokers registered now, this one included (read from the store: a broker's
    view may lag behind the registrations)."""
    live, _ = await live_brokers(store)
    return len(live.keys() | {node_id})
