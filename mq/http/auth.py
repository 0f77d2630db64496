"""Authentication and authorization of the HTTP listener: one middleware before every route.

On when :func:`mq.broker.http_security.http_auth_on` says so (the broker authorizes
requests, or a binary listener authenticates); the zero-config
``mq serve --http-port N`` has no middleware at all. When on, as RabbitMQ's
management plugin does:

* every route but the probes (``/healthz``, ``/readyz``) needs **HTTP Basic**
  credentials of one of the broker's SCRAM users (``mq user add``), checked by
  :class:`mq.http.auth_verify.BasicVerifier`. No credentials, or wrong ones: 401
  with ``WWW-Authenticate: Basic realm="mq"`` (an unknown user and a wrong password
  get the same answer after the same delay); an address with too many failures: 429
  with ``Retry-After``;
* the principal ``User:<name>`` then passes the broker's own
  :class:`~mq.broker.authorizer.Authorizer` (its ACL cache, its super users) with the
  route's need (:data:`mq.http.auth_rules.ROUTES`): refused, 403 with the admin API's
  error shape ``{"error": ..., "message": ...}``, the message naming the principal,
  the operation and the resource, as the binary protocol's refusals do. Lists are
  cut to what the principal may see (:func:`cut_to_principal`, called by the admin
  API on its shared answers).

Failed logins (not a request without credentials: that is how a browser learns it
must ask) and refusals are written to the audit log (:mod:`mq.broker.audit`) as the
gate writes refused admin requests: principal, client address, operation, resource,
result (``SASL_AUTHENTICATION_FAILED``, ``TOPIC_AUTHORIZATION_FAILED``...).

Thread safety: one event loop (the broker's).
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from mq.acl.model import Operation, ResourceType
from mq.broker.authorizer import Authorizer, refusal
from mq.broker.context import ANONYMOUS, RequestContext
from mq.broker.http_security import http_auth_on, serves_tls
from mq.errors import ClusterAuthorizationFailedError, MQError, SaslAuthenticationFailedError
from mq.http.auth_rules import ANONYMOUS_ROUTES, ROUTES, VIEWS, Permit
from mq.http.auth_verify import BasicVerifier, Throttled

if TYPE_CHECKING:
    from mq.broker.broker import Broker

PERMIT_KEY: Final = web.RequestKey[Permit]("permit")
"""``request[PERMIT_KEY]``: the principal's :data:`~mq.http.auth_rules.Permit` (absent
when the listener does not authenticate: everything is allowed)."""
CHALLENGE: Final = {"WWW-Authenticate": 'Basic realm="mq", charset="UTF-8"'}
MAX_AUTHORIZATION_HEADER: Final = 4096
"""An ``Authorization`` header longer than this is refused undecoded (a Basic one of
the longest name and password accepted is ~1.7 KB)."""
NO_CREDENTIALS: Final = (
    "this broker's HTTP listener needs a user name and password (HTTP Basic, a user "
    "made with `mq user add`)"
)
FAILED: Final = SaslAuthenticationFailedError(
    "authentication failed: invalid user name or password"
)


def _json(body: dict[str, Any], status: int, headers: dict[str, str] | None = None) -> web.Response:
    response = web.json_response(body, status=status, headers=headers)
    response.headers["Cache-Control"] = "no-store"
    return response


def _error(exc: MQError, status: int, headers: dict[str, str] | None = None) -> web.Response:
    return _json({"error": type(exc).__name__, "message": exc.message}, status, headers)


def basic_credentials(header: str) -> tuple[str, str] | None:
    """``Basic base64(user:password)`` → (user, password); None if it is not that."""
    if len(header) > MAX_AUTHORIZATION_HEADER:
        return None
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    if not sep or not user:
        return None
    return user, password


def _peer(request: web.Request) -> tuple[str, str]:
    """The client's address, and ``address:port`` (a context's ``peer``)."""
    peername = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peername, tuple) and len(peername) >= 2:
        return str(peername[0]), f"{peername[0]}:{peername[1]}"
    address = request.remote or "unknown"
    return address, address


def cut_to_principal(request: web.Request, answer: Any) -> Any:
    """The answer of a listing route cut to what the request's principal may see (the
    answer itself when the listener does not authenticate or the route lists nothing)."""
    permit = request.get(PERMIT_KEY)
    resource = request.match_info.route.resource
    view = VIEWS.get(resource.canonical) if resource is not None else None
    if permit is None or view is None or not isinstance(answer, dict):
        return answer
    return view(permit, answer)


def make_middleware(broker: Broker, authorizer: Authorizer | None) -> Middleware | None:
    """The middleware authenticating and authorizing every request; None when the
    listener does not authenticate (see the module docstring)."""
    config = broker.config
    if not http_auth_on(config):
        return None
    if authorizer is None:
        raise ValueError("an authenticating HTTP listener needs the broker's authorizer")
    verifier = BasicVerifier(
        broker.scram_credentials,
        broker.credentials.secret,
        cache_entries=config.http_auth_cache_entries,
        cache_ttl_s=config.http_auth_cache_ttl_ms / 1000,
        failures_per_address=config.http_auth_failures_per_ip,
        failure_window_s=config.http_auth_failure_window_ms / 1000,
        failure_delay_s=config.sasl_failed_authentication_delay_ms / 1000,
    )
    listener = "HTTPS" if serves_tls(config) else "HTTP"

    def context(peer: str, principal: str) -> RequestContext:
        return RequestContext(
            -1,
            peer,
            "http",
            principal,
            listener=listener,
            authenticates=True,
            authenticated=principal != ANONYMOUS,
        )

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        canonical = resource.canonical if resource is not None else None
        if canonical in ANONYMOUS_ROUTES:
            return await handler(request)
        header = request.headers.get("Authorization")
        if header is None:
            return _json(
                {"error": "AuthenticationRequired", "message": NO_CREDENTIALS}, 401, CHALLENGE
            )
        address, peer = _peer(request)
        credentials = basic_credentials(header)
        name, password = credentials if credentials is not None else ("", "")
        try:
            user = await verifier.verify(address, name, password)
        except Throttled as exc:
            return _json(
                {"error": "ThrottlingQuotaExceededError", "message": str(exc)},
                429,
                {"Retry-After": str(max(1, math.ceil(exc.retry_after_s)))},
            )
        if user is None:
            broker.audit(
                context(peer, ANONYMOUS),
                "http_authenticate",
                f"user:{name}",
                FAILED.name,
                FAILED.message,
                method=request.method,
                path=request.path,
            )
            return _error(FAILED, 401, CHALLENGE)
        ctx = context(peer, f"User:{user}")

        def permit(operation: Operation, resource_type: ResourceType, name: str) -> bool:
            return authorizer.allowed(ctx, operation, resource_type, name)

        if canonical is not None:  # else no route matched: the 404 (or 405) it is
            refused = _refused(ctx, canonical, dict(request.match_info), authorizer)
            if refused is not None:
                error, resource_name = refused
                broker.audit(
                    ctx,
                    f"http {request.method} {canonical}",
                    resource_name,
                    error.name,
                    error.message,
                    path=request.path,
                )
                return _error(error, 403)
        request[PERMIT_KEY] = permit
        return await handler(request)

    return authenticate


def _refused(
    ctx: RequestContext, canonical: str, match_info: dict[str, str], authorizer: Authorizer
) -> tuple[MQError, str] | None:
    """The refusal of a route the principal may not use, with the resource (audit's
    ``type:name``); None when allowed."""
    if authorizer.exempt(ctx):  # a super user, or authorization off (authentication only)
        return None
    need = ROUTES.get(canonical)
    if need is None:
        error: MQError = ClusterAuthorizationFailedError(
            f"{canonical} has no authorization rule on this broker: refused to {ctx.principal}"
        )
        return error, f"http:{canonical}"
    if need.operation is None:
        return None
    name = need.resource(match_info)
    if authorizer.allowed(ctx, need.operation, need.resource_type, name):
        return None
    return refusal(
        ctx, need.operation, need.resource_type, name
    ), f"{need.resource_type.value}:{name}"
