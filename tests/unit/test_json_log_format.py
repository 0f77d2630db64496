"""The JSON log formatter (:mod:`mq.logs`): the stable fields, topic and partition from
``extra``, null without them, and an exception's traceback."""

from __future__ import annotations

import json
import logging

from mq.logs import JsonFormatter, partition_extra


def record(msg: str, extra: dict[str, object] | None = None, exc: bool = False) -> str:
    logger = logging.getLogger("mq.test.json")
    made: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, r: logging.LogRecord) -> None:
            made.append(r)

    handler = Keep()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        if exc:
            try:
                raise ValueError("boom")
            except ValueError:
                logger.exception(msg)
        else:
            logger.warning(msg, "x", extra=extra)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    return JsonFormatter(broker=2).format(made[0])


def test_fields_and_extra() -> None:
    line = json.loads(record("partition %s offline", partition_extra("orders", 3)))
    assert line["level"] == "WARNING"
    assert line["logger"] == "mq.test.json"
    assert line["broker"] == 2
    assert (line["topic"], line["partition"]) == ("orders", 3)
    assert line["message"] == "partition x offline"
    assert len(line["time"]) == len("2026-11-27T15:02:03.456Z")
    assert line["time"].endswith("Z")


def test_no_extra_gives_nulls_and_exceptions_are_kept() -> None:
    line = json.loads(record("failed", exc=True))
    assert line["topic"] is None
    assert line["partition"] is None
    assert "ValueError: boom" in line["exception"]
