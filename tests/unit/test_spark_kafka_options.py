"""Spark's Kafka source and sink options under their Kafka names (issue 23). Pure."""

from __future__ import annotations

import logging
import ssl
import subprocess
from pathlib import Path

import pytest

from spark_connector import kafka_names
from spark_connector.options import (
    MAX_TRIGGER_DELAY_MS,
    OptionError,
    duration_ms,
    parse_read_options,
    parse_write_options,
)
from spark_connector.ranges import OffsetRange, plan
from spark_connector.security import Security, client_kwargs, parse_jaas, parse_security

SCRAM = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="s3cr\\"et";'
)


def test_kafka_names_are_accepted_and_mean_what_mqs_aliases_mean() -> None:
    kafka = parse_read_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:1,127.0.0.1:2",
            "subscribe": "a, b",
            "kafkaConsumer.pollTimeoutMs": "500",
            "startingOffsets": "earliest",
        },
        "batch",
    )
    mq = parse_read_options(
        {"bootstrap": "127.0.0.1:1,127.0.0.1:2", "topic": "a, b", "pollTimeoutMs": "500"}, "batch"
    )
    assert kafka == mq
    assert kafka.topics == ("a", "b")
    assert kafka.poll_timeout_ms == 500
    # the same value under both names is fine
    both = {"bootstrap": "h:1", "KAFKA.BOOTSTRAP.SERVERS": "h:1", "subscribe": "t"}
    assert parse_read_options(both, "stream").bootstrap == "h:1"
    write = parse_write_options(
        {
            "kafka.bootstrap.servers": "h:9",
            "topic": "out",
            "kafka.linger.ms": "20",
            "kafka.batch.size": "1000",
            "kafka.compression.type": "none",
            "includeHeaders": "true",
        }
    )
    assert (write.bootstrap, write.linger_ms, write.batch_size, write.compression) == (
        "h:9",
        20,
        1000,
        None,
    )


def test_subscribe_pattern_and_assign() -> None:
    pattern = parse_read_options({"subscribePattern": "logs-.*"}, "stream")
    assert (pattern.pattern, pattern.topics, pattern.subscription) == (
        "logs-.*",
        (),
        "topics matching 'logs-.*'",
    )
    assigned = parse_read_options({"assign": '{"a": [0, 2], "b": [1]}'}, "batch")
    assert assigned.assigned == (("a", 0), ("a", 2), ("b", 1))
    assert assigned.topics == ("a", "b")
    ok = parse_read_options(
        {"subscribePattern": "a.*", "startingOffsets": '{"ab": {"0": 3}}'}, "batch"
    )
    assert ok.starting == {"ab": {0: 3}}


def test_timestamps_and_trigger_options() -> None:
    options = parse_read_options(
        {
            "subscribe": "t",
            "startingOffsetsByTimestamp": '{"t": {"0": 1000, "1": 2000}}',
            "endingTimestamp": "5000",
            "startingOffsetsByTimestampStrategy": "LATEST",
            "maxRecordsPerPartition": "10",
        },
        "batch",
    )
    assert options.starting_by_time == {"t": {0: 1000, 1: 2000}}
    assert options.ending_by_time == 5000
    assert options.timestamp_strategy == "latest"
    assert options.max_records_per_partition == 10
    # startingTimestamp wins over startingOffsetsByTimestamp, as in Kafka's source
    both = {"subscribe": "t", "startingTimestamp": "7", "startingOffsetsByTimestamp": '{"t":{}}'}
    assert parse_read_options(both, "stream").starting_by_time == 7
    stream = parse_read_options(
        {
            "subscribe": "t",
            "minOffsetsPerTrigger": "100",
            "maxOffsetsPerTrigger": "1000",
            "maxTriggerDelay": "30s",
        },
        "stream",
    )
    assert (stream.min_offsets_per_trigger, stream.max_trigger_delay_ms) == (100, 30_000)
    assert parse_read_options({"subscribe": "t"}, "stream").max_trigger_delay_ms == (
        MAX_TRIGGER_DELAY_MS
    )
    assert [duration_ms(d, "x") for d in ("250", "250ms", "2s", "15m", "1h", "1d")] == [
        250,
        250,
        2000,
        900_000,
        3_600_000,
        86_400_000,
    ]


@pytest.mark.parametrize(
    ("options", "mode", "message"),
    [
        (
            {"subscribe": "a", "subscribePattern": "b.*"},
            "batch",
            "'subscribe' and 'subscribePattern'",
        ),
        ({"topic": "a", "assign": '{"a": [0]}'}, "batch", "'subscribe' and 'assign'"),
        (
            {"subscribePattern": "x", "assign": '{"a": [0]}'},
            "stream",
            "'subscribePattern' and 'assign'",
        ),
        (
            {"bootstrap": "h:1", "kafka.bootstrap.servers": "h:2", "topic": "t"},
            "batch",
            "'bootstrap' and 'kafka.bootstrap.servers'",
        ),
        ({"topic": "a", "subscribe": "b"}, "batch", "'topic' and 'subscribe'"),
        ({"subscribePattern": "("}, "batch", "not a regular expression"),
        ({"assign": "[0]"}, "batch", "assign is JSON"),
        ({"assign": '{"a": ["x"]}'}, "batch", "list of partition numbers"),
        (
            {"subscribe": "t", "kafka.auto.offset.reset": "earliest"},
            "batch",
            "set startingOffsets instead",
        ),
        ({"subscribe": "t", "kafka.value.deserializer": "x"}, "batch", "kafka.value.deserializer"),
        (
            {"subscribe": "t", "endingTimestamp": "5"},
            "stream",
            "endingtimestamp is for batch reads",
        ),
        ({"subscribe": "t", "startingTimestamp": "-1"}, "batch", "startingTimestamp is a time"),
        (
            {"subscribe": "t", "startingOffsetsByTimestamp": "{"},
            "batch",
            "startingOffsetsByTimestamp is JSON",
        ),
        (
            {"subscribe": "t", "startingOffsetsByTimestamp": '{"u": {"0": 1}}'},
            "batch",
            "names topic(s) ['u']",
        ),
        (
            {"subscribe": "t", "startingOffsetsByTimestampStrategy": "x"},
            "batch",
            "'error' or 'latest'",
        ),
        (
            {"subscribe": "t", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
            "stream",
            "minOffsetsPerTrigger 9 is above maxOffsetsPerTrigger 5",
        ),
        ({"subscribe": "t", "maxTriggerDelay": "soon"}, "stream", "maxTriggerDelay is a duration"),
        ({"subscribe": "t", "maxRecordsPerPartition": "0"}, "batch", "maxRecordsPerPartition is"),
        (
            {"subscribePattern": "a.*", "startingOffsets": '{"b": {"0": 1}}'},
            "batch",
            "subscribePattern does not match",
        ),
        (
            {"subscribe": "t", "kafka.bootstrap.servers": " "},
            "batch",
            "kafka.bootstrap.servers (bootstrap) is",
        ),
        ({"subscribe": "t", "subscibe": "t"}, "batch", "unknown option(s) subscibe"),
    ],
)
def test_bad_or_conflicting_options_fail_naming_them(
    options: dict[str, str], mode: str, message: str
) -> None:
    with pytest.raises(OptionError) as caught:
        parse_read_options(options, mode)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_options_without_meaning_for_mq_warn_once(caplog: pytest.LogCaptureFixture) -> None:
    kafka_names._warned.clear()
    caplog.set_level(logging.INFO, "spark_connector.kafka_names")
    options = {
        "subscribe": "t",
        "kafka.max.poll.records": "10",
        "fetchOffset.numRetries": "3",
        "fetchOffset.retryIntervalMs": "10",
        "groupIdPrefix": "spark-kafka",
        "kafka.group.id": "g",
    }
    first = parse_read_options(options, "batch")
    assert first == parse_read_options({"subscribe": "t"}, "batch")  # nothing misread
    parse_read_options(options, "stream")
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 5  # once each, not once per parse
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'kafka.max.poll.records'" in m for m in warned)
    assert any("'fetchOffset.numRetries'" in m and "retryTimeoutMs" in m for m in warned)
    assert any("'groupIdPrefix' is accepted and unused" in m for m in messages)
    assert parse_write_options({"kafka.acks": "1"}).topic is None  # warned, not refused


def test_max_records_per_partition_cuts_ranges() -> None:
    start = {("a", 0): 0, ("a", 1): 10}
    end = {("a", 0): 25, ("a", 1): 15}
    assert plan(start, end, None, 10) == [
        OffsetRange("a", 0, 0, 8),
        OffsetRange("a", 0, 8, 16),
        OffsetRange("a", 0, 16, 25),
        OffsetRange("a", 1, 10, 15),
    ]


def test_security_options_map_to_the_clients_kwargs() -> None:
    assert client_kwargs(parse_security({})) == {}
    sasl = parse_security(
        {
            "kafka.security.protocol": "sasl_plaintext",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": SCRAM,
        }
    )
    assert client_kwargs(sasl) == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": 's3cr"et',
    }
    assert "s3cr" not in repr(sasl)  # the password never shows
    tls = parse_security(
        {
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.location": "/etc/ca.pem",
            "kafka.ssl.truststore.type": "PEM",
        }
    )
    assert client_kwargs(tls) == {"security_protocol": "SSL", "ssl_cafile": "/etc/ca.pem"}
    plain = parse_security(
        {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": "kafkashaded.org.apache.kafka.common.security.plain."
            "PlainLoginModule required username=bob password=pw;",
            "kafka.ssl.endpoint.identification.algorithm": "",
        }
    )
    kwargs = client_kwargs(plain)
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("bob", "pw")
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert not kwargs["ssl_context"].check_hostname
    options = parse_read_options(
        {"subscribe": "t", "kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "c"},
        "batch",
    )
    assert options.security == Security(protocol="SSL", cafile="c")


def test_pem_files_build_a_context(tmp_path: Path) -> None:
    """A truststore given as PEM text and a PEM keystore with its key's password."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-passout",
            "pass:kp",
        ],
        check=True,
        capture_output=True,
    )
    keystore = tmp_path / "keystore.pem"
    keystore.write_bytes(cert.read_bytes() + key.read_bytes())
    security = parse_security(
        {
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.certificates": cert.read_text(),
            "kafka.ssl.keystore.location": str(keystore),
            "kafka.ssl.key.password": "kp",
        }
    )
    assert isinstance(client_kwargs(security)["ssl_context"], ssl.SSLContext)
    wrong = Security(protocol="SSL", certfile=str(keystore), key_password="nope")
    with pytest.raises(ssl.SSLError):
        client_kwargs(wrong)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kafka.security.protocol": "TLS"}, "kafka.security.protocol is one of"),
        (
            {"kafka.sasl.mechanism": "PLAIN"},
            "kafka.sasl.mechanism needs kafka.security.protocol SASL",
        ),
        (
            {"kafka.ssl.truststore.location": "x.pem"},
            "needs kafka.security.protocol SSL or SASL_SSL, not unset",
        ),
        ({"kafka.security.protocol": "SASL_SSL"}, "GSSAPI/Kerberos, is not supported"),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER"},
            "kafka.sasl.mechanism is one of",
        ),
        (
            {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"},
            "kafka.sasl.jaas.config is required",
        ),
        (
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "PLAIN",
                "kafka.sasl.jaas.config": SCRAM,
            },
            "needs PlainLoginModule",
        ),
        (
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-256",
                "kafka.sasl.jaas.config": "garbage",
            },
            "is not '<LoginModule class>",
        ),
        (
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-256",
                "kafka.sasl.jaas.config": 'a.ScramLoginModule required username="u";',
            },
            'has no password="..."',
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "t.jks"},
            "reads PEM only",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.type": "JKS"},
            "JKS is not supported",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.endpoint.identification.algorithm": "x"},
            "https or empty",
        ),
        (
            {"kafka.security.protocol": "SSL", "kafka.ssl.cipher.suites": "x"},
            "kafka.ssl.cipher.suites are not supported",
        ),
    ],
)
def test_bad_security_options_fail_naming_them_and_hide_the_password(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(OptionError) as caught:
        parse_read_options({"subscribe": "t", **options}, "batch")
    assert message in str(caught.value)
    assert "s3cr" not in str(caught.value)


def test_jaas_entries() -> None:
    module, entries = parse_jaas(SCRAM)
    assert module == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert entries == {"username": "alice", "password": 's3cr"et'}
    with pytest.raises(OptionError) as caught:
        parse_jaas('a.PlainLoginModule required username="u" password="hunter2" ???;')
    assert "hunter2" not in str(caught.value)
