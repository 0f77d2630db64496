"""A real ``mq serve`` with one ``sasl_ssl`` listener, users and ACLs, for the Spark
security tests (``test_security_e2e.py``).

The first user (``admin``, a super user) is written into the data directory with
``mq user add --data-dir`` before the broker starts, as the README's secured single
node does; the broker then listens only on ``sasl_ssl://127.0.0.1:PORT`` with a
certificate made by the test (:mod:`tls_certs`), so the ACLs are on. ``admin``
adds the other users (SCRAM-SHA-256 and -512) and their ACLs through the broker.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tls_certs import Pki

import mq
from mq.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType
from mq.local_cluster import BrokerProcess, free_port

PREFIX: Final = "sec-"
"""Every topic of these tests; the ACLs are prefixed ACLs on it."""
CLI_TIMEOUT_S: Final = 120.0
"""``mq user add`` (a Python start and a key derivation) on a loaded machine."""
ACL_WAIT_S: Final = 30.0
"""How long a new ACL may take to reach the broker's cache (a watch: well under 1 s)."""
SCRAM_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"


@dataclass(frozen=True)
class User:
    name: str
    password: str
    mechanism: str
    grants: tuple[Operation, ...]
    """Prefixed ALLOW bindings on the topics ``sec-*``."""


USERS: Final = {
    user.name: user
    for user in (
        User(
            "alice", "alice-pw-7Qx2-not-logged", "SCRAM-SHA-256", (Operation.READ, Operation.WRITE)
        ),
        User("bob", "bob-pw-9Kz4-not-logged", "SCRAM-SHA-512", (Operation.READ, Operation.WRITE)),
        User("carol", "carol-pw-3Jm8-not-logged", "SCRAM-SHA-256", (Operation.WRITE,)),
        User("dave", "dave-pw-5Ht1-not-logged", "SCRAM-SHA-512", ()),
    )
}
"""alice and bob read and write ``sec-*``; carol may only write; dave may do nothing."""
ADMIN: Final = User("admin", "admin-pw-1Vb6-not-logged", "SCRAM-SHA-256", ())
"""The super user that sets the broker up."""


@dataclass(frozen=True)
class Secured:
    broker: BrokerProcess
    pki: Pki

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def client(self, user: User = ADMIN) -> dict[str, Any]:
        """mq's client security keywords for ``user``."""
        return {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": user.mechanism,
            "sasl_plain_username": user.name,
            "sasl_plain_password": user.password,
            "ssl_cafile": str(self.pki.ca),
        }

    def spark_options(
        self, user: User, *, password: str | None = None, truststore: Path | None = None
    ) -> dict[str, str]:
        """The options a Kafka user gives Spark's Kafka source, for ``user``."""
        secret = user.password if password is None else password
        return {
            "kafka.bootstrap.servers": self.bootstrap,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": user.mechanism,
            "kafka.sasl.jaas.config": (
                f'{SCRAM_MODULE} required username="{user.name}" password="{secret}";'
            ),
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": str(truststore or self.pki.ca),
        }


def add_first_user(data_dir: Path) -> None:
    """``mq user add admin --password-stdin --data-dir DIR`` (the broker is not running)."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "mq_cli.main", "user", "add", ADMIN.name),
            *("--password-stdin", "--mechanism", ADMIN.mechanism, "--data-dir", str(data_dir)),
        ],
        input=ADMIN.password + "\n",
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def start(base: Path, pki: Pki) -> Secured:
    """The broker, listening on its one ``sasl_ssl`` listener, with the users of
    :data:`USERS` and their ACLs in place (the caller stops it)."""
    data_dir = base / "data"
    add_first_user(data_dir)
    port = free_port()
    broker = BrokerProcess(
        data_dir,
        port=port,
        settings={
            "listeners": [f"sasl_ssl://127.0.0.1:{port}"],
            "tls_cert": str(pki.server.cert),
            "tls_key": str(pki.server.key),
            "super_users": [ADMIN.name],
        },
    )
    broker.start()
    secured = Secured(broker, pki)
    try:
        asyncio.run(_set_up(secured))
    except BaseException:
        broker.stop()
        raise
    return secured


async def _set_up(secured: Secured) -> None:
    async with mq.Admin(secured.bootstrap, **secured.client()) as admin:
        bindings = []
        for user in USERS.values():
            await admin.add_user(user.name, user.password, mechanism=user.mechanism)
            bindings += [
                AclBinding(
                    f"User:{user.name}",
                    Permission.ALLOW,
                    operation,
                    ResourceType.TOPIC,
                    PREFIX,
                    PatternType.PREFIXED,
                )
                for operation in user.grants
            ]
        await admin.create_acls(bindings)
        await admin.create_topic(PREFIX + "acl-probe", 1, 1)
    # the ACLs reach the broker's cache through a watch: wait (bounded) until they show
    for user in USERS.values():
        if user.grants:
            await _wait_visible(secured, user, PREFIX + "acl-probe")


async def _wait_visible(secured: Secured, user: User, topic: str) -> None:
    deadline = time.monotonic() + ACL_WAIT_S
    async with mq.Admin(secured.bootstrap, **secured.client(user)) as admin:
        while topic not in await admin.list_topics():
            assert time.monotonic() < deadline, f"{user.name}'s ACLs never took effect"
            await asyncio.sleep(0.1)


def create_topic(secured: Secured, name: str, partitions: int) -> None:
    async def create() -> None:
        async with mq.Admin(secured.bootstrap, **secured.client()) as admin:
            await admin.create_topic(name, partitions, 1)

    asyncio.run(create())
