"""The pipeline's topics: made on first use, so that either command may run first."""

from __future__ import annotations

from typing import Final

from mq.client.sync import SyncAdmin
from mq.errors import TopicAlreadyExistsError

INPUT_PARTITIONS: Final = 3
"""Partitions of a new input topic: a few, so that Spark reads it with parallel tasks."""


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> bool:
    """Create ``topic`` with ``partitions`` unless it exists; True if this call created it.

    An existing topic is left as it is (whatever its partition count): the
    job's results do not depend on how the lines are partitioned.
    """
    with SyncAdmin(bootstrap) as admin:
        if topic in admin.list_topics():
            return False
        try:
            admin.create_topic(topic, partitions)
        except TopicAlreadyExistsError:  # created meanwhile, by the other command
            return False
        return True
