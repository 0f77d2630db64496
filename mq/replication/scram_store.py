"""SCRAM credentials in the metadata store, and every broker's cached copy of them.

A user's credentials live under ``/users/<name>`` (msgpack: mechanism →
``[salt, stored_key, server_key, iterations]``), in etcd for a cluster or the
embedded store's file for a single node. Only SCRAM's *stored* keys are kept
(RFC 5802: StoredKey = H(HMAC(SaltedPassword, "Client Key")), ServerKey =
HMAC(SaltedPassword, "Server Key"), SaltedPassword = PBKDF2(password, salt,
iterations)): never the password, nor the salted password, so a copy of the
store does not let anyone log in (it allows an offline guessing attack, at
``iterations`` PBKDF2 rounds per guess).

:class:`CredentialCache` is every broker's view: read once, then kept up to date
by a watch of ``/users/``, so a user added through any broker (or offline, in the
store directly) can log in on every broker within the watch's latency
(milliseconds; a second at worst while the store reconnects).

Thread safety: one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import msgpack
from scramp import ScramMechanism

from mq.errors import InvalidRequestError, MQError
from mq.replication.store import (
    CompactedError,
    Compare,
    Delete,
    EventKind,
    MetadataStore,
    Put,
)

log = logging.getLogger(__name__)

USERS = "/users/"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS = 4096
"""RFC 7677's minimum (and Kafka's)."""
MAX_ITERATIONS = 16_384
"""Kafka's maximum. A SCRAM login costs the client this many HMAC rounds (the broker
keeps the stored keys; a PLAIN login costs the broker them): the bound keeps a stored
credential from making every login spin."""
DEFAULT_ITERATIONS = 8192
MAX_USER_NAME = 255
"""Longest user name (bytes of UTF-8): it is a key of the metadata store."""
USER_NAME = re.compile(r"[^\x00-\x1f/,=\x7f]+")
"""A user name: no control characters, no '/' (a store key), no ',' or '=' (SCRAM's
separators would need escaping in every tool that prints one)."""
RETRY_S = 1.0


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def check_user_name(name: str) -> None:
    if len(name.encode()) > MAX_USER_NAME or not USER_NAME.fullmatch(name):
        raise InvalidRequestError(
            f"user name {name!r}: 1 to {MAX_USER_NAME} bytes, no control characters, "
            "'/', ',' or '='"
        )


def check_mechanism(mechanism: str) -> None:
    if mechanism not in SCRAM_MECHANISMS:
        raise InvalidRequestError(f"mechanism {mechanism!r}: one of {', '.join(SCRAM_MECHANISMS)}")


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise InvalidRequestError(
            f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}"
        )


def make_credential(
    mechanism: str,
    password: str,
    *,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for ``password`` (a random salt unless given; SASLprep'd by scramp)."""
    check_mechanism(mechanism)
    check_iterations(iterations)
    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt
    )
    return ScramCredential(salt, stored_key, server_key, count)


def user_key(name: str) -> str:
    return f"{USERS}{name}"


def _decode(value: bytes) -> dict[str, ScramCredential]:
    raw: dict[str, list[Any]] = msgpack.unpackb(value)
    return {mech: ScramCredential(*fields) for mech, fields in raw.items()}


def _encode(credentials: dict[str, ScramCredential]) -> bytes:
    packed: bytes = msgpack.packb(
        {
            mech: [c.salt, c.stored_key, c.server_key, c.iterations]
            for mech, c in sorted(credentials.items())
        }
    )
    return packed


async def _update(store: MetadataStore, name: str, change: Any) -> bool:
    """Read-modify-write ``/users/<name>`` with compare-and-swap; ``change`` edits the
    dict (returns False if nothing changed). False if there was nothing to change."""
    key = user_key(name)
    for _ in range(10):
        entry = await store.get(key)
        current = _decode(entry.value) if entry is not None else {}
        if not change(current):
            return False
        guard = Compare(key, entry.mod_revision if entry is not None else 0)
        op: Put | Delete = Put(key, _encode(current)) if current else Delete(key)
        if await store.commit([guard], [op]) is not None:
            return True
    raise MQError(f"user {name!r} kept changing under this update; try again")


async def put_credential(
    store: MetadataStore, name: str, mechanism: str, credential: ScramCredential
) -> None:
    """Set (add or replace) one mechanism's credential of a user."""
    check_user_name(name)
    check_mechanism(mechanism)
    check_iterations(credential.iterations)

    def change(current: dict[str, ScramCredential]) -> bool:
        current[mechanism] = credential
        return True

    await _update(store, name, change)


async def delete_credential(store: MetadataStore, name: str, mechanism: str | None) -> bool:
    """Delete one mechanism's credential (None: all of the user's); False if absent."""

    def change(current: dict[str, ScramCredential]) -> bool:
        if mechanism is None:
            had = bool(current)
            current.clear()
            return had
        return current.pop(mechanism, None) is not None

    return await _update(store, name, change)


async def read_users(store: MetadataStore) -> tuple[dict[str, dict[str, ScramCredential]], int]:
    """Every user's credentials, and the store revision of the read."""
    entries, revision = await store.get_prefix(USERS)
    users = {}
    for entry in entries:
        try:
            users[entry.key[len(USERS) :]] = _decode(entry.value)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            log.error("ignoring the unreadable credentials at %s: %s", entry.key, exc)
    return users, revision


class CredentialCache:
    """The users' credentials, as the metadata store has them (see the module docstring)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self._task: asyncio.Task[None] | None = None

    def get(self, name: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(name, {}).get(mechanism)

    def any_credential(self, name: str) -> ScramCredential | None:
        """One of the user's credentials (PLAIN checks the password against it)."""
        found = self._users.get(name)
        if not found:
            return None
        return found.get("SCRAM-SHA-256") or next(iter(found.values()))

    def mechanism_of(self, name: str) -> str | None:
        found = self._users.get(name)
        if not found:
            return None
        return "SCRAM-SHA-256" if "SCRAM-SHA-256" in found else next(iter(found))

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return dict(self._users)

    async def start(self) -> None:
        users, revision = await read_users(self._store)
        self._users = users
        self._task = asyncio.get_running_loop().create_task(
            self._follow(revision), name="scram-credentials"
        )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _follow(self, revision: int) -> None:
        while True:
            try:
                async for event in self._store.watch(USERS, revision):
                    name = event.key[len(USERS) :]
                    revision = event.revision
                    if event.kind is EventKind.PUT:
                        try:
                            self._users[name] = _decode(event.value)
                        except (ValueError, TypeError, msgpack.UnpackException) as exc:
                            log.error("ignoring the unreadable credentials of %r: %s", name, exc)
                    else:
                        self._users.pop(name, None)
            except CompactedError:
                log.warning("the credentials' watch fell behind; reloading")
            except MQError as exc:
                log.warning("the credentials' watch: %s", exc)
                await asyncio.sleep(RETRY_S)
            try:
                self._users, revision = await read_users(self._store)
            except MQError as exc:
                log.warning("reloading the credentials: %s", exc)
                await asyncio.sleep(RETRY_S)
