"""Broker registrations as stored (msgpack field lists) decode across versions (issue 21).

The HTTP listener is stored as one more endpoint, named ``HTTP``: a registration
without it (an older broker's, or one with no HTTP listener) decodes with none; what
:meth:`~mq.replication.membership.BrokerInfo.stored` writes reads back the same; and
the way an older version reads a newer registration (its endpoints looked up by
listener name) still finds the binary listeners and nothing else.
"""

from __future__ import annotations

import msgpack

from mq.broker.listeners import address_on
from mq.replication.membership import BrokerInfo, HttpEndpoint

LISTENERS = (("PLAINTEXT", "127.0.0.1", 9092), ("SSL", "127.0.0.1", 9093))


def test_a_registration_without_the_http_endpoint_still_decodes() -> None:
    five = msgpack.packb([1, "127.0.0.1", 9092, 1000, [list(e) for e in LISTENERS]])
    info = BrokerInfo.decode(five)
    assert info == BrokerInfo(1, "127.0.0.1", 9092, 1000, LISTENERS)
    assert info.http is None
    assert info.http_url is None


def test_registrations_of_older_versions_take_the_defaults() -> None:
    assert BrokerInfo.decode(msgpack.packb([2, "127.0.0.2", 9092, 64])) == BrokerInfo(
        2, "127.0.0.2", 9092, 64, (), None
    )
    assert BrokerInfo.decode(msgpack.packb([3, "127.0.0.3", 9092])) == BrokerInfo(
        3, "127.0.0.3", 9092
    )


def test_the_http_endpoint_round_trips_apart_from_the_listeners() -> None:
    info = BrokerInfo(4, "127.0.0.1", 9092, 0, LISTENERS, HttpEndpoint("127.0.0.1", 8080))
    stored = info.stored()
    assert stored[4][-1] == ["HTTP", "127.0.0.1", 8080]
    decoded = BrokerInfo.decode(msgpack.packb(stored))
    assert decoded == info
    assert decoded.endpoints == LISTENERS
    assert decoded.http_url == "http://127.0.0.1:8080"
    assert BrokerInfo.decode(msgpack.packb(BrokerInfo(5, "h", 1).stored())).http is None


def test_an_older_version_reading_a_new_registration_ignores_the_http_endpoint() -> None:
    """What the version before this one does with a registration: endpoints as tuples,
    a client's address looked up by its listener's name (the HTTP entry never matches)."""
    info = BrokerInfo(6, "127.0.0.1", 9092, 0, LISTENERS, HttpEndpoint("127.0.0.1", 8080))
    fields = msgpack.unpackb(msgpack.packb(info.stored()))
    assert len(fields) == 5  # no field that version does not know
    endpoints = tuple(tuple(endpoint) for endpoint in fields[4])
    for name, host, port in LISTENERS:
        assert address_on(endpoints, name, ("x", 0)) == (host, port)
    assert address_on(endpoints, "SASL_SSL", ("x", 0)) is None


def test_fields_of_a_later_version_are_ignored() -> None:
    later = [7, "127.0.0.1", 9092, 0, [["HTTPS", "127.0.0.1", 8443]], {"new": 1}, 5]
    info = BrokerInfo.decode(msgpack.packb(later))
    assert info.node_id == 7
    assert info.endpoints == ()
    assert info.http == HttpEndpoint("127.0.0.1", 8443, "https")
    assert info.http_url == "https://127.0.0.1:8443"


def test_an_ipv6_http_host_is_bracketed_in_its_url() -> None:
    assert HttpEndpoint("::1", 8080).url == "http://[::1]:8080"
