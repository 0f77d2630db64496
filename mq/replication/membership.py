"""Who is in the cluster and who controls it: broker registrations and controller election.

Both live in the :class:`~mq.replication.store.MetadataStore` under the
broker's lease, so they vanish when the broker stops refreshing it (a crash,
a partition from etcd):

* ``/brokers/<node id>``: the broker's advertised address (its listeners, and its
  HTTP listener's address when it has one), created only if absent, so two live
  brokers cannot claim one node id;
* ``/controller``: the controller's node id, created only if absent. The
  revision that created it is the **controller epoch**: the controller guards
  each of its writes with ``Compare("/controller", epoch)``, so once another
  broker has taken over, every write of the old one fails.

Values are msgpack. A registration is ``[node_id, host, port, max_partitions,
endpoints]``, each endpoint ``[name, host, port]``; a registration of an older
version lacks the last fields (defaults), fields a later version appends are
ignored. The HTTP listener is one more endpoint, named ``HTTP`` (:data:`HTTP_NAMES`):
brokers look a client's listener up by its name (``PLAINTEXT``, ``SSL``, ...), so
a broker of an older version reading a newer registration ignores it instead of
failing on a field it does not know (a rolling upgrade keeps working).

Thread safety: one event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgpack

from mq.errors import MQError
from mq.replication.store import Compare, Delete, Lease, MetadataStore, Put

BROKERS = "/brokers/"
CONTROLLER = "/controller"
HTTP_NAMES = {"HTTP": "http", "HTTPS": "https"}
"""Endpoint name of an HTTP listener in a registration → its URL scheme (never the name
of a binary listener, which is its protocol's: :data:`mq.broker.listeners.SCHEMES`)."""
STORED_FIELDS = 5
"""Fields of a registration this version reads (the others: a later version's)."""


class NodeIdInUseError(MQError):
    """Another live broker is registered with this node id (local)."""


class HttpEndpoint(NamedTuple):
    """Where a broker serves HTTP (``/metrics``, ``/healthz``, the console): what a
    Prometheus service discovery or a console needs to find every broker's."""

    host: str
    port: int
    scheme: str = "http"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def name(self) -> str:
        """Its endpoint name in a registration (:data:`HTTP_NAMES`)."""
        return self.scheme.upper()


class BrokerInfo(NamedTuple):
    node_id: int
    host: str
    port: int
    max_partitions: int = 0
    """Most partition replicas the broker hosts (its file budget,
    :mod:`mq.broker.limits`); 0: no limit known (a broker of an older version)."""
    endpoints: Sequence[Sequence[Any]] = ()
    """Every listener of the broker as (name, host, port) (:mod:`mq.broker.listeners`);
    ``host``/``port`` are the inter-broker listener's. Empty: a broker of an older
    version, reachable only at ``host``/``port``."""
    http: HttpEndpoint | None = None
    """The broker's HTTP listener (metrics, health, console, admin API) when it has one
    (``http_port``); None: it has none, or it is a broker of an older version. Stored
    among the endpoints (see the module docstring), kept apart here."""

    @classmethod
    def decode(cls, value: bytes) -> BrokerInfo:
        """A registration as :func:`register` wrote it (endpoints as tuples). Fields a
        later version appends are ignored; those an older one lacks take their default."""
        node_id, host, port, *rest = msgpack.unpackb(value)[:STORED_FIELDS]
        max_partitions = rest[0] if rest else 0
        endpoints: list[tuple[Any, ...]] = []
        http = None
        for name, at, number, *_ in rest[1] if len(rest) > 1 else ():
            scheme = HTTP_NAMES.get(name)
            if scheme is None:
                endpoints.append((name, at, number))
            elif http is None:
                http = HttpEndpoint(str(at), int(number), scheme)
        return cls(node_id, host, port, max_partitions, tuple(endpoints), http)

    def stored(self) -> list[Any]:
        """The registration's fields as :func:`register` writes them."""
        endpoints = [list(endpoint) for endpoint in self.endpoints]
        if self.http is not None:
            endpoints.append([self.http.name, self.http.host, self.http.port])
        return [self.node_id, self.host, self.port, self.max_partitions, endpoints]

    @property
    def http_url(self) -> str | None:
        """``http://host:port`` of its HTTP listener (None: it has none)."""
        return self.http.url if self.http is not None else None


class Controller(NamedTuple):
    node_id: int
    epoch: int
    """The revision that elected it; its writes compare ``/controller`` against it."""


def broker_key(node_id: int) -> str:
    return f"{BROKERS}{node_id}"


async def register(store: MetadataStore, info: BrokerInfo, lease: Lease) -> int:
    """Register a live broker under ``lease``; the revision. Refused if the id is taken."""
    value = msgpack.packb(info.stored())
    key = broker_key(info.node_id)
    revision = await store.commit([Compare(key, 0)], [Put(key, value, lease.id)])
    if revision is None:
        raise NodeIdInUseError(f"node id {info.node_id} is registered by a live broker")
    return revision


async def live_brokers(store: MetadataStore) -> tuple[dict[int, BrokerInfo], int]:
    """Every registered broker by node id, and the revision of the read."""
    entries, revision = await store.get_prefix(BROKERS)
    brokers = {}
    for entry in entries:
        info = BrokerInfo.decode(entry.value)
        brokers[info.node_id] = info
    return brokers, revision


async def campaign(store: MetadataStore, node_id: int, lease: Lease) -> Controller | None:
    """Become the controller if there is none: the new controller, or None if one exists."""
    put = Put(CONTROLLER, msgpack.packb(node_id), lease.id)
    epoch = await store.commit([Compare(CONTROLLER, 0)], [put])
    return None if epoch is None else Controller(node_id, epoch)


async def current_controller(store: MetadataStore) -> Controller | None:
    entry = await store.get(CONTROLLER)
    if entry is None:
        return None
    return Controller(int(msgpack.unpackb(entry.value)), entry.mod_revision)


def fence(controller: Controller) -> Compare:
    """The guard every write of ``controller`` carries."""
    return Compare(CONTROLLER, controller.epoch)


async def resign(store: MetadataStore, controller: Controller) -> bool:
    """Step down (a clean shutdown); False if another broker already controls."""
    return await store.commit([fence(controller)], [Delete(CONTROLLER)]) is not None
