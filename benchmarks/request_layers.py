"""What the quota and metrics layers add to one request, timed in-process (issues 20, 21).

The end-to-end comparisons (``benchmarks.noisy_neighbour --overhead``,
``benchmarks.metrics_overhead``) run real brokers, but on a shared machine their
run-to-run spread is far above 3 %. This one times the layers' own code, the
calls :meth:`mq.broker.connection.Connection._serve` makes around a handler
(:class:`mq.broker.request_layers.RequestLayers`: the client's quota charges,
:class:`~mq.broker.throttling.Timed` around the handler when a request-time quota
applies, the charge, the request's metrics), around a stand-in handler that
awaits once (as a produce awaits its append), on uvloop, in four variants:

* ``none``: no quota configured, metrics off (what the zero-config broker does);
* ``quotas``: every quota set for the default client id, far above the load
  (producer and consumer byte rates of 1 TiB/s, request_percentage 100);
* ``metrics``: metrics on (``--http-port``), no quota;
* ``both``.

Each variant runs ``--requests`` requests, ``--rounds`` times in turn; the figure is
each variant's fastest round in process CPU time per request (the least disturbed
by the machine's other work), and the difference to ``none`` is what the layers
cost per request. Divide it by the broker CPU a request takes (W1: a
produce of ~650 records of 100 B, about 1 ms; the A/B benchmarks report the
broker's CPU per message) for the share. Usage::

    python -m benchmarks.request_layers [--requests 50000] [--rounds 9] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from types import SimpleNamespace
from typing import Any, cast

import uvloop

from mq.broker.broker import Broker
from mq.broker.config import BrokerConfig
from mq.broker.context import RequestContext
from mq.broker.metrics import Meters
from mq.broker.quotas import QuotaManager, pack_values
from mq.broker.request_layers import RequestLayers
from mq.broker.throttling import Timed
from mq.quotas import entities as q
from mq.replication.store import EventKind, WatchEvent
from mq.wire import apis_data
from mq.wire.messages import Request

VARIANTS = ("none", "quotas", "metrics", "both")
HUGE_QUOTA = 1 << 40
RESPONSE = b"x" * 64


def _broker(quotas: bool, metrics: bool) -> Broker:
    config = BrokerConfig()
    manager = QuotaManager(None, config)  # type: ignore[arg-type]  # no store: set below
    if quotas:
        values = {
            q.PRODUCER_BYTE_RATE: HUGE_QUOTA,
            q.CONSUMER_BYTE_RATE: HUGE_QUOTA,
            q.REQUEST_PERCENTAGE: 100,
        }
        key = q.store_key(q.entity(client_id=None))
        manager.apply(WatchEvent(EventKind.PUT, key, pack_values(values), 1))
    meters = Meters(config.metrics_max_labelled) if metrics else None
    return cast(Broker, SimpleNamespace(client_quotas=manager, metrics=meters, audit=None))


async def _handler() -> dict[str, Any]:
    """A produce's shape: queue the work, await its future once, answer."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done
    return {"topics": []}


async def _serve(layers: RequestLayers, ctx: RequestContext, request: Request[Any]) -> None:
    """The layers' calls of ``Connection._serve``, in its order, around the handler."""
    loop = asyncio.get_running_loop()
    charges = layers.charges(ctx, request.client_id, loop.time())
    started = time.perf_counter()
    timed: Timed | None = None
    work: Any = _handler()
    if charges is not None and charges.loop_time is not None:
        work = timed = Timed(work)
    body = await work
    encoding = time.perf_counter()
    if charges is not None:
        loop_s = timed.spent + time.perf_counter() - encoding if timed is not None else 0.0
        charges.charge(request.api.key, 16_384, RESPONSE, loop_s, loop.time())
    layers.answered(ctx, request, "none", started, body, None)


async def _round(layers: RequestLayers, requests: int) -> float:
    ctx = RequestContext(1, "127.0.0.1:1", client_id="bench")
    request = cast(
        Request[Any],
        SimpleNamespace(api=apis_data.PRODUCE, client_id="bench", correlation_id=1, body={}),
    )
    cpu = time.process_time()
    for _ in range(requests):
        await _serve(layers, ctx, request)
    return (time.process_time() - cpu) / requests


async def measure(requests: int, rounds: int) -> dict[str, float]:
    """Each variant's fastest round: CPU seconds per request."""
    layers = {
        "none": RequestLayers(_broker(False, False)),
        "quotas": RequestLayers(_broker(True, False)),
        "metrics": RequestLayers(_broker(False, True)),
        "both": RequestLayers(_broker(True, True)),
    }
    best = dict.fromkeys(VARIANTS, float("inf"))
    for _ in range(rounds):
        for variant in VARIANTS:
            best[variant] = min(best[variant], await _round(layers[variant], requests))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=50_000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    best = uvloop.run(measure(args.requests, args.rounds))
    base = best["none"]
    if args.json:
        for variant in VARIANTS:
            us = best[variant] * 1e6
            added = (best[variant] - base) * 1e6
            print(
                json.dumps(
                    {
                        "variant": variant,
                        "us_per_request": round(us, 3),
                        "added_us": round(added, 3),
                    }
                )
            )
        return 0
    print(f"per request, fastest of {args.rounds} rounds of {args.requests:,} (process CPU)")
    print("| variant | µs per request | added to none |")
    print("|---|---:|---:|")
    for variant in VARIANTS:
        us, added = best[variant] * 1e6, (best[variant] - base) * 1e6
        print(f"| {variant} | {us:.2f} | {added:+.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
