"""A controller request reaching the broker the view already names as controller, while its
seat is still loading the cluster state: it waits for the seat (bounded), neither
forwarding to itself nor refusing with NOT_CONTROLLER (found by ``mq chaos``: a topic
creation at a cluster's start failed with "this broker is the controller: no forwarding")."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from mq.broker import peers
from mq.broker.peers import Peers
from mq.broker.server import on_controller
from mq.errors import NotControllerError
from mq.wire.apis_core import CREATE_TOPICS


class FakeBroker:
    """The view names node 1 (this broker) as controller; its seat becomes active later."""

    def __init__(self) -> None:
        self.node_id = 1
        self.seat_active = False
        self.view = SimpleNamespace(
            controller=SimpleNamespace(node_id=1),
            brokers={1: SimpleNamespace(host="127.0.0.1", port=1)},
        )
        self.peers = Peers(self)  # type: ignore[arg-type]

    @property
    def is_controller(self) -> bool:
        return self.seat_active


async def test_a_request_waits_for_the_seat_the_view_already_names() -> None:
    broker = FakeBroker()
    calls: list[Any] = []

    async def handler(_broker: Any, _ctx: Any, body: Any) -> dict[str, Any]:
        calls.append(body)
        return {"topics": []}

    run = on_controller(CREATE_TOPICS, handler)
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, setattr, broker, "seat_active", True)
    assert await run(broker, None, {"topics": ["t"]}) == {"topics": []}  # type: ignore[arg-type]
    assert calls == [{"topics": ["t"]}]


async def test_a_seat_that_never_comes_is_not_controller_after_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(peers, "WAIT_S", 0.3)
    broker = FakeBroker()

    async def handler(_broker: Any, _ctx: Any, _body: Any) -> dict[str, Any]:
        raise AssertionError("not the controller: the handler must not run")

    run = on_controller(CREATE_TOPICS, handler)
    with pytest.raises(NotControllerError, match="no controller could be reached"):
        await run(broker, None, {})  # type: ignore[arg-type]
