"""Broker registrations as stored (msgpack field lists) decode across versions (issue 21).

Each version appends its fields: an older broker's registration (no HTTP endpoint, no
listeners, no partition limit) decodes with their defaults, a newer one's extra
fields are ignored, and what :func:`~mq.replication.membership.register` writes
reads back the same.
"""

from __future__ import annotations

import msgpack

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


def test_a_registration_with_no_http_listener_says_nil() -> None:
    info = BrokerInfo.decode(msgpack.packb([1, "127.0.0.1", 9092, 0, [], None]))
    assert info.http is None


def test_the_http_endpoint_round_trips() -> None:
    written = [4, "127.0.0.1", 9092, 0, [list(LISTENERS[0])], ["127.0.0.1", 8080, "http"]]
    info = BrokerInfo.decode(msgpack.packb(written))
    assert info.http == HttpEndpoint("127.0.0.1", 8080, "http")
    assert info.http_url == "http://127.0.0.1:8080"
    assert info.endpoints == (LISTENERS[0],)


def test_fields_of_a_later_version_are_ignored() -> None:
    later = [5, "127.0.0.1", 9092, 0, [], ["127.0.0.1", 8080, "https", "x"], {"new": 1}]
    info = BrokerInfo.decode(msgpack.packb(later))
    assert info.node_id == 5
    assert info.http == HttpEndpoint("127.0.0.1", 8080, "https")


def test_an_ipv6_http_host_is_bracketed_in_its_url() -> None:
    assert HttpEndpoint("::1", 8080).url == "http://[::1]:8080"
