"""The ACL bindings indexed for the authorizer's questions (pure, no I/O).

:class:`AclIndex` answers "may this principal, from this host, do this
operation on this resource?" without scanning every binding:

* literal bindings are in a dict by ``(resource type, name)``; the literal
  ``*`` is one more key of the same dict;
* prefixed bindings are in a dict by ``(resource type, prefix)``, with the set
  of prefix lengths in use per type: a name is looked up once per distinct
  length (a handful), not once per binding;
* decisions are remembered in a bounded dict that any change clears (a produce
  request asks once per topic, and a hot principal asks the same question
  every request).

So a question costs a few dict lookups plus the bindings of the resource
itself, whatever the number of bindings in the cluster.

Thread safety: one event loop (not thread-safe).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from mq.acl.model import (
    WILDCARD,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    allowing_operations,
    denying_operations,
    host_matches,
    principal_matches,
)

MAX_CACHED_DECISIONS = 100_000
"""Decisions remembered between changes (a tuple of five short strings and a bool,
~250 B each: 25 MB at most); when full the cache starts over, so a flood of
distinct questions costs lookups, never memory."""

Key = tuple[ResourceType, str]


class AclIndex:
    """Every binding, indexed by resource; see the module docstring."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._literal: dict[Key, set[AclBinding]] = {}
        self._prefixed: dict[Key, set[AclBinding]] = {}
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}
        """Per type: prefix length -> number of prefixed patterns of that length."""
        self._all: set[AclBinding] = set()
        self._decisions: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}
        for binding in bindings:
            self.add(binding)

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, binding: object) -> bool:
        return binding in self._all

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(self._all)

    def add(self, binding: AclBinding) -> bool:
        """Add a binding; False if it was there already."""
        if binding in self._all:
            return False
        self._all.add(binding)
        key = (binding.resource_type, binding.resource_name)
        if binding.pattern is PatternType.PREFIXED:
            self._prefixed.setdefault(key, set()).add(binding)
            lengths = self._prefix_lengths.setdefault(binding.resource_type, {})
            size = len(binding.resource_name)
            lengths[size] = lengths.get(size, 0) + 1
        else:
            self._literal.setdefault(key, set()).add(binding)
        self._decisions.clear()
        return True

    def remove(self, binding: AclBinding) -> bool:
        """Remove a binding; False if it was not there."""
        if binding not in self._all:
            return False
        self._all.discard(binding)
        key = (binding.resource_type, binding.resource_name)
        table = self._prefixed if binding.pattern is PatternType.PREFIXED else self._literal
        bucket = table[key]
        bucket.discard(binding)
        if not bucket:
            del table[key]
        if binding.pattern is PatternType.PREFIXED:
            lengths = self._prefix_lengths[binding.resource_type]
            size = len(binding.resource_name)
            lengths[size] -= 1
            if not lengths[size]:
                del lengths[size]
        self._decisions.clear()
        return True

    def matching(self, acl_filter: AclFilter) -> list[AclBinding]:
        """The bindings a filter selects (describe and delete: admin requests, a scan)."""
        return [b for b in self._all if acl_filter.matches(b)]

    def covering(self, resource_type: ResourceType, name: str) -> Iterator[AclBinding]:
        """Every binding whose resource pattern covers ``(resource_type, name)``."""
        for key in ((resource_type, name), (resource_type, WILDCARD)):
            found = self._literal.get(key)
            if found:
                yield from found
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            for size in lengths:
                if size <= len(name):
                    found = self._prefixed.get((resource_type, name[:size]))
                    if found:
                        yield from found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """Allowed by some matching allow binding and refused by no matching deny."""
        key = (principal, host, operation, resource_type, name)
        decided = self._decisions.get(key)
        if decided is not None:
            return decided
        allows = allowing_operations(operation)
        denies = denying_operations(operation)
        allowed = False
        for binding in self.covering(resource_type, name):
            if not (
                principal_matches(binding.principal, principal) and host_matches(binding.host, host)
            ):
                continue
            if binding.permission is Permission.DENY:
                if binding.operation in denies:
                    allowed = False
                    break
            elif binding.operation in allows:
                allowed = True
        if len(self._decisions) >= MAX_CACHED_DECISIONS:
            self._decisions.clear()
        self._decisions[key] = allowed
        return allowed

    def allowed_on_some(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Some resource of the type is open to ``operation`` for the principal (Kafka's
        ``authorizeByResourceType``, used by init_producer_id: WRITE on any topic).

        True if an allow binding matches whose own pattern is not covered by a
        matching deny: a literal name that :meth:`authorize` allows, or a prefix
        no deny of ``*``, of a shorter or equal prefix, refuses as a whole.
        A scan over the bindings: init_producer_id is asked once per producer.
        """
        allows = allowing_operations(operation)
        denies = denying_operations(operation)
        candidates: list[AclBinding] = []
        deny_patterns: list[AclBinding] = []
        for binding in self._all:
            if binding.resource_type is not resource_type:
                continue
            if not (
                principal_matches(binding.principal, principal) and host_matches(binding.host, host)
            ):
                continue
            if binding.permission is Permission.ALLOW and binding.operation in allows:
                candidates.append(binding)
            elif binding.permission is Permission.DENY and binding.operation in denies:
                deny_patterns.append(binding)
        for allow in candidates:
            if allow.pattern is PatternType.LITERAL:
                if allow.resource_name != WILDCARD and self.authorize(
                    principal, host, operation, resource_type, allow.resource_name
                ):
                    return True
                if allow.resource_name == WILDCARD and not any(
                    d.pattern is PatternType.LITERAL and d.resource_name == WILDCARD
                    for d in deny_patterns
                ):
                    return True
                continue
            if not any(_deny_covers_prefix(d, allow.resource_name) for d in deny_patterns):
                return True
        return False


def _deny_covers_prefix(deny: AclBinding, prefix: str) -> bool:
    """Every name starting with ``prefix`` is refused by ``deny``."""
    if deny.pattern is PatternType.LITERAL:
        return deny.resource_name == WILDCARD
    return prefix.startswith(deny.resource_name)
