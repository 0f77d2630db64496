"""HTTP Basic verification (mq.http.auth_verify) against real SCRAM credentials in an
in-memory metadata store: right and wrong passwords, unknown users answered alike after
the same delay, the cache of successful logins (bounded, expiring, forgotten when the
user changes), and the per-address limit on failures."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mq.http import auth_verify
from mq.http.auth_verify import BasicVerifier, Throttled
from mq.replication.local_store import LocalStore
from mq.replication.scram_store import (
    MIN_ITERATIONS,
    CredentialCache,
    delete_credential,
    make_credential,
    put_credential,
)

MECHANISM = "SCRAM-SHA-256"
DELAY_S = 0.2
WAIT_S = 10.0


async def add_user(store: LocalStore, name: str, password: str) -> None:
    credential = make_credential(MECHANISM, password, iterations=MIN_ITERATIONS)
    await put_credential(store, name, MECHANISM, credential)


async def until(check: Any) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, "the credential cache did not follow the store"
        await asyncio.sleep(0.01)


@pytest.fixture
async def credentials() -> AsyncIterator[tuple[LocalStore, CredentialCache]]:
    store = LocalStore()
    await store.start()
    await add_user(store, "alice", "alice-secret")
    cache = CredentialCache(store)
    await cache.start()
    try:
        yield store, cache
    finally:
        await cache.stop()
        await store.close()


def verifier(cache: CredentialCache, **overrides: Any) -> BasicVerifier:
    settings: dict[str, Any] = {
        "cache_entries": 16,
        "cache_ttl_s": 60.0,
        "failures_per_address": 5,
        "failure_window_s": 60.0,
        "failure_delay_s": DELAY_S,
    }
    return BasicVerifier(cache, b"cluster-secret-0123456789", **{**settings, **overrides})


@pytest.fixture
def derivations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The passwords PBKDF2 was run for (the real derivation still runs)."""
    seen: list[str] = []
    real = auth_verify.password_matches

    def counting(password: str, credential: Any, mechanism: str) -> bool:
        seen.append(password)
        return real(password, credential, mechanism)

    monkeypatch.setattr(auth_verify, "password_matches", counting)
    return seen


async def test_the_right_password_proves_the_user(
    credentials: tuple[LocalStore, CredentialCache],
) -> None:
    _, cache = credentials
    assert await verifier(cache).verify("127.0.0.1", "alice", "alice-secret") == "alice"


async def test_wrong_password_and_unknown_user_fail_alike_after_the_delay(
    credentials: tuple[LocalStore, CredentialCache], derivations: list[str]
) -> None:
    _, cache = credentials
    v = verifier(cache)
    for user, password in (("alice", "wrong"), ("mallory", "alice-secret")):
        started = time.monotonic()
        assert await v.verify("127.0.0.1", user, password) is None
        assert time.monotonic() - started >= DELAY_S
    # the unknown user cost a derivation too (against a fake credential)
    assert derivations == ["wrong", "alice-secret"]
    assert v.failed == 2


async def test_a_success_is_remembered_without_deriving_again(
    credentials: tuple[LocalStore, CredentialCache], derivations: list[str]
) -> None:
    _, cache = credentials
    v = verifier(cache)
    for _ in range(5):
        assert await v.verify("127.0.0.1", "alice", "alice-secret") == "alice"
    assert derivations == ["alice-secret"]
    # a different password for the same user is not a hit
    assert await v.verify("127.0.0.1", "alice", "alice-secret2") is None
    assert len(derivations) == 2


async def test_the_cache_expires(
    credentials: tuple[LocalStore, CredentialCache], derivations: list[str]
) -> None:
    _, cache = credentials
    v = verifier(cache, cache_ttl_s=0.0)
    for _ in range(3):
        assert await v.verify("127.0.0.1", "alice", "alice-secret") == "alice"
    assert len(derivations) == 3


async def test_the_cache_is_bounded_least_recently_used_out(
    credentials: tuple[LocalStore, CredentialCache], derivations: list[str]
) -> None:
    store, cache = credentials
    await add_user(store, "bob", "bob-secret")
    await until(lambda: cache.get("bob", MECHANISM) is not None)
    v = verifier(cache, cache_entries=1)
    await v.verify("127.0.0.1", "alice", "alice-secret")
    await v.verify("127.0.0.1", "bob", "bob-secret")  # alice's entry is dropped
    await v.verify("127.0.0.1", "alice", "alice-secret")
    assert derivations == ["alice-secret", "bob-secret", "alice-secret"]


async def test_a_changed_or_deleted_user_is_forgotten_at_once(
    credentials: tuple[LocalStore, CredentialCache],
) -> None:
    store, cache = credentials
    v = verifier(cache)
    assert await v.verify("127.0.0.1", "alice", "alice-secret") == "alice"
    old = cache.get("alice", MECHANISM)
    await add_user(store, "alice", "new-secret")
    await until(lambda: cache.get("alice", MECHANISM) is not old)
    assert await v.verify("127.0.0.1", "alice", "alice-secret") is None
    assert await v.verify("127.0.0.1", "alice", "new-secret") == "alice"
    await delete_credential(store, "alice", None)
    await until(lambda: cache.get("alice", MECHANISM) is None)
    assert await v.verify("127.0.0.1", "alice", "new-secret") is None


async def test_an_address_with_too_many_failures_is_refused_unchecked(
    credentials: tuple[LocalStore, CredentialCache], derivations: list[str]
) -> None:
    _, cache = credentials
    v = verifier(cache, failures_per_address=3, failure_delay_s=0.0)
    for _ in range(3):
        assert await v.verify("10.0.0.1", "alice", "guess") is None
    with pytest.raises(Throttled) as refused:
        await v.verify("10.0.0.1", "alice", "alice-secret")
    assert 0 < refused.value.retry_after_s <= 60
    assert len(derivations) == 3  # no PBKDF2 once refused
    # another address is not affected
    assert await v.verify("10.0.0.2", "alice", "alice-secret") == "alice"


async def test_concurrent_guesses_from_one_address_stay_bounded(
    credentials: tuple[LocalStore, CredentialCache], derivations: list[str]
) -> None:
    _, cache = credentials
    v = verifier(cache, failures_per_address=3, failure_delay_s=0.0)
    results = await asyncio.gather(
        *(v.verify("10.0.0.1", "alice", f"guess-{i}") for i in range(30)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, Throttled) for r in results) >= 30 - 3 - auth_verify.MAX_VERIFYING
    assert len(derivations) <= 3 + auth_verify.MAX_VERIFYING


async def test_the_window_ends(
    credentials: tuple[LocalStore, CredentialCache],
) -> None:
    _, cache = credentials
    v = verifier(cache, failures_per_address=1, failure_window_s=0.2, failure_delay_s=0.0)
    assert await v.verify("10.0.0.1", "alice", "guess") is None
    with pytest.raises(Throttled):
        await v.verify("10.0.0.1", "alice", "alice-secret")
    await asyncio.sleep(0.3)
    assert await v.verify("10.0.0.1", "alice", "alice-secret") == "alice"


async def test_an_oversized_password_is_refused_without_hashing(
    credentials: tuple[LocalStore, CredentialCache], derivations: list[str]
) -> None:
    _, cache = credentials
    v = verifier(cache, failure_delay_s=0.0)
    assert await v.verify("127.0.0.1", "alice", "x" * auth_verify.MAX_CREDENTIALS_BYTES) is None
    assert derivations == []
