"""Security benchmark: W1 (produce) and W3 (consume) over ``sasl_ssl`` as a ratio of
plaintext, in one invocation against one broker process (issue 19).

The broker has two listeners, ``plaintext`` and ``sasl_ssl`` (TLS 1.2+ with a
certificate made here, SCRAM-SHA-256 with a user added offline before the start).
Each run measures both variants one after the other, alternating which goes first,
each on a new topic: W1 as in :mod:`benchmarks.client` (one producer, ``send()``
record by record, acks=1, verified offsets), W3 one consumer reading them back
(every payload checked). Figures are medians of ``--runs``; ``ratio`` is
sasl_ssl's median msg/s over plaintext's, ``paired_ratio`` the median over runs of
each run's own ratio (the two variants of a run are measured back to back, so a
machine whose load drifts between runs disturbs it less). Usage::

    python -m benchmarks.security [--messages N] [--size BYTES] [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from benchmarks.client import payloads
from benchmarks.common import Broker
from mq import Admin, Consumer, Producer, RecordFuture, TopicPartition
from mq.local_cluster import free_ports

USER, PASSWORD = "bench", "bench-password"
VARIANTS = ("plaintext", "sasl_ssl")


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA (the client trusts it as such)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mq-bench")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "bench.pem", directory / "bench.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def produce(
    bootstrap: str, topic: str, values: list[bytes], options: dict[str, Any]
) -> tuple[float, bool]:
    async with Producer(bootstrap, acks=1, **options) as producer:
        futures: list[RecordFuture] = []
        start = time.perf_counter()
        for value in values:
            futures.append(await producer.send(topic, value))
        await producer.flush()
        seconds = time.perf_counter() - start
        offsets = [f.result().offset for f in futures]
    return seconds, offsets == list(range(len(values)))


async def consume(
    bootstrap: str, topic: str, values: list[bytes], options: dict[str, Any]
) -> tuple[float, bool]:
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap=bootstrap, auto_offset_reset="earliest", **options) as consumer:
        consumer.assign([tp])
        expected, ok = 0, True
        start = time.perf_counter()
        deadline = time.monotonic() + 300
        while expected < len(values) and time.monotonic() < deadline:
            got = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            for record in got.get(tp, ()):
                ok = ok and record.offset == expected and record.value == values[expected]
                expected += 1
        seconds = time.perf_counter() - start
    return seconds, ok and expected == len(values)


async def one_variant(
    address: str, options: dict[str, Any], topic: str, values: list[bytes]
) -> tuple[float, float, bool]:
    async with Admin(address, **options) as admin:
        await admin.create_topic(topic, partitions=1)
    w1, ok1 = await produce(address, topic, values, options)
    w3, ok3 = await consume(address, topic, values, options)
    return w1, w3, ok1 and ok3


def measure(messages: int, size: int, runs: int) -> dict[str, Any]:
    values = payloads(messages, size)
    times: dict[str, dict[str, list[float]]] = {v: {"W1": [], "W3": []} for v in VARIANTS}
    verified = True
    with tempfile.TemporaryDirectory(prefix="mq-bench-security-") as tmp:
        base = Path(tmp)
        cert, key = self_signed(base)
        data = base / "data"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mq_cli.main",
                "user",
                "add",
                USER,
                "--password-stdin",
                "--data-dir",
                str(data),
            ],
            input=PASSWORD + "\n",
            text=True,
            check=True,
            capture_output=True,
        )
        plain_port, sasl_port = free_ports(2)
        config = base / "broker.toml"
        config.write_text(
            f'listeners = ["plaintext://127.0.0.1:{plain_port}", "sasl_ssl://127.0.0.1:{sasl_port}"]\n'
            f'tls_cert = "{cert}"\ntls_key = "{key}"\n'
            # TLS and SASL are measured here, not the ACLs (the sasl_ssl listener would
            # turn them on, and the plaintext variant is anonymous)
            'authorizer = "none"\n'
        )
        addresses = {"plaintext": f"127.0.0.1:{plain_port}", "sasl_ssl": f"127.0.0.1:{sasl_port}"}
        options: dict[str, dict[str, Any]] = {
            "plaintext": {},
            "sasl_ssl": {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_plain_username": USER,
                "sasl_plain_password": PASSWORD,
                "ssl_cafile": str(cert),
            },
        }
        broker = Broker(data, ["--config", str(config)])
        try:
            for run in range(runs):
                order = VARIANTS if run % 2 == 0 else tuple(reversed(VARIANTS))
                for variant in order:
                    w1, w3, ok = uvloop.run(
                        one_variant(
                            addresses[variant], options[variant], f"{variant}-{run}", values
                        )
                    )
                    times[variant]["W1"].append(w1)
                    times[variant]["W3"].append(w3)
                    verified = verified and ok
        finally:
            broker.stop()
    result: dict[str, Any] = {
        "messages": messages,
        "size": size,
        "runs": runs,
        "verified": verified,
    }
    for workload in ("W1", "W3"):
        rates = {v: messages / statistics.median(times[v][workload]) for v in VARIANTS}
        result[workload] = {
            **{f"{v}_msg_per_s": round(rates[v]) for v in VARIANTS},
            "ratio": round(rates["sasl_ssl"] / rates["plaintext"], 3),
            "paired_ratio": round(
                statistics.median(
                    p / s
                    for p, s in zip(
                        times["plaintext"][workload], times["sasl_ssl"][workload], strict=True
                    )
                ),
                3,
            ),
            "runs_s": {v: [round(t, 3) for t in times[v][workload]] for v in VARIANTS},
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.messages, args.size, args.runs)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"W1/W3, {args.messages:,} x {args.size} B, acks=1, loopback; medians of {args.runs} "
            "runs, variants alternated"
        )
        print(
            f"{'workload':<10} {'plaintext msg/s':>16} {'sasl_ssl msg/s':>15} {'ratio':>6} "
            f"{'paired':>6}"
        )
        for workload in ("W1", "W3"):
            row = result[workload]
            plain, secured = row["plaintext_msg_per_s"], row["sasl_ssl_msg_per_s"]
            print(
                f"{workload:<10} {plain:>16,} {secured:>15,} {row['ratio']:>6.2f} "
                f"{row['paired_ratio']:>6.2f}"
            )
        print("verified" if result["verified"] else "NOT VERIFIED")
    return 0 if result["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
