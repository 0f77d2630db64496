"""Spark's Kafka source and sink options under their Kafka names, mq's short names kept.

A Kafka job reads and writes mq by changing only ``format("kafka")`` to
``format("mq")``: every option of Spark's Kafka source and sink that means
something for mq is accepted under its Kafka name (:data:`READ_ALIASES`,
:data:`WRITE_ALIASES`), and mq's own short names stay aliases of them.
:func:`canonical` turns the options Spark hands over (any case) into one
name per meaning, and:

* an option given twice under two names with two values fails, naming both;
* the options Kafka's source itself refuses (``kafka.auto.offset.reset``,
  ``kafka.enable.auto.commit``, deserializers...) are refused with Kafka's
  reason (:data:`REFUSED`);
* other ``kafka.*`` settings of Kafka's clients, which configure nothing of
  mq's (``kafka.max.poll.records``, ``kafka.acks``...), and Kafka options
  without a meaning for mq (``fetchOffset.numRetries``...), are accepted with
  a warning logged once per process (:data:`WARN_ONCE`), never silently read
  as something else;
* ``groupIdPrefix`` and ``kafka.group.id`` are accepted and unused (mq's
  reader tracks its offsets in Spark's checkpoint, not in a consumer group),
  as documented.

The ``kafka.security.protocol`` / ``kafka.sasl.*`` / ``kafka.ssl.*`` family is
turned into mq's client security by :mod:`spark_connector.security`. Pure: no
Spark, no network.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

log = logging.getLogger(__name__)


class OptionError(ValueError):
    """An option of the ``mq`` data source is missing, unknown, conflicting or malformed."""


READ_ALIASES: Final = {
    "kafka.bootstrap.servers": "bootstrap",
    "subscribe": "topic",
    "kafkaconsumer.polltimeoutms": "polltimeoutms",
    "kafka.request.timeout.ms": "requesttimeoutms",
}
"""Kafka name → mq's name (the one the parsers use), for reads."""

WRITE_ALIASES: Final = {
    "kafka.bootstrap.servers": "bootstrap",
    "kafka.linger.ms": "lingerms",
    "kafka.batch.size": "batchsize",
    "kafka.compression.type": "compression",
    "kafka.request.timeout.ms": "requesttimeoutms",
}
"""Kafka name → mq's name, for writes (the producer settings that mq's producer has)."""

REFUSED: Final = {
    "kafka.auto.offset.reset": "set startingOffsets instead (as with Spark's Kafka source)",
    "kafka.enable.auto.commit": "the query's offsets are in its checkpoint, never committed",
    "kafka.key.deserializer": "keys are always read as bytes: cast the column",
    "kafka.value.deserializer": "values are always read as bytes: cast the column",
    "kafka.key.serializer": "keys are written as bytes or strings: cast the column",
    "kafka.value.serializer": "values are written as bytes or strings: cast the column",
    "kafka.interceptor.classes": "mq's client runs no Java interceptors",
}
"""Options Kafka's source/sink refuse too (its messages say why): refused with the reason."""

UNUSED: Final = {"groupidprefix", "kafka.group.id"}
"""Accepted and unused: mq's reader assigns partitions itself and keeps no group offsets."""

WARN_ONCE: Final = {
    "fetchoffset.numretries": "mq retries offset lookups for retryTimeoutMs instead",
    "fetchoffset.retryintervalms": "mq retries offset lookups for retryTimeoutMs instead",
}
"""Kafka source options without a meaning for mq: accepted, a warning logged once."""

SECURITY_PREFIXES: Final = ("kafka.security.protocol", "kafka.sasl.", "kafka.ssl.")
"""Options read by :mod:`spark_connector.security`."""

_warned: set[str] = set()


def is_security(name: str) -> bool:
    return name.startswith(SECURITY_PREFIXES)


def canonical(
    options: Mapping[str, str],
    known: set[str],
    aliases: Mapping[str, str],
    mode: str,
    ignored: set[str],
) -> dict[str, str]:
    """``options`` lower-cased, each under the name the parsers use.

    ``known`` are mq's names for this ``mode`` (``read``/``write``), ``aliases`` the
    Kafka names of some of them; ``ignored`` Spark's own options it passes on (a path,
    a checkpoint). Security options are kept under their Kafka names.
    """
    given: dict[str, tuple[str, str]] = {}  # canonical name → (name as given, value)
    unknown: list[str] = []
    for raw_name, raw_value in options.items():
        spelled, value = str(raw_name), str(raw_value)
        name = spelled.lower()
        if name in ignored:
            continue
        if name in REFUSED:
            raise OptionError(f"option {spelled!r} is not supported: {REFUSED[name]}")
        if name in UNUSED:
            _note_once(name, f"option {spelled!r} is accepted and unused: {_UNUSED_WHY}")
            continue
        if name in WARN_ONCE:
            _warn_once(name, f"option {spelled!r} has no meaning for mq: {WARN_ONCE[name]}")
            continue
        target = aliases.get(name, name)
        if target not in known and not is_security(name):
            if name.startswith("kafka."):
                _warn_once(
                    name,
                    f"option {spelled!r} is a setting of Kafka's Java client, which mq "
                    "does not use: ignored",
                )
                continue
            unknown.append(name)
            continue
        if target in given and given[target][1] != value:
            raise OptionError(
                f"options {given[target][0]!r} and {spelled!r} name the same setting with "
                f"different values ({given[target][1]!r}, {value!r}): give one"
            )
        given[target] = (spelled, value)
    if unknown:
        names = sorted(known | set(k for k, v in aliases.items() if v in known))
        raise OptionError(
            f"unknown option(s) {', '.join(sorted(unknown))} for an mq {mode}; "
            f"the options are (any case): {', '.join(names)}, and the "
            "kafka.security.protocol/kafka.sasl.*/kafka.ssl.* family"
        )
    return {name: value for name, (_, value) in given.items()}


_UNUSED_WHY: Final = (
    "mq's reader assigns itself the partitions it reads and keeps its offsets in the "
    "query's checkpoint, so it joins no consumer group"
)


def _warn_once(name: str, message: str) -> None:
    if name not in _warned:
        _warned.add(name)
        log.warning("mq-spark: %s", message)


def _note_once(name: str, message: str) -> None:
    if name not in _warned:
        _warned.add(name)
        log.info("mq-spark: %s", message)
