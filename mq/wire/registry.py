"""The API registry: every request type of the protocol, by key, with its versions.

An API is one :func:`define_api` call naming its key, its name, the TypedDicts
of its request and response bodies, and the versions it supports; the area
modules (:mod:`mq.wire.apis_core`, :mod:`mq.wire.apis_data`,
:mod:`mq.wire.apis_groups`) make those calls, and :mod:`mq.wire.apis` imports
them all. The envelope decoders look APIs up here, and the api_versions
response is built from here, so a new API is served and advertised by its one
declaration.

Version rules: a body's TypedDict describes its newest version; fields added
later carry ``Since(n)`` and a Default, so one TypedDict serves every version
(see :mod:`mq.wire.schema`). api_versions v0 is never removed: a client can
always ask a broker what it supports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from mq.wire.limits import I16_MAX
from mq.wire.schema import Schema

ReqT = TypeVar("ReqT")
RespT = TypeVar("RespT")


@dataclass(frozen=True, eq=False)
class Api(Generic[ReqT, RespT]):
    """One API: its key and name, body schemas and supported version range."""

    key: int
    name: str
    request: Schema[ReqT]
    response: Schema[RespT]
    min_version: int
    max_version: int

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def __repr__(self) -> str:
        return f"Api({self.key}, {self.name!r}, v{self.min_version}..v{self.max_version})"


_BY_KEY: dict[int, Api[Any, Any]] = {}
_BY_NAME: dict[str, Api[Any, Any]] = {}


def define_api(
    key: int,
    name: str,
    request: type[ReqT],
    response: type[RespT],
    *,
    min_version: int = 0,
    max_version: int = 0,
) -> Api[ReqT, RespT]:
    """Declare and register an API; its schemas are checked now, at import."""
    if not 0 <= key <= I16_MAX:
        raise ValueError(f"api key {key} is outside [0, {I16_MAX}]")
    if not 0 <= min_version <= max_version <= I16_MAX:
        raise ValueError(f"{name}: bad version range {min_version}..{max_version}")
    for taken, what in ((_BY_KEY.get(key), f"key {key}"), (_BY_NAME.get(name), f"name {name}")):
        if taken is not None:
            raise ValueError(f"api {what} is taken by {taken!r}")
    api = Api(key, name, Schema(request), Schema(response), min_version, max_version)
    _BY_KEY[key] = _BY_NAME[name] = api
    return api


def api_by_key(key: int) -> Api[Any, Any] | None:
    return _BY_KEY.get(key)


def api_by_name(name: str) -> Api[Any, Any] | None:
    return _BY_NAME.get(name)


def all_apis() -> list[Api[Any, Any]]:
    """Every registered API, by key."""
    return [_BY_KEY[key] for key in sorted(_BY_KEY)]
