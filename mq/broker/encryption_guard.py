"""Encryption at rest is not dropped by a forgotten flag.

The first broker that starts with ``encryption_key_file`` records in the metadata
store (etcd, or the embedded store in the data directory) that the cluster's data
is encrypted. A broker that starts later without a key file (a restart without the
flag, a new broker added without the file) would store new batches in clear next
to encrypted ones and could not read the encrypted ones: it refuses to start and
says why, unless ``allow_plaintext_storage`` says that clear storage is wanted.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Final

from mq.broker.config import BrokerConfig
from mq.errors import InvalidConfigError
from mq.replication.store import MetadataStore

log = logging.getLogger(__name__)

ENCRYPTED_KEY: Final = "/encryption_at_rest"
"""The store key: present once a broker with a key file has run (JSON: who, since when)."""


async def check(store: MetadataStore, config: BrokerConfig) -> None:
    """Record that the data is encrypted (a broker with a key file), or refuse to start
    without one where it is (:class:`InvalidConfigError`)."""
    if config.encryption_key_file is not None:

        def first() -> bytes:
            since = {"node_id": config.node_id, "since_ms": int(time.time() * 1000)}
            return json.dumps(since).encode()

        await store.get_or_create(ENCRYPTED_KEY, first)
        return
    found = await store.get(ENCRYPTED_KEY)
    if found is None:
        return
    try:
        since = json.loads(found.value)
        who = f"broker {since['node_id']} has encrypted it since {_when(since['since_ms'])}"
    except (ValueError, KeyError, TypeError):
        who = "a broker with a key file ran on it"
    if config.allow_plaintext_storage:
        log.warning(
            "no encryption_key_file, although the cluster's data is encrypted at rest (%s): "
            "new batches are stored in clear (allow_plaintext_storage)",
            who,
        )
        return
    raise InvalidConfigError(
        f"the cluster's data is encrypted at rest ({who}) but this broker has no "
        "encryption_key_file: it could not read the encrypted batches and would store "
        "new ones in clear. Start it with --encryption-key-file (the same key file as "
        "the other brokers), or set allow_plaintext_storage = true to store in clear"
    )


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
