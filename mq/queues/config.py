"""A topic's queue settings: the ``queue.*`` topic configs, checked, as a ShareConfig.

A *queue* is a topic with queue settings (``mq queue create`` sets them all);
any topic can still be read by a share group, with the defaults below.
"""

from __future__ import annotations

from collections.abc import Mapping

from mq.config_values import parse_int
from mq.errors import InvalidConfigError, InvalidTopicError
from mq.queues.entries import MAX_IN_FLIGHT
from mq.queues.share_partition import MAX_DELAY_MS, MAX_VISIBILITY_MS, ShareConfig
from mq.wire.limits import validate_topic_name

VISIBILITY = "queue.visibility.timeout.ms"
MAX_DELIVERIES = "queue.max.deliveries"
DEAD_LETTER_QUEUE = "queue.dead.letter.queue"
DELAY = "queue.delay.ms"
FIFO = "queue.fifo"
RECEIVE_RATE = "queue.receive.max.per.sec"
"""Messages per second one share group may receive from one partition of the queue
(0: no limit); receives past it get fewer messages or wait (issue 20)."""
MAX_IN_FLIGHT_CONFIG = "queue.max.in.flight"
"""Messages one share group may have leased (in flight) at once on one partition of
the queue (0: the broker's bound, ``MAX_IN_FLIGHT``); receives past it get nothing
until some are acked or their leases expire (issue 20)."""

DEFAULTS = {
    VISIBILITY: "30000",
    MAX_DELIVERIES: "10",
    DEAD_LETTER_QUEUE: "",
    DELAY: "0",
    FIFO: "false",
    RECEIVE_RATE: "0",
    MAX_IN_FLIGHT_CONFIG: "0",
}
"""SQS's defaults (30 s visibility, no delay); 10 deliveries before a message is
dead-lettered (or dropped, without a dead-letter queue)."""
QUEUE_CONFIG_KEYS = frozenset(DEFAULTS)
MAX_DELIVERIES_LIMIT = 1000
MAX_RECEIVE_RATE = 10_000_000
"""A receive rate above this is no limit a broker could reach: refused as a typo."""
INTERNAL_TOPIC_NAMES = frozenset({"__consumer_offsets", "__share_state"})
"""The brokers' internal topics (``mq.broker.catalog.INTERNAL_TOPICS``, which a test
keeps equal to this): never a dead-letter queue, whose records a client writes."""


def is_queue(configs: Mapping[str, str]) -> bool:
    return any(key in QUEUE_CONFIG_KEYS for key in configs)


def dead_letter_queue(configs: Mapping[str, str]) -> str | None:
    return configs.get(DEAD_LETTER_QUEUE) or None


def share_config(configs: Mapping[str, str]) -> ShareConfig:
    """The share rules of a topic (raises InvalidConfigError for a bad value)."""
    values = {**DEFAULTS, **{k: v for k, v in configs.items() if k in QUEUE_CONFIG_KEYS}}
    fifo = values[FIFO]
    if fifo not in ("true", "false"):
        raise InvalidConfigError(f"{FIFO} must be true or false, got {fifo!r}")
    target = values[DEAD_LETTER_QUEUE]
    if target:
        try:
            validate_topic_name(target)
        except InvalidTopicError as exc:
            raise InvalidConfigError(f"{DEAD_LETTER_QUEUE}: {exc.message}") from None
        if target in INTERNAL_TOPIC_NAMES:
            raise InvalidConfigError(
                f"{DEAD_LETTER_QUEUE} cannot be the internal topic {target}: it is the brokers'"
            )
    receive_rate(values)  # checked here too: a bad rate is refused when it is set
    return ShareConfig(
        visibility_ms=_int(values, VISIBILITY, 1, MAX_VISIBILITY_MS),
        max_deliveries=_int(values, MAX_DELIVERIES, 1, MAX_DELIVERIES_LIMIT),
        delay_ms=_int(values, DELAY, 0, MAX_DELAY_MS),
        fifo=fifo == "true",
        dead_letter=bool(values[DEAD_LETTER_QUEUE]),
        max_in_flight=_int(values, MAX_IN_FLIGHT_CONFIG, 0, MAX_IN_FLIGHT) or MAX_IN_FLIGHT,
    )


def receive_rate(configs: Mapping[str, str]) -> int:
    """Messages per second a share group may receive per partition (0: no limit)."""
    return parse_int(RECEIVE_RATE, configs.get(RECEIVE_RATE, "0"), 0, MAX_RECEIVE_RATE)


def _int(values: Mapping[str, str], key: str, low: int, high: int) -> int:
    return parse_int(key, values[key], low, high)
