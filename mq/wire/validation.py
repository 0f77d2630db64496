"""Validators compiled from the schema tree: one pass, in place, path on error.

:func:`compile_check` turns a :class:`~mq.wire.nodes.Node` into a closure for
one message version; :func:`run_check` runs it and turns the first bad value
into an MQError whose message names the value's path. The closures check
``type(v) is ...`` (so a msgpack ``true`` is not an int) and bounds, fill in
defaults, and do nothing per byte of a bin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mq.errors import MQError
from mq.wire.nodes import (
    REQUIRED,
    BinNode,
    BoolNode,
    IntNode,
    ListNode,
    LiteralNode,
    MapNode,
    Node,
    NullableNode,
    StrNode,
    StructNode,
)

Check = Callable[[Any], None]


class _Invalid(Exception):
    """Internal: a value broke its node; ``path`` collects segments innermost first."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


_MISSING: Any = object()
_TYPE_NAMES = {type(None): "null", dict: "map", list: "list", str: "str", bytes: "bytes"}


def _got(value: object) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def compile_check(node: Node, version: int) -> Check:
    """A function that raises _Invalid unless the value fits ``node`` at ``version``."""
    if isinstance(node, IntNode):
        return _int_check(node.lo, node.hi)
    if isinstance(node, StrNode):
        return _str_check(node.lo, node.hi)
    if isinstance(node, BinNode):
        return _bin_check(node.lo, node.hi)
    if isinstance(node, BoolNode):

        def check_bool(value: Any) -> None:
            if type(value) is not bool:
                raise _Invalid(f"expected bool, got {_got(value)}")

        return check_bool
    if isinstance(node, LiteralNode):
        allowed, kinds = frozenset(node.values), {type(v) for v in node.values}

        def check_literal(value: Any) -> None:
            if type(value) not in kinds or value not in allowed:
                raise _Invalid(f"expected one of {list(node.values)}, got {_short(value)}")

        return check_literal
    if isinstance(node, NullableNode):
        inner = compile_check(node.inner, version)

        def check_nullable(value: Any) -> None:
            if value is not None:
                inner(value)

        return check_nullable
    if isinstance(node, ListNode):
        return _list_check(node, version)
    if isinstance(node, MapNode):
        return _map_check(node, version)
    if isinstance(node, StructNode):
        return _struct_check(node, version)
    raise TypeError(f"unknown node {node!r}")


def _int_check(lo: int, hi: int) -> Check:
    def check_int(value: Any) -> None:
        if type(value) is not int:
            raise _Invalid(f"expected int, got {_got(value)}")
        if not lo <= value <= hi:
            raise _Invalid(f"{value} is outside [{lo}, {hi}]")

    return check_int


def _str_check(lo: int, hi: int) -> Check:
    def check_str(value: Any) -> None:
        if type(value) is not str:
            raise _Invalid(f"expected str, got {_got(value)}")
        if not lo <= len(value) <= hi:
            raise _Invalid(f"{len(value)} characters long, outside [{lo}, {hi}]")

    return check_str


def _bin_check(lo: int, hi: int) -> Check:
    def check_bin(value: Any) -> None:
        if type(value) is bytes:  # what msgpack decodes a bin to
            size = len(value)
        elif isinstance(value, bytearray | memoryview):  # what a sender may pass
            size = memoryview(value).nbytes
        else:
            raise _Invalid(f"expected bytes, got {_got(value)}")
        if not lo <= size <= hi:
            raise _Invalid(f"{size} bytes long, outside [{lo}, {hi}]")

    return check_bin


def _short(value: object) -> str:
    text = repr(value) if type(value) in (int, str, bool, bytes) else _got(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_length(size: int, lo: int, hi: int) -> None:
    if not lo <= size <= hi:
        raise _Invalid(f"{size} items, outside [{lo}, {hi}]")


def _list_check(node: ListNode, version: int) -> Check:
    lo, hi, item = node.lo, node.hi, node.item
    check_item = compile_check(item, version)
    if isinstance(item, IntNode):
        ilo, ihi = item.lo, item.hi

        def check_int_list(value: Any) -> None:
            if type(value) is not list:
                raise _Invalid(f"expected list, got {_got(value)}")
            _check_length(len(value), lo, hi)
            # C-speed fast path for long id lists (replicas, assignments); on
            # failure the slow loop below finds and names the bad item.
            if all(type(v) is int for v in value) and (
                not value or (ilo <= min(value) and max(value) <= ihi)
            ):
                return
            _each(value, check_item)

        return check_int_list

    def check_list(value: Any) -> None:
        if type(value) is not list:
            raise _Invalid(f"expected list, got {_got(value)}")
        _check_length(len(value), lo, hi)
        _each(value, check_item)

    return check_list


def _each(items: list[Any], check_item: Check) -> None:
    for i, v in enumerate(items):
        try:
            check_item(v)
        except _Invalid as exc:
            exc.path.append(f"[{i}]")
            raise


def _map_check(node: MapNode, version: int) -> Check:
    lo, hi = node.lo, node.hi
    check_key, check_value = compile_check(node.key, version), compile_check(node.value, version)

    def check_map(value: Any) -> None:
        if type(value) is not dict:
            raise _Invalid(f"expected map, got {_got(value)}")
        _check_length(len(value), lo, hi)
        for k, v in value.items():
            try:
                check_key(k)
                check_value(v)
            except _Invalid as exc:
                exc.path.append(f"[{_short(k)}]")
                raise

    return check_map


def _struct_check(node: StructNode, version: int) -> Check:
    """Check a map's fields: ints, then strs and bins, then the rest.

    Scalars are tested inline, in one loop per kind, because a test in a loop
    is several times cheaper than a call and most fields are scalars. A value
    that fails its inline test (or is missing) goes to :func:`_field`, which
    fills in a default or raises naming the problem.
    """
    fields = [f for f in node.fields if f.since <= version]
    checks = {f.name: (compile_check(f.node, version), f.default) for f in fields}
    ints = [(f.name, f.node.lo, f.node.hi) for f in fields if isinstance(f.node, IntNode)]
    sized = [
        (f.name, str if isinstance(f.node, StrNode) else bytes, f.node.lo, f.node.hi)
        for f in fields
        if isinstance(f.node, StrNode | BinNode)
    ]
    others = [f.name for f in fields if not isinstance(f.node, IntNode | StrNode | BinNode)]
    later = [(f.name, f.default) for f in node.fields if f.since > version]

    def check_struct(value: Any) -> None:
        if type(value) is not dict:
            raise _Invalid(f"expected map, got {_got(value)}")
        get = value.get
        for name, lo, hi in ints:
            v = get(name)
            if type(v) is not int or not lo <= v <= hi:
                _field(value, name, checks[name])
        for name, tp, lo, hi in sized:
            v = get(name)
            if type(v) is not tp or not lo <= len(v) <= hi:
                _field(value, name, checks[name])
        for name in others:
            _field(value, name, checks[name])
        for name, default in later:
            value[name] = _fresh(default)

    return check_struct


def _field(value: dict[str, Any], name: str, check_and_default: tuple[Check, object]) -> None:
    check, default = check_and_default
    v = value.get(name, _MISSING)
    if v is _MISSING:
        if default is REQUIRED:
            missing = _Invalid("missing")
            missing.path.append(f".{name}")
            raise missing
        value[name] = _fresh(default)
        return
    try:
        check(v)
    except _Invalid as exc:
        exc.path.append(f".{name}")
        raise


def _fresh(default: object) -> object:
    """The default itself, or a new empty list or map (never one shared by two bodies)."""
    return type(default)() if type(default) in (list, dict) else default


def run_check(check: Check, value: object, root: str, error: Callable[[str], MQError]) -> None:
    """Run ``check``; on a bad value raise ``error("<root><path>: <what is wrong>")``."""
    try:
        check(value)
    except _Invalid as exc:
        path = "".join(reversed(exc.path))
        raise error(f"{root}{path}: {exc.message}") from None


def check_defaults(node: StructNode) -> None:
    """Raise TypeError if a Default of ``node`` (or of a struct inside it) breaks its own type."""
    for field in node.fields:
        if field.default is not REQUIRED:
            try:
                compile_check(field.node, 0)(field.default)
            except _Invalid as exc:
                raise TypeError(f"{node.name}.{field.name}: bad Default: {exc.message}") from None
        for child in _structs_in(field.node):
            check_defaults(child)


def _structs_in(node: Node) -> list[StructNode]:
    if isinstance(node, StructNode):
        return [node]
    if isinstance(node, NullableNode):
        return _structs_in(node.inner)
    if isinstance(node, ListNode):
        return _structs_in(node.item)
    if isinstance(node, MapNode):
        return _structs_in(node.value)
    return []
