"""What each HTTP route needs from the ACLs, and the lists cut to what the principal may see.

The HTTP twin of :mod:`mq.broker.authorizer_rules`, with the same operations as
the binary APIs that read the same data:

======================================================  =====================================
route                                                   needs
======================================================  =====================================
``/healthz``, ``/readyz``                               nothing (anonymous probes)
``/``, ``/console/...``                                 an authenticated user
``/metrics``, ``/api/cluster``                          DESCRIBE cluster
``/api/topics``                                         the topics with DESCRIBE topic
                                                        (as metadata lists them)
``/api/topics/{topic}``                                 DESCRIBE topic
``/api/topics/{topic}/partitions/{p}/records``          READ topic (a fetch)
``/api/groups``                                         DESCRIBE cluster, else the groups
                                                        with DESCRIBE group (list_groups)
``/api/groups/{group}``                                 DESCRIBE group; its offsets of the
                                                        topics with DESCRIBE topic
                                                        (offset_fetch)
``/api/queues``                                         the queues with DESCRIBE queue and
                                                        DESCRIBE topic (describe_queue)
======================================================  =====================================

A route with no rule is refused (403): a new route is closed until someone decides
what it needs. A path that matches no route needs only an authenticated user (and
is then a 404). The views take the shared answer (:mod:`mq.http.shared`, the same
object for every console) and return a new one: they never change it.

Pure: the permission check is passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from mq.acl.model import CLUSTER_NAME, Operation, ResourceType

Permit = Callable[[Operation, ResourceType, str], bool]
"""Whether the request's principal may do the operation on the resource."""

DESCRIBE = Operation.DESCRIBE
READ = Operation.READ
TOPIC = ResourceType.TOPIC
GROUP = ResourceType.GROUP
QUEUE = ResourceType.QUEUE
CLUSTER = ResourceType.CLUSTER


@dataclass(frozen=True)
class Need:
    """``operation`` on the resource of ``resource_type`` named by the path's
    ``match`` parameter (the cluster when None); no operation: a user is enough."""

    operation: Operation | None = None
    resource_type: ResourceType = CLUSTER
    match: str | None = None

    def resource(self, match_info: dict[str, str]) -> str:
        return CLUSTER_NAME if self.match is None else match_info[self.match]


ANONYMOUS_ROUTES: Final = frozenset({"/healthz", "/readyz"})
"""Routes served without authentication: the orchestrator's probes."""

USER: Final = Need()
ROUTES: Final[dict[str, Need]] = {
    "/": USER,
    "/console": USER,  # the static files (aiohttp names the resource by its prefix)
    "/metrics": Need(DESCRIBE),
    "/api/cluster": Need(DESCRIBE),
    "/api/topics": USER,
    "/api/topics/{topic}": Need(DESCRIBE, TOPIC, "topic"),
    "/api/topics/{topic}/partitions/{partition}/records": Need(READ, TOPIC, "topic"),
    "/api/groups": USER,
    "/api/groups/{group}": Need(DESCRIBE, GROUP, "group"),
    "/api/queues": USER,
}
"""Each route (by its canonical path) and what it needs."""


def topics_view(permit: Permit, answer: dict[str, Any]) -> dict[str, Any]:
    """``/api/topics``: only the topics the principal may describe."""
    shown = [t for t in answer["topics"] if permit(DESCRIBE, TOPIC, t["name"])]
    return {**answer, "topics": shown}


def groups_view(permit: Permit, answer: dict[str, Any]) -> dict[str, Any]:
    """``/api/groups``: every group with DESCRIBE on the cluster, else only the groups
    the principal may describe."""
    if permit(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return answer
    shown = [g for g in answer["groups"] if permit(DESCRIBE, GROUP, g["group_id"])]
    return {**answer, "groups": shown}


def group_view(permit: Permit, answer: dict[str, Any]) -> dict[str, Any]:
    """``/api/groups/{group}``: the committed offsets of the topics the principal may
    describe (the lag summed over those)."""
    offsets = [o for o in answer["offsets"] if permit(DESCRIBE, TOPIC, o["topic"])]
    if len(offsets) == len(answer["offsets"]):
        return answer
    return {**answer, "offsets": offsets, "lag": sum(o["lag"] or 0 for o in offsets)}


def queues_view(permit: Permit, answer: dict[str, Any]) -> dict[str, Any]:
    """``/api/queues``: the queues the principal may describe (queue and its topic)."""
    shown = [
        q
        for q in answer["queues"]
        if permit(DESCRIBE, QUEUE, q["name"]) and permit(DESCRIBE, TOPIC, q["name"])
    ]
    return {**answer, "queues": shown}


View = Callable[[Permit, dict[str, Any]], dict[str, Any]]

VIEWS: Final[dict[str, View]] = {
    "/api/topics": topics_view,
    "/api/groups": groups_view,
    "/api/groups/{group}": group_view,
    "/api/queues": queues_view,
}
"""The routes whose answer is cut to the principal (by canonical path)."""
