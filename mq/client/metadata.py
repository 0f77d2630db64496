"""The client's cache of cluster metadata: brokers, and topic → partition → leader.

Pure bookkeeping (STYLE habit 10): no I/O and no clock of its own. The
:class:`~mq.client.client.Client` feeds it metadata responses and the time,
and asks it *when* to refresh:

* on demand, after an error that means the cache is stale
  (:func:`needs_metadata_refresh`: NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, a network error …), but
  no sooner than a backoff after the previous attempt — the backoff doubles
  with each consecutive failed or still-incomplete refresh, up to a cap, so a
  client waiting for a topic's leader does not hammer the broker;
* at the latest ``max_age_s`` after the last successful refresh, so new
  partitions and moved leaders are noticed without an error.

Times are seconds on any monotonic clock the caller chooses.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mq.client.types import TopicPartition
from mq.errors import (
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NetworkError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    StorageError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from mq.wire.apis_core import MetadataResponse

DEFAULT_MAX_AGE_S = 300.0
"""Kafka's ``metadata.max.age.ms``: five minutes."""
DEFAULT_BACKOFF_S = 0.1
"""Kafka's ``retry.backoff.ms``."""
DEFAULT_BACKOFF_MAX_S = 1.0
"""Kafka's ``retry.backoff.max.ms``: the cap of the doubling backoff."""

_STALE_ERRORS = (
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
    LeaderNotAvailableError,
    FencedLeaderEpochError,
    UnknownLeaderEpochError,
    NetworkError,
    RequestTimedOutError,
    StorageError,  # the replica's log went offline: another one is elected (Kafka's too)
)


def needs_metadata_refresh(error: BaseException) -> bool:
    """Whether ``error`` means the cached leaders may be wrong (refresh, then retry)."""
    return isinstance(error, _STALE_ERRORS)


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A broker as the metadata response describes it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    http_url: str | None = None
    """Its HTTP listener (``/metrics``, health, console) as a URL; None: it has none, or
    it runs a version that does not say."""


def http_url(endpoint: Mapping[str, Any] | None) -> str | None:
    """A metadata answer's ``http`` entry of a broker as a URL (None: none)."""
    if not endpoint:
        return None
    host = str(endpoint["host"])
    host = f"[{host}]" if ":" in host else host
    return f"{endpoint['scheme']}://{host}:{endpoint['port']}"


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's leader and replicas (``leader`` is -1 while there is none)."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: int


class ClusterMetadata:
    """The cached view of the cluster, and the refresh schedule.

    Not thread-safe; owned by one client on one event loop.
    """

    def __init__(
        self,
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        backoff_s: float = DEFAULT_BACKOFF_S,
        backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
    ) -> None:
        if max_age_s <= 0 or backoff_s < 0 or backoff_max_s < backoff_s:
            raise ValueError("max_age_s > 0 and 0 <= backoff_s <= backoff_max_s are required")
        self.max_age_s = max_age_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, dict[int, PartitionInfo]] = {}
        self.topic_errors: dict[str, int] = {}
        """Topics the last response named with an error (code), e.g. unknown ones."""
        self.topic_messages: dict[str, str] = {}
        """The broker's message for a topic of :attr:`topic_errors`, when it gave one
        (an authorization refusal names the principal, the operation and the topic)."""
        self.internal_topics: set[str] = set()
        self.version = 0
        """Bumped by every update: a cheap way to notice that something changed."""
        self._last_refresh: float | None = None
        self._last_attempt: float | None = None
        self._requested = True  # nothing is known yet
        self._new_topics = False
        self._failures = 0

    # -- refresh schedule ---------------------------------------------------------------

    def request_update(self) -> None:
        """Ask for a refresh as soon as the backoff allows (after a stale-metadata error)."""
        self._requested = True

    def request_update_for_new_topics(self) -> None:
        """Ask for a refresh now: the client needs topics the last one did not ask for.

        The backoff is for failures and stale entries; a refresh that merely
        did not cover a topic just assigned or produced to is no reason to
        wait (that would delay every new consumer's first fetch). After a
        failure the backoff still holds.
        """
        self._requested = True
        self._new_topics = True

    @property
    def update_requested(self) -> bool:
        return self._requested

    def current_backoff(self) -> float:
        """The wait between refresh attempts now: doubled per consecutive failure, capped."""
        backoff: float = self.backoff_s * 2 ** min(self._failures, 30)
        return min(backoff, self.backoff_max_s)

    def time_to_next_update(self, now: float) -> float:
        """Seconds until the next refresh is due (0: now)."""
        if self._last_refresh is None and self._last_attempt is None:
            return 0.0
        if self._requested:
            if self._last_attempt is None or (self._new_topics and not self._failures):
                return 0.0
            return max(0.0, self._last_attempt + self.current_backoff() - now)
        assert self._last_refresh is not None
        return max(0.0, self._last_refresh + self.max_age_s - now)

    def attempt_started(self, now: float) -> None:
        """A refresh request is going out now (the backoff counts from here)."""
        self._last_attempt = now

    def failed_update(self, now: float) -> None:
        """The refresh failed (no broker answered): retry after a longer backoff."""
        self._last_attempt = now
        self._failures += 1
        self._requested = True
        self._new_topics = False

    def update(
        self,
        response: MetadataResponse,
        now: float,
        *,
        wanted: Collection[str] = (),
        complete: bool = False,
    ) -> None:
        """Take in a metadata response.

        ``wanted``: the topics the caller needs leaders for; if one of them is
        still missing or leaderless, a refresh stays requested (with a growing
        backoff) — as while a topic is being created or a leader elected.
        ``complete``: the response lists every topic (a request for all), so
        topics it does not name are forgotten; otherwise unnamed topics keep
        their cached state.
        """
        self.cluster_id = response["cluster_id"]
        self.controller_id = response["controller_id"]
        self.brokers = {
            b["node_id"]: BrokerInfo(
                b["node_id"], b["host"], b["port"], b.get("rack"), http_url(b.get("http"))
            )
            for b in response["brokers"]
        }
        if complete:
            self._topics.clear()
            self.topic_errors.clear()
            self.topic_messages.clear()
            self.internal_topics.clear()
        for topic in response["topics"]:
            name = topic["name"]
            if topic["error"]:
                self.topic_errors[name] = topic["error"]
                message = topic.get("message")
                if message:
                    self.topic_messages[name] = message
                self._topics.pop(name, None)
                continue
            self.topic_messages.pop(name, None)
            self.topic_errors.pop(name, None)
            if topic.get("internal"):
                self.internal_topics.add(name)
            self._topics[name] = {
                p["partition"]: PartitionInfo(
                    name,
                    p["partition"],
                    p["leader"],
                    p["leader_epoch"],
                    tuple(p["replicas"]),
                    tuple(p["isr"]),
                    tuple(p.get("offline_replicas", ())),
                    p["error"],
                )
                for p in topic["partitions"]
            }
        self.version += 1
        self._last_refresh = self._last_attempt = now
        self._new_topics = False
        if self.missing(wanted):
            self._failures += 1
            self._requested = True
        else:
            self._failures = 0
            self._requested = False

    # -- queries --------------------------------------------------------------------------

    def missing(self, topics: Iterable[str]) -> set[str]:
        """Those of ``topics`` that are unknown or have a partition without a leader."""
        out = set()
        for topic in topics:
            parts = self._topics.get(topic)
            if not parts or any(
                p.leader < 0 or p.leader not in self.brokers for p in parts.values()
            ):
                out.add(topic)
        return out

    def topics(self) -> set[str]:
        return set(self._topics)

    def has_topic(self, topic: str) -> bool:
        return topic in self._topics

    def partitions_for(self, topic: str) -> list[int] | None:
        """The topic's partition ids in order, or None if the topic is not known."""
        parts = self._topics.get(topic)
        return None if parts is None else sorted(parts)

    def available_partitions_for(self, topic: str) -> list[int]:
        """The topic's partitions that have a leader now (where keyless records may go)."""
        parts = self._topics.get(topic)
        if parts is None:
            return []
        return sorted(p.partition for p in parts.values() if p.leader >= 0)

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        parts = self._topics.get(tp.topic)
        return None if parts is None else parts.get(tp.partition)

    def leader_for(self, tp: TopicPartition) -> int | None:
        """The node id of the partition's leader, or None when unknown or leaderless."""
        parts = self._topics.get(tp[0])
        if parts is None:
            return None
        info = parts.get(tp[1])
        if info is None or info.leader < 0:
            return None
        return info.leader

    def broker(self, node_id: int) -> BrokerInfo | None:
        return self.brokers.get(node_id)

    def partitions_by_leader(
        self, tps: Iterable[TopicPartition]
    ) -> dict[int | None, list[TopicPartition]]:
        """Group partitions by their leader's node id (None: no known leader)."""
        out: dict[int | None, list[TopicPartition]] = {}
        for tp in tps:
            out.setdefault(self.leader_for(tp), []).append(tp)
        return out
