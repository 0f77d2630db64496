"""Structured logs: one JSON object per line, from :mod:`logging` (``--log-format json``).

Every line has the same fields, whatever logged it::

    {"time": "2026-11-27T15:02:03.456Z", "level": "INFO", "logger": "mq.broker.isr",
     "broker": 1, "topic": "orders", "partition": 3, "message": "orders-3: ISR now [1, 2]"}

``topic`` and ``partition`` come from the record's ``extra`` (``log.info(...,
extra=partition_extra(p))`` where the broker logs about one partition) and are null
otherwise; ``broker`` is the node id the formatter was made with. A record with an
exception adds ``exception`` (the formatted traceback). The field names are stable:
log shippers may rely on them.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

LOG_FORMATS = ("text", "json")


def partition_extra(topic: str, partition: int) -> dict[str, Any]:
    """The ``extra=`` of a log call about one partition (its JSON ``topic`` and ``partition``)."""
    return {"topic": topic, "partition": partition}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line with the fields of the module docstring."""

    def __init__(self, broker: int | None = None) -> None:
        super().__init__()
        self.broker = broker

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC)
        line: dict[str, Any] = {
            "time": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "broker": self.broker,
            "topic": getattr(record, "topic", None),
            "partition": getattr(record, "partition", None),
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, default=str, ensure_ascii=False)


def use_json_logs(broker: int | None) -> None:
    """Switch every handler of the root logger to :class:`JsonFormatter`."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(JsonFormatter(broker))
