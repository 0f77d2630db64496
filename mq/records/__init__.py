"""The Kafka RecordBatch v2 format: mq's shared language on disk and on the wire.

Batches (:mod:`~mq.records.batch`: the byte layout and what the CRC covers),
records (:mod:`~mq.records.records`: the builder and the parser), their per-record
loops (:mod:`~mq.records.record_loops`, in C in ``_speedups.c`` where it was
built), bulk encoding (:mod:`~mq.records.bulk`), compression
(:mod:`~mq.records.compression`) and the broker's encryption at rest
(:mod:`~mq.records.encryption`: one AES-256-GCM seal per batch). The broker's
storage, the client and the Spark connector all use it; it uses none of them (an
import-linter contract).
"""
