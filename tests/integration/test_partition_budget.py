"""A broker hosts at most ``max_partitions`` replicas (issue 18, F2).

The controller refuses a topic past it with POLICY_VIOLATION before anything
is written, counting the topics it already placed; a replica the view assigns
here past it (a reassignment, a limit lowered since) is not opened, and no file
is made for it. In-process, so the test can look at the broker's partitions.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from inprocess_broker import running_broker

from mq import Admin
from mq.errors import PolicyViolationError

TEST_TIMEOUT_S = 60
LIMIT = 5
"""``__consumer_offsets`` (1 partition here) and four of ours."""


async def test_partitions_past_the_budget_are_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    async with asyncio.timeout(TEST_TIMEOUT_S):
        async with running_broker(data, max_partitions=LIMIT, offsets_partitions=1) as running:
            broker = running.broker
            async with Admin(bootstrap=running.bootstrap) as admin:
                await admin.create_topic("first", 3)
                with pytest.raises(PolicyViolationError, match=f"may host {LIMIT}"):
                    await admin.create_topic("second", 3)
                with pytest.raises(PolicyViolationError):
                    await admin.create_topic("validated", 9, validate_only=True)
                await admin.create_topic("third", 1)
                with pytest.raises(PolicyViolationError):
                    await admin.create_topic("fourth", 1)
            hosted = len(broker.partitions)
            assert hosted <= LIMIT
            assert not any(data.glob("second-*"))
            assert not any(data.glob("fourth-*"))

            # a replica the view gives this broker past its budget: not opened, no file
            topic = broker.view.topics["third"]
            with caplog.at_level(logging.ERROR, logger="mq.broker.replicas"):
                assert broker.replicas._open(topic, 7) is None
            assert "third-7 is not opened here" in caplog.text
            assert "limit of" in caplog.text
            assert not (data / "third-7").exists()
            assert len(broker.partitions) == hosted
