"""SCRAM-SHA-256 against RFC 7677's test vector, through the broker's own code path:
the credential the store keeps (:func:`mq.replication.scram_store.make_credential`)
and the server side of the exchange (:class:`mq.broker.sasl.ScramExchange`), with the
RFC's salt, iteration count and nonces."""

from __future__ import annotations

import base64

import pytest
from scramp import ScramException

from mq.broker.sasl import ScramExchange
from mq.replication.scram_store import CredentialCache, make_credential

CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


class _Cache(CredentialCache):
    """The cache as the store's watch would fill it, without a store."""

    def __init__(self) -> None:
        super().__init__(store=None)  # type: ignore[arg-type]
        salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
        self._users = {
            "user": {
                "SCRAM-SHA-256": make_credential(
                    "SCRAM-SHA-256", "pencil", iterations=4096, salt=salt
                )
            }
        }


def test_rfc_7677_test_vector() -> None:
    exchange = ScramExchange("SCRAM-SHA-256", _Cache(), b"k" * 32, server_nonce=SERVER_NONCE)
    assert exchange.step(CLIENT_FIRST, 0) == (SERVER_FIRST, False)
    assert exchange.step(CLIENT_FINAL, 1) == (SERVER_FINAL, True)
    assert exchange.user == "user"


def test_a_wrong_proof_fails() -> None:
    exchange = ScramExchange("SCRAM-SHA-256", _Cache(), b"k" * 32, server_nonce=SERVER_NONCE)
    exchange.step(CLIENT_FIRST, 0)
    bad = CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc")
    with pytest.raises(ScramException, match=r"client keys don't match"):
        exchange.step(bad, 1)
