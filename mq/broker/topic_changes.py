"""Topic changes on a broker: create, delete, reconfigure, and catching up on topics
another broker just made.

Each change is checked here, written by the controller (this broker's seat when it
is the controller, else forwarded to it: :class:`~mq.broker.peers.Peers`), and
returns once this broker's view shows it, within :data:`WAIT_S`. Split from
:class:`~mq.broker.broker.Broker`, which owns one as ``broker.topics``.

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mq.broker.catalog import INTERNAL_TOPICS, topic_log_config
from mq.broker.pacing import Pacer
from mq.broker.topic_configs import altered_configs, broker_count, check_min_insync
from mq.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    MQError,
    NotControllerError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from mq.replication.cluster_state import TopicRecord, topic_key
from mq.replication.controller import ControllerSeat
from mq.wire.apis_core import CREATE_TOPICS, CreateTopicsResponse
from mq.wire.limits import validate_topic_name

if TYPE_CHECKING:
    from mq.broker.broker import Broker

log = logging.getLogger(__name__)

WAIT_S = 10.0
"""How long a topic change waits for the view to show it."""
CATCH_UP_CHUNK = 2_048
"""Names :meth:`TopicChanges.catch_up_on_many` looks up per turn of the loop: well under a
millisecond of dictionary work, so a 100,000-name metadata request gives ~50 turns."""


class TopicChanges:
    """A broker's topic changes (see the module docstring)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        *,
        validate_only: bool = False,
        internal: bool = False,
        cap_to_live: bool = False,
    ) -> TopicRecord:
        """Create a topic on the controller (``partitions``/``replication_factor`` of -1:
        the defaults); returns once this broker's view has it.

        ``cap_to_live``: fewer replicas if fewer brokers are alive (auto-created and
        internal topics), rather than INVALID_REPLICATION_FACTOR.
        """
        validate_topic_name(name)
        if name in self._broker.view.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if self._broker.replicas.deleting(name):
            raise TopicAlreadyExistsError(f"topic {name!r} is still being deleted")
        count = self._broker.config.default_partitions if partitions == -1 else partitions
        if count < 1:
            raise InvalidPartitionsError(f"a topic needs at least one partition, got {count}")
        if replication_factor == -1:
            replication_factor = self._broker.config.default_replication_factor
        if replication_factor < 1:
            raise InvalidReplicationFactorError(
                f"replication factor must be >= 1, got {replication_factor}"
            )
        configs = dict(configs or {})
        topic_log_config(self._broker.config.log, configs)  # raises InvalidConfigError
        if "min.insync.replicas" in configs:
            check_min_insync(configs, await broker_count(self._broker.store, self._broker.node_id))
        seat = self._controller_seat()
        record = await seat.create_topic(
            name,
            count,
            -replication_factor if cap_to_live else replication_factor,
            configs,
            internal=internal,
            validate_only=validate_only,
        )
        if not validate_only:
            await self._broker.wait_topic_ready(name)
            log.info("created topic %s with %d partitions", name, count)
        return record

    async def catch_up_on(self, name: str) -> TopicRecord | None:
        """A topic this broker's view does not have yet, if the store has it.

        Another broker may just have created it (the watch brings it a moment
        later): one read of the store, then a bounded wait for the view to
        reach that revision, so a client sees its own topic wherever it asks.
        """
        found = self._broker.view.topics.get(name)
        if found is not None:
            return found
        entry = await self._broker.store.get(topic_key(name))
        if entry is None:
            return None
        revision = entry.mod_revision
        with contextlib.suppress(RequestTimedOutError):
            await self._broker.wait_for_view(
                lambda: self._broker.view.revision >= revision, WAIT_S / 2
            )
        return self._broker.view.topics.get(name)

    async def catch_up_on_many(self, names: list[str]) -> dict[str, TopicRecord]:
        """:meth:`catch_up_on` for many names: the topics this broker's view lacks but the
        store has, read a chunk of :data:`CATCH_UP_CHUNK` names per turn of the loop (a
        metadata request may name 100,000 topics that do not exist: one read of the
        store each held everyone else: issue 18), then one bounded wait for the view
        to reach the newest of them."""
        topics = self._broker.view.topics
        found: dict[str, int] = {}
        for start in range(0, len(names), CATCH_UP_CHUNK):
            if start:
                await asyncio.sleep(0)
            chunk = names[start : start + CATCH_UP_CHUNK]
            keys = {topic_key(name): name for name in chunk if name not in topics}
            if keys:
                entries = await self._broker.store.get_many(keys)
                found.update((keys[key], entry.mod_revision) for key, entry in entries.items())
        if not found:
            return {}
        revision = max(found.values())
        with contextlib.suppress(RequestTimedOutError):
            await self._broker.wait_for_view(
                lambda: self._broker.view.revision >= revision, WAIT_S / 2
            )
        topics = self._broker.view.topics
        return {name: topics[name] for name in found if name in topics}

    async def ensure_topic(
        self,
        name: str,
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
        *,
        internal: bool = False,
    ) -> TopicRecord:
        """The topic, created (on the controller, with fewer replicas if fewer brokers
        live) if it does not exist: user topics only if auto-creation is on."""
        found = await self.catch_up_on(name)
        if found is not None:
            return found
        if name in INTERNAL_TOPICS and not internal:  # a client's produce or metadata
            raise TopicAuthorizationFailedError(f"only the brokers may create {name}")
        if (
            not internal and not self._broker.config.auto_create_topics
        ) or self._broker.replicas.deleting(name):
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        validate_topic_name(name)
        configs = dict(configs or {})

        async def create_here() -> CreateTopicsResponse:
            with contextlib.suppress(TopicAlreadyExistsError):
                await self.create_topic(
                    name,
                    partitions,
                    replication_factor,
                    configs,
                    internal=internal,
                    cap_to_live=True,
                )
            return CreateTopicsResponse(topics=[])

        body = {
            "topics": [
                {
                    "name": name,
                    "partitions": partitions,
                    "replication_factor": replication_factor,
                    "configs": configs,
                }
            ],
            "timeout_ms": int(WAIT_S * 1000),
            "validate_only": False,
        }
        response = await self._broker.peers.call_controller(CREATE_TOPICS, body, create_here)
        for topic in response["topics"]:
            if topic["error"] and topic["error"] != TopicAlreadyExistsError.code:
                raise _error(topic["error"], topic.get("message"))
        await self._broker.wait_topic_ready(name)
        found = self._broker.view.topics.get(name)
        if found is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return found

    async def delete_topic(self, name: str) -> None:
        info = self._broker.view.topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if info.internal:
            raise InvalidTopicError(f"internal topic {name} cannot be deleted")
        await self._controller_seat().delete_topic(name)
        await self._broker.wait_for_view(lambda: name not in self._broker.view.topics)
        await self._broker.replicas.wait_dropped(name)
        log.info("deleted topic %s", name)

    async def alter_topics_configs(
        self, changes: Mapping[str, Mapping[str, str | None]], *, validate_only: bool = False
    ) -> dict[str, MQError]:
        """Set (or with None, reset) configs of several topics; the topics that failed.

        Every topic's changes are checked first; the valid ones are then written
        together (one store transaction, see
        :func:`~mq.replication.cluster_state.update_topics_configs`), so a request
        naming many topics writes the metadata once, not once per topic.
        """
        failures: dict[str, MQError] = {}
        updated: dict[str, dict[str, str]] = {}
        brokers = await broker_count(self._broker.store, self._broker.node_id) if changes else 0
        pacer = Pacer()
        for name, change in changes.items():
            if pacer.due():  # up to 100,000 topics: other clients get turns
                await asyncio.sleep(0)
            try:
                info = self._broker.view.topics.get(name)
                updated[name] = altered_configs(
                    name, info, change, self._broker.config.log, brokers
                )
            except MQError as exc:
                failures[name] = exc
        if validate_only or not updated:
            return failures
        try:
            failures.update(await self._controller_seat().alter_topics_configs(updated))
        except MQError as exc:
            return failures | dict.fromkeys(updated, exc)
        waiting = {name: configs for name, configs in updated.items() if name not in failures}

        def shown() -> bool:  # each topic checked until it shows: linear in all, not per wake
            for name in list(waiting):
                topic = self._broker.view.topics.get(name)
                if topic is not None and topic.configs != waiting[name]:
                    return False
                del waiting[name]
            return True

        await self._broker.wait_for_view(shown)
        return failures

    def _controller_seat(self) -> ControllerSeat:
        seat = self._broker.seat
        if seat is None or seat.controller is None:
            raise NotControllerError(f"broker {self._broker.node_id} is not the controller")
        return seat


def _error(code: int, message: Any) -> MQError:
    return error_for_code(code)(message or "")
