"""describe_producers (Kafka's DescribeProducers, key 61): what a partition remembers of
its idempotent producers.

Answered by each partition's leader from its producer-state table (the one that
deduplicates retried batches, :mod:`mq.storage.producers`), read through the
partition's writer so that it is never read halfway through an append. mq's
extensions: ``producer_ids`` narrows the answer to those producers, and each
producer's ``epoch_start_offset`` says where its current epoch's first batch is. The
exactly-once Spark sink (:mod:`spark_connector.exactly_once`) asks it where an
earlier attempt of its task stopped writing.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import partial

from mq.broker.broker import Broker
from mq.broker.context import RequestContext, set_error
from mq.errors import MQError
from mq.storage.log import Log
from mq.wire.apis_data import (
    DescribedProducersPartition,
    DescribeProducersRequest,
    DescribeProducersResponse,
    ProducerState,
)


async def describe_producers(
    broker: Broker, ctx: RequestContext, body: DescribeProducersRequest
) -> DescribeProducersResponse:
    wanted = None if body["producer_ids"] is None else frozenset(body["producer_ids"])
    response: DescribeProducersResponse = {"topics": []}
    for topic in body["topics"]:
        results: list[DescribedProducersPartition] = []
        response["topics"].append({"name": topic["name"], "partitions": results})
        for index in topic["partitions"]:
            result: DescribedProducersPartition = {
                "partition": index,
                "error": 0,
                "message": None,
                "producers": [],
            }
            results.append(result)
            try:
                partition = broker.leader_partition(topic["name"], index)
                result["producers"] = await partition.writer.call(
                    partial(producers_of, wanted=wanted)
                )
            except MQError as exc:
                set_error(result, exc)
    return response


def producers_of(log: Log, wanted: Collection[int] | None) -> list[ProducerState]:
    table = log.producers.producers
    ids = table.keys() if wanted is None else [pid for pid in wanted if pid in table]
    return [
        {
            "producer_id": pid,
            "producer_epoch": table[pid].epoch,
            "last_sequence": table[pid].last_sequence,
            "last_timestamp": table[pid].last_timestamp,
            "epoch_start_offset": table[pid].epoch_start(),
        }
        for pid in ids
    ]
