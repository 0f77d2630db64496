"""A secured chaos cluster: one ``sasl_ssl`` listener per broker, SCRAM users, ACLs on.

``mq chaos --secure`` runs the same workloads and faults against brokers that
listen only on ``sasl_ssl``: brokers replicate, forward and coordinate over TLS as
the user ``broker`` (SCRAM-SHA-512), the workloads' clients connect as the super
user ``chaos`` (SCRAM-SHA-256), and the ACLs are on (the listener authenticates),
so every request of a run also passes authentication and authorization. The
certificates come from a throwaway CA made for the run (:mod:`mq.local_pki`); the
passwords are random per run; the users are written into etcd before the first
broker starts, with ``mq user add --metadata``.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Callable
from typing import Final

from mq.local_cluster import LocalCluster, LocalClusterError, Setting
from mq.local_pki import local_pki

BROKER_USER: Final = "broker"
BROKER_MECHANISM: Final = "SCRAM-SHA-512"
CLIENT_USER: Final = "chaos"
CLIENT_MECHANISM: Final = "SCRAM-SHA-256"
SCRAM_ITERATIONS: Final = 4096
"""SCRAM's minimum (RFC 7677): the run's logins are many, and its passwords random."""
USER_ADD_TIMEOUT_S: Final = 60
"""Bound on one ``mq user add`` (a Python start and one etcd write)."""


def secure(cluster: LocalCluster) -> Callable[[str], None]:
    """Make every broker of the (not yet started) ``cluster`` serve one ``sasl_ssl``
    listener on its address and port, and set :attr:`LocalCluster.client_security`.
    Returns the step for :meth:`LocalCluster.start` that writes the users."""
    hosts = sorted({b.host for b in cluster.brokers.values()})
    pki = local_pki(cluster.base_dir / "pki", hosts)
    broker_password = secrets.token_urlsafe(18)
    client_password = secrets.token_urlsafe(18)
    settings: dict[str, Setting] = {
        "tls_cert": str(pki.server.cert),
        "tls_key": str(pki.server.key),
        "tls_trust_ca": str(pki.ca),
        "inter_broker_listener": "SASL_SSL",
        "inter_broker_sasl_mechanism": BROKER_MECHANISM,
        "inter_broker_sasl_username": BROKER_USER,
        "inter_broker_sasl_password": broker_password,
        "super_users": [CLIENT_USER],
    }
    for broker in cluster.brokers.values():
        broker.settings.update(settings)
        broker.settings["listeners"] = [f"sasl_ssl://{broker.host}:{broker.port}"]
    cluster.client_security = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": CLIENT_MECHANISM,
        "sasl_plain_username": CLIENT_USER,
        "sasl_plain_password": client_password,
        "ssl_cafile": str(pki.ca),
    }
    users = {
        BROKER_USER: (BROKER_MECHANISM, broker_password),
        CLIENT_USER: (CLIENT_MECHANISM, client_password),
    }

    def add_users(etcd_url: str) -> None:
        for name, (mechanism, password) in users.items():
            _add_user(etcd_url, name, mechanism, password)

    return add_users


def _add_user(etcd_url: str, name: str, mechanism: str, password: str) -> None:
    """``mq user add --metadata``, as an operator bootstraps a secured cluster (the chaos
    package stays outside the brokers' code: it drives them as a user would)."""
    command = [sys.executable, "-m", "mq_cli.main", "user", "add", name, "--password-stdin"]
    command += ["--mechanism", mechanism, "--iterations", str(SCRAM_ITERATIONS)]
    command += ["--metadata", etcd_url]
    try:
        done = subprocess.run(
            command,
            input=password + "\n",
            capture_output=True,
            text=True,
            timeout=USER_ADD_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise LocalClusterError(f"mq user add {name} took over {USER_ADD_TIMEOUT_S} s") from None
    if done.returncode != 0:
        raise LocalClusterError(f"mq user add {name} failed: {done.stderr.strip()}")
