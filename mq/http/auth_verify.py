"""HTTP Basic credentials checked against the broker's SCRAM users, with bounded work.

:meth:`BasicVerifier.verify` answers the user a ``user:password`` pair proves, or
None. The password is checked the way SASL PLAIN checks it
(:func:`mq.broker.sasl.credential_for`, :func:`mq.broker.sasl.password_matches`):
PBKDF2 with the user's stored salt and iterations, in a worker thread, against a
stable fake credential for an unknown user, so that an unknown user and a wrong
password cost the same and are answered the same, after the same
``sasl_failed_authentication_delay_ms``.

Bounds (each a :class:`~mq.broker.config.BrokerConfig` key, reasons there):

* **a cache of successful logins** (``http_auth_cache_entries``, least recently used
  out, each trusted ``http_auth_cache_ttl_ms``): keyed by an HMAC of the credentials
  under a random per-process key (the cache never holds a password, nor a hash one
  could test guesses against offline), holding the user and the stored key it was
  checked against; a hit whose user's credential changed or was deleted since is
  dropped, so a new password or a removed user takes effect at once;
* **failed logins per client address** (``http_auth_failures_per_ip`` per
  ``http_auth_failure_window_ms``): past it the address is refused (429) without any
  PBKDF2 until its window ends; at most :data:`MAX_TRACKED_ADDRESSES` addresses are
  tracked (the oldest window is dropped past it);
* **PBKDF2 derivations at once**: :data:`MAX_VERIFYING` (others wait their turn).

The password is never stored, logged or audited; failures are counted and logged at
most once per :data:`LOG_INTERVAL_S`.

Thread safety: one event loop (only the derivation runs in a worker thread, on its
own inputs).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from mq.broker.sasl import credential_for, password_matches
from mq.replication.scram_store import MAX_USER_NAME, CredentialCache

log = logging.getLogger(__name__)

MAX_TRACKED_ADDRESSES: Final = 10_000
"""Client addresses whose failed logins are counted at once (~100 bytes each): more
distinct addresses failing within one window than this drop the oldest windows (each
address still gets at most ``http_auth_failures_per_ip`` tries per window)."""
MAX_VERIFYING: Final = 2
"""PBKDF2 derivations running at once (one per core of a small broker): a burst of
logins queues instead of taking every thread of the loop's executor."""
MAX_CREDENTIALS_BYTES: Final = MAX_USER_NAME + 1 + 1024
"""A Basic ``user:password`` longer than this is refused unchecked (a name is at most
255 bytes; no password needs a kilobyte), before any hashing."""
LOG_INTERVAL_S: Final = 10.0
"""At most one warning about failed HTTP logins per this many seconds (with the count)."""


@dataclass
class _Remembered:
    user: str
    mechanism: str
    stored_key: bytes
    expires: float


@dataclass
class _Window:
    start: float
    failures: int


class Throttled(Exception):
    """The client address failed too many logins: refused until ``retry_after_s``."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"too many failed logins; retry in {retry_after_s:.0f} s")
        self.retry_after_s = retry_after_s


class BasicVerifier:
    """Checks ``user:password`` pairs (see the module docstring)."""

    def __init__(
        self,
        credentials: CredentialCache,
        secret: bytes,
        *,
        cache_entries: int,
        cache_ttl_s: float,
        failures_per_address: int,
        failure_window_s: float,
        failure_delay_s: float,
    ) -> None:
        self._credentials = credentials
        self._secret = secret
        self._cache_entries = cache_entries
        self._cache_ttl_s = cache_ttl_s
        self._failures_per_address = failures_per_address
        self._window_s = failure_window_s
        self._delay_s = failure_delay_s
        self._key = secrets.token_bytes(32)
        self._cache: OrderedDict[bytes, _Remembered] = OrderedDict()
        self._windows: dict[str, _Window] = {}
        self._verifying = asyncio.Semaphore(MAX_VERIFYING)
        self.succeeded = 0
        self.failed = 0
        self.throttled = 0
        self._last_log = -LOG_INTERVAL_S
        self._unlogged = 0

    async def verify(self, address: str, user: str, password: str) -> str | None:
        """The user the pair proves, or None after the failure delay (unknown user and
        wrong password alike); :class:`Throttled` if the address failed too often."""
        now = time.monotonic()
        key = hmac.new(self._key, f"{user}\0{password}".encode(), hashlib.sha256).digest()
        if self._remembered(key, user, now):  # proven before: no lockout applies
            self.succeeded += 1
            return user
        self._check_window(address, now)
        if len(user.encode()) + len(password.encode()) + 1 <= MAX_CREDENTIALS_BYTES:
            async with self._verifying:
                # again: failures of this address may have been counted while it waited
                self._check_window(address, time.monotonic())
                credential, mechanism, known = credential_for(user, self._credentials, self._secret)
                try:
                    matches = await asyncio.to_thread(
                        password_matches, password, credential, mechanism
                    )
                except Exception as exc:  # a password SASLprep refuses: a failure like any
                    log.debug("HTTP login of %r from %s: %s", user, address, exc)
                    matches = False
            # the user may have been deleted or changed while the derivation ran
            if matches and known and self._credentials.get(user, mechanism) is credential:
                self._remember(key, user, mechanism, credential.stored_key)
                self.succeeded += 1
                return user
        await self._failure(address, now)
        return None

    def _remembered(self, key: bytes, user: str, now: float) -> bool:
        entry = self._cache.get(key)
        if entry is None:
            return False
        current = self._credentials.get(entry.user, entry.mechanism)
        if (
            entry.expires <= now
            or entry.user != user
            or current is None
            or not hmac.compare_digest(current.stored_key, entry.stored_key)
        ):
            del self._cache[key]
            return False
        self._cache.move_to_end(key)
        return True

    def _remember(self, key: bytes, user: str, mechanism: str, stored_key: bytes) -> None:
        expires = time.monotonic() + self._cache_ttl_s
        self._cache[key] = _Remembered(user, mechanism, stored_key, expires)
        self._cache.move_to_end(key)
        while len(self._cache) > self._cache_entries:
            self._cache.popitem(last=False)

    def _check_window(self, address: str, now: float) -> None:
        window = self._windows.get(address)
        if window is None:
            return
        if now - window.start >= self._window_s:
            del self._windows[address]
        elif window.failures >= self._failures_per_address:
            self.throttled += 1
            raise Throttled(window.start + self._window_s - now)

    async def _failure(self, address: str, now: float) -> None:
        self.failed += 1
        window = self._windows.get(address)
        if window is None or now - window.start >= self._window_s:
            self._windows.pop(address, None)
            if len(self._windows) >= MAX_TRACKED_ADDRESSES:
                self._drop_old_windows(now)
            self._windows[address] = window = _Window(now, 0)
        window.failures += 1
        if now - self._last_log >= LOG_INTERVAL_S:
            log.warning(
                "failed HTTP authentication from %s (%d more since the last warning, %d in all)",
                address,
                self._unlogged,
                self.failed,
            )
            self._last_log, self._unlogged = now, 0
        else:
            self._unlogged += 1
        await asyncio.sleep(self._delay_s)

    def _drop_old_windows(self, now: float) -> None:
        for address in [a for a, w in self._windows.items() if now - w.start >= self._window_s]:
            del self._windows[address]
        while len(self._windows) >= MAX_TRACKED_ADDRESSES:  # the oldest window first
            del self._windows[next(iter(self._windows))]
