"""The Spark connector against a secured broker, end to end (issue 23's gap).

One real ``mq serve`` for the module, listening only on ``sasl_ssl`` with a
certificate the test made, users added with ``mq user add`` and through the
broker, and prefixed ACLs (:mod:`secured_broker`); one local Spark session.
The job gives its security the way a Kafka user does: ``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` (the password is in it) and a
PEM ``kafka.ssl.truststore.location``.

* a batch write then a batch read round-trip every row exactly, over SCRAM-SHA-256
  and SCRAM-SHA-512; a structured-streaming read (availableNow, several
  micro-batches) reads every record once;
* a wrong password, a principal without READ (or without any ACL) on the topic,
  a CA the job does not trust: the job fails within :data:`FAIL_FAST_S`, with an
  error that names authentication, the topic's authorization or the certificate,
  and never after retrying for ``retryTimeoutMs``;
* no password shows in a plan, a streaming progress report, an exception, or a
  log line of the connector.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.java_gateway import ensure_callback_server_started
from pyspark.sql import SparkSession
from secured_broker import (
    ACL_WAIT_S,
    ADMIN,
    CLI_TIMEOUT_S,
    PREFIX,
    USERS,
    Secured,
    User,
    create_topic,
    start,
)
from security_helpers import (
    PARTITIONS,
    PlanRecorder,
    failure,
    frame,
    read_back,
    readme_block,
    records,
    swapped,
    with_options,
)
from tls_certs import make_pki

import mq
from mq.errors import SaslAuthenticationFailedError, TopicAuthorizationFailedError
from spark_connector.options import OptionError, parse_read_options
from spark_connector.reader import MQBatchReader

FAIL_FAST_S: Final = 25.0
"""A refused job must fail well before the connector's default ``retryTimeoutMs``
(30 s), which is what retrying a refusal as if it were a broker restart would take.
A bound on a loaded machine (Spark plans, runs a task and reports), not a measure."""
STREAM_TIMEOUT_S: Final = 180.0
"""An availableNow query of a few micro-batches on a loaded 2-core machine."""

ROWS: Final = 120
PLAN_WAIT_S: Final = 60.0
"""How long Spark's listener bus may take to hand over an action's plan (it is asynchronous)."""
README: Final = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("secured")
    running = start(base, make_pki(base / "pki"))
    try:
        yield running
    finally:
        running.broker.stop()


def passwords() -> list[str]:
    return [ADMIN.password, *(u.password for u in USERS.values())]


def assert_no_password(text: str, *extra: str) -> None:
    for secret in (*passwords(), *extra):
        assert secret not in text, "a password shows"


# -- rows round-trip ------------------------------------------------------------------------


@pytest.mark.parametrize("user", ["alice", "bob"], ids=["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_batch_write_then_read_round_trips_every_row(
    spark: SparkSession, secured: Secured, user: str
) -> None:
    topic = f"{PREFIX}rows-{user}"
    create_topic(secured, topic, PARTITIONS)
    options = secured.spark_options(USERS[user])
    sent = records(ROWS)
    df = frame(spark, sent).repartition(2)  # two write tasks, two producers
    with_options(df.write.format("mq").option("topic", topic), options).mode("append").save()

    reader = with_options(spark.read.format("mq"), options)
    got = read_back(reader.option("subscribe", topic).option("includeHeaders", "true").load())
    assert sorted((r for r, _ in got), key=repr) == sorted(sent, key=repr)
    for partition in range(PARTITIONS):  # every offset once, none missing
        offsets = sorted(o for r, o in got if r[0] == partition)
        assert offsets == list(range(len(offsets)))

    plan = reader.option("subscribe", topic).load()._jdf.queryExecution().toString()
    assert_no_password(plan)


def test_a_stream_reads_every_record_once_in_micro_batches(
    spark: SparkSession, secured: Secured, tmp_path: Path
) -> None:
    topic = f"{PREFIX}stream"
    create_topic(secured, topic, PARTITIONS)
    with mq.SyncProducer(secured.bootstrap, **secured.client()) as producer:
        producer.send_many({"topic": topic, "value": b"%d" % i} for i in range(ROWS))
    stream = (
        with_options(spark.readStream.format("mq"), secured.spark_options(USERS["alice"]))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(ROWS // 3))
        .load()
    )
    query = (
        stream.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .writeStream.format("memory")
        .queryName("secured_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(STREAM_TIMEOUT_S), "the availableNow query did not end"
        assert query.exception() is None
        progress = query.recentProgress
    finally:
        query.stop()
    values = [int(r.value) for r in spark.sql("SELECT value FROM secured_stream").collect()]
    assert sorted(values) == list(range(ROWS))
    batches = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert len(batches) >= 3
    assert sum(batches) == ROWS
    assert_no_password("\n".join(p.json for p in progress))  # the source described
    assert_no_password(stream._jdf.queryExecution().toString())


# -- refusals: fast, clear, not retried ---------------------------------------------------------


def test_a_wrong_password_fails_the_read_and_the_write_naming_authentication(
    spark: SparkSession, secured: Secured
) -> None:
    topic = f"{PREFIX}wrong-password"
    create_topic(secured, topic, 1)
    wrong = "wrong-pw-2Rf9-not-logged"
    options = secured.spark_options(USERS["alice"], password=wrong)
    reads = with_options(spark.read.format("mq"), options).option("subscribe", topic)
    writes = with_options(frame(spark, records(3)).write.format("mq"), options).option(
        "topic", topic
    )
    for action in (lambda: reads.load().collect(), lambda: writes.mode("append").save()):
        text, took = failure(action)
        assert "SASL_AUTHENTICATION_FAILED" in text or "SaslAuthenticationFailedError" in text
        assert "authentication failed" in text
        assert "retryTimeoutMs" not in text  # not retried as if the broker were down
        assert took < FAIL_FAST_S
        assert_no_password(text, wrong)


def test_a_stream_with_a_wrong_password_fails_naming_authentication(
    spark: SparkSession, secured: Secured, tmp_path: Path
) -> None:
    topic = f"{PREFIX}wrong-password-stream"
    create_topic(secured, topic, 1)
    wrong = "wrong-pw-8Lp3-not-logged"
    stream = with_options(
        spark.readStream.format("mq"), secured.spark_options(USERS["bob"], password=wrong)
    ).option("subscribe", topic)
    started = time.monotonic()
    query = (
        stream.load()
        .writeStream.format("memory")
        .queryName("refused_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException) as caught:
            query.awaitTermination(STREAM_TIMEOUT_S)
    finally:
        query.stop()
    assert time.monotonic() - started < FAIL_FAST_S
    text = str(caught.value)
    assert "authentication failed" in text
    assert "retryTimeoutMs" not in text
    assert_no_password(text, wrong)


def test_a_principal_without_read_gets_the_topics_authorization_error(
    spark: SparkSession, secured: Secured
) -> None:
    topic = f"{PREFIX}not-yours"
    create_topic(secured, topic, 1)
    with mq.SyncProducer(secured.bootstrap, **secured.client()) as producer:
        producer.send(topic, b"private").result(60)
    for user, operation in (("carol", "READ"), ("dave", "DESCRIBE")):
        # carol may write (so describe) the topic: the task's fetch is refused;
        # dave may do nothing: the topic is not even listed to him, and the planning
        # says he may not DESCRIBE it, not that it does not exist
        reads = with_options(spark.read.format("mq"), secured.spark_options(USERS[user])).option(
            "subscribe", topic
        )
        text, took = failure(reads.load().collect)
        assert "TopicAuthorizationFailedError" in text
        assert f"User:{user} is not authorized to {operation} topic '{topic}'" in text
        assert "do not exist" not in text
        assert took < FAIL_FAST_S
        assert_no_password(text)


def test_a_write_only_principal_is_told_the_sink_needs_read(
    spark: SparkSession, secured: Secured
) -> None:
    topic = f"{PREFIX}write-only"
    create_topic(secured, topic, 1)
    writes = with_options(
        frame(spark, records(3)).write.format("mq"), secured.spark_options(USERS["carol"])
    ).option("topic", topic)
    text, took = failure(lambda: writes.mode("append").save())
    assert "not authorized to READ topic" in text
    assert "needs READ as well as WRITE" in text
    assert took < FAIL_FAST_S
    assert_no_password(text)


def test_a_broker_certificate_the_job_does_not_trust_fails_at_once(
    spark: SparkSession, secured: Secured
) -> None:
    topic = f"{PREFIX}untrusted"
    create_topic(secured, topic, 1)
    options = secured.spark_options(USERS["alice"], truststore=secured.pki.other_ca)
    reads = with_options(spark.read.format("mq"), options).option("subscribe", topic)
    writes = with_options(frame(spark, records(3)).write.format("mq"), options).option(
        "topic", topic
    )
    for action in (lambda: reads.load().collect(), lambda: writes.mode("append").save()):
        text, took = failure(action)
        assert "TlsMismatchError" in text
        assert "certificate is refused" in text
        assert "retryTimeoutMs" not in text  # refused at once, not retried for 30 s
        assert took < FAIL_FAST_S
        assert_no_password(text)


# -- the connector's own logs ----------------------------------------------------------------


def test_the_connectors_log_lines_and_reprs_hold_no_password(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    """The driver's planning, run here (its log records are this process's), at DEBUG
    for every logger: a good login, then a refused one."""
    topic = f"{PREFIX}logs"
    create_topic(secured, topic, 2)
    caplog.set_level(logging.DEBUG)
    good = parse_read_options({**secured.spark_options(USERS["bob"]), "subscribe": topic}, "batch")
    assert MQBatchReader(good).partitions() == []  # an empty topic: nothing to plan
    wrong = "wrong-pw-6Dd0-not-logged"
    bad = parse_read_options(
        {**secured.spark_options(USERS["bob"], password=wrong), "subscribe": topic}, "batch"
    )
    with pytest.raises(SaslAuthenticationFailedError) as caught:
        MQBatchReader(bad).partitions()
    shown = caplog.text + repr(good) + repr(bad) + str(caught.value) + repr(caught.value)
    assert_no_password(shown, wrong)


def test_no_password_in_the_plans_of_a_write_and_a_read(
    spark: SparkSession, secured: Secured
) -> None:
    """The write's plan holds its options (``AppendData``'s write options): Spark
    redacts the jaas config there, by its value (``spark.redaction.regex`` matches
    ``password``). The status store's plans (the SQL UI's) too."""
    topic = f"{PREFIX}plans"
    create_topic(secured, topic, PARTITIONS)
    options = secured.spark_options(USERS["alice"])
    ensure_callback_server_started(spark.sparkContext._gateway)
    recorder = PlanRecorder()
    listeners = spark._jsparkSession.listenerManager()
    listeners.register(recorder)
    try:
        df = frame(spark, records(3))
        with_options(df.write.format("mq"), options).option("topic", topic).mode("append").save()
        with_options(spark.read.format("mq"), options).option("subscribe", topic).load().count()
        deadline = time.monotonic() + PLAN_WAIT_S  # the listener bus calls back later
        while len(recorder.plans) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        listeners.unregister(recorder)
    write = [plan for plan in recorder.plans if "AppendData" in plan]
    assert write, "the write's plan was not seen"
    assert f"topic={topic}" in write[0] or f"topic -> {topic}" in write[0], write[0]
    assert "kafka.sasl.jaas.config" in write[0]
    assert "*********(redacted)" in write[0]
    for plan in recorder.plans:
        assert_no_password(plan)
    store = spark._jsparkSession.sharedState().statusStore()
    executions = store.executionsList()
    for i in range(executions.size()):
        execution = executions.apply(i)
        assert_no_password(execution.details() + execution.physicalPlanDescription())


def test_the_readme_example_runs_as_written(
    spark: SparkSession, secured: Secured, tmp_path: Path
) -> None:
    """The README's "Spark over SASL_SSL": its shell block (the READ grant, through
    ``mq acl add --command-config``) then its Python block, in this session, with the
    README's address, CA file, user and topic swapped for this broker's. The user is
    carol, who may only write ``sec-*``: the grant is what lets the sink write."""
    carol = USERS["carol"]
    topic = f"{PREFIX}orders"
    create_topic(secured, topic, 1)
    text = README.read_text()
    config = tmp_path / "client.toml"
    config.write_text(
        'security_protocol = "SASL_SSL"\n'
        f'sasl_mechanism = "{ADMIN.mechanism}"\n'
        f'sasl_plain_username = "{ADMIN.name}"\n'
        f'ssl_cafile = "{secured.pki.ca}"\n'
    )
    shell = swapped(
        readme_block(text, "sh"),
        {
            "User:bob": f"User:{carol.name}",
            "--topic orders": f"--topic {topic}",
            "127.0.0.1:9393": secured.bootstrap,
            "client.toml": str(config),
        },
    )
    done = subprocess.run(
        ["bash", "-euc", shell],
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "MQ_SASL_PASSWORD": ADMIN.password,
        },
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    wait_for_read(secured, carol, topic)
    block = swapped(
        readme_block(text, "python"),
        {
            '"127.0.0.1:9393"': f'"{secured.bootstrap}"',
            '"ca.pem"': f'"{secured.pki.ca}"',
            'username="bob" password="bob-secret"': (
                f'username="{carol.name}" password="{carol.password}"'
            ),
            '"orders"': f'"{topic}"',
        },
    )
    assert carol.mechanism in block
    exec(compile(block, "README.md", "exec"), {"spark": spark})
    with mq.SyncConsumer(
        bootstrap=secured.bootstrap, auto_offset_reset="earliest", **secured.client()
    ) as consumer:
        consumer.assign([mq.TopicPartition(topic, 0)])
        got: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 60
        while len(got) < 2 and time.monotonic() < deadline:
            got += [(r.key, r.value) for rs in consumer.poll(timeout_ms=500).values() for r in rs]
    assert sorted(got) == [(b"k1", b"v1"), (b"k2", b"v2")]


def wait_for_read(secured: Secured, user: User, topic: str) -> None:
    """Until ``user`` may fetch ``topic`` (a new ACL reaches the broker's cache through
    a watch), bounded."""
    deadline = time.monotonic() + ACL_WAIT_S
    while True:
        with mq.SyncConsumer(
            bootstrap=secured.bootstrap, auto_offset_reset="earliest", **secured.client(user)
        ) as consumer:
            tp = mq.TopicPartition(topic, 0)
            consumer.assign([tp])
            try:
                while consumer.highwater(tp) < 0:  # -1 until a fetch is answered
                    assert time.monotonic() < deadline, "no fetch was answered"
                    consumer.poll(timeout_ms=200)
                return
            except TopicAuthorizationFailedError:
                assert time.monotonic() < deadline, "the READ grant never took effect"
        time.sleep(0.1)


def test_planning_tells_a_refused_topic_from_a_missing_one(secured: Secured) -> None:
    """The driver's planning, run here: a topic dave may not DESCRIBE is refused by
    name (a listing leaves it out, which used to read as "does not exist"); a topic
    that does not exist still is one."""
    topic = f"{PREFIX}refused"
    create_topic(secured, topic, 1)
    dave = parse_read_options({**secured.spark_options(USERS["dave"]), "subscribe": topic}, "batch")
    with pytest.raises(TopicAuthorizationFailedError, match="not authorized to DESCRIBE topic"):
        MQBatchReader(dave).partitions()
    missing = {**secured.spark_options(USERS["alice"]), "subscribe": f"{PREFIX}no-such-topic"}
    with pytest.raises(OptionError, match="do not exist"):
        MQBatchReader(parse_read_options(missing, "batch")).partitions()
