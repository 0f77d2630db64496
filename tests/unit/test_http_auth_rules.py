"""The HTTP listener's pure pieces: Basic header parsing, the per-route needs, the lists
cut to a principal (never changing the shared answer), and /readyz's anonymous summary."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from mq.acl.model import Operation, ResourceType
from mq.broker.config import BrokerConfig
from mq.http import admin_api, console_routes, health
from mq.http.auth import MAX_AUTHORIZATION_HEADER, basic_credentials
from mq.http.auth_rules import (
    ANONYMOUS_ROUTES,
    ROUTES,
    group_view,
    groups_view,
    queues_view,
    topics_view,
)
from mq.http.health import summary


def basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def test_basic_credentials_are_parsed() -> None:
    assert basic_credentials(basic("alice:s3:cret")) == ("alice", "s3:cret")
    assert basic_credentials("basic " + base64.b64encode(b"bob:").decode()) == ("bob", "")
    assert basic_credentials(basic("héllo:wörld")) == ("héllo", "wörld")


@pytest.mark.parametrize(
    "header",
    [
        "Bearer abc",
        "Basic",
        "Basic not-base64!",
        basic("no-colon"),
        basic(":password-without-user"),
        "Basic " + base64.b64encode(b"\xff\xfe:x").decode(),  # not UTF-8
        basic("a:" + "x" * MAX_AUTHORIZATION_HEADER),
    ],
)
def test_anything_else_is_no_credentials(header: str) -> None:
    assert basic_credentials(header) is None


def test_every_route_of_the_app_has_a_need(tmp_path: Path) -> None:
    # a stand-in broker: adding routes only keeps it (and reads its config)
    broker: Any = SimpleNamespace(config=BrokerConfig(data_dir=tmp_path))
    app = web.Application()
    for add in (health.add_routes, admin_api.add_routes, console_routes.add_routes):
        add(app, broker)
    canonical = {resource.canonical for resource in app.router.resources()}
    assert canonical - ANONYMOUS_ROUTES <= set(ROUTES), canonical - set(ROUTES)
    assert ROUTES["/api/topics/{topic}/partitions/{partition}/records"].operation is Operation.READ
    assert ROUTES["/metrics"].resource_type is ResourceType.CLUSTER


def permit_only(*allowed: tuple[Operation, ResourceType, str]) -> Any:
    return lambda op, rt, name: (op, rt, name) in allowed


D, T, G, Q, C = (
    Operation.DESCRIBE,
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.QUEUE,
    ResourceType.CLUSTER,
)


def test_topics_are_cut_to_those_the_principal_may_describe() -> None:
    answer = {"topics": [{"name": "a"}, {"name": "b"}], "truncated": 0}
    before = copy.deepcopy(answer)
    cut = topics_view(permit_only((D, T, "a")), answer)
    assert [t["name"] for t in cut["topics"]] == ["a"]
    assert cut["truncated"] == 0
    assert answer == before  # the shared answer is untouched


def test_groups_all_with_describe_cluster_else_per_group() -> None:
    answer = {"groups": [{"group_id": "g1"}, {"group_id": "g2"}], "errors": []}
    assert groups_view(permit_only((D, C, "mq-cluster")), answer) is answer
    cut = groups_view(permit_only((D, G, "g2")), answer)
    assert [g["group_id"] for g in cut["groups"]] == ["g2"]
    assert len(answer["groups"]) == 2


def test_a_group_shows_only_the_offsets_of_describable_topics() -> None:
    answer = {
        "offsets": [
            {"topic": "a", "lag": 3},
            {"topic": "b", "lag": 5},
            {"topic": "a", "lag": None},
        ],
        "lag": 8,
    }
    cut = group_view(permit_only((D, T, "a")), answer)
    assert [o["topic"] for o in cut["offsets"]] == ["a", "a"]
    assert cut["lag"] == 3
    assert answer["lag"] == 8
    everything = permit_only((D, T, "a"), (D, T, "b"))
    assert group_view(everything, answer) is answer


def test_queues_need_describe_on_the_queue_and_its_topic() -> None:
    answer = {"queues": [{"name": "jobs"}, {"name": "mail"}, {"name": "half"}]}
    permit = permit_only(
        (D, Q, "jobs"),
        (D, T, "jobs"),
        (D, Q, "half"),
        (D, T, "mail"),  # half and mail: one each
    )
    assert [q["name"] for q in queues_view(permit, answer)["queues"]] == ["jobs"]


def test_readyz_summary_names_no_topic_and_no_detail() -> None:
    reasons = [
        "not registered in the cluster",
        "orders-0: follower not caught up (out of the ISR)",
        "orders-1: follower not caught up (out of the ISR)",
        "secret-topic-3: log offline (OSError: /data/secret-topic-3/0.log: disk full)",
    ]
    out = summary(reasons)
    assert out == [
        "not registered in the cluster",
        "2 partitions: follower not caught up",
        "1 partition: log offline",
    ]
    assert not any("orders" in r or "secret" in r or "/data" in r for r in out)
