"""The schema tree: wire types as plain data, parsed from TypedDict annotations.

:func:`struct_node` reads a TypedDict's ``Annotated`` metadata (see
:mod:`mq.wire.schema` for the vocabulary) into :class:`Node` objects. The tree
is the one description of a body: :mod:`mq.wire.validation` compiles it into
validators and the tests generate valid bodies from it.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin

from mq.wire.limits import MAX_FRAME_BYTES, MAX_STRING_LEN

# -- metadata markers used inside Annotated[...] ----------------------------------


@dataclass(frozen=True)
class Range:
    """Inclusive bounds of an int."""

    lo: int
    hi: int


@dataclass(frozen=True)
class Len:
    """Inclusive bounds of a length: characters of a str, bytes of a bin, items of a container."""

    lo: int
    hi: int


@dataclass(frozen=True)
class Default:
    """The field may be absent: the validator fills in ``value`` (``[]``/``{}`` if mutable)."""

    value: object


@dataclass(frozen=True)
class Since:
    """The field exists from this version of the message on (it needs a Default)."""

    version: int


# -- the schema tree ------------------------------------------------------------------


class Node:
    """One type of the schema tree (see the subclasses)."""


@dataclass(frozen=True)
class IntNode(Node):
    lo: int
    hi: int


@dataclass(frozen=True)
class StrNode(Node):
    lo: int
    hi: int


@dataclass(frozen=True)
class BinNode(Node):
    lo: int
    hi: int


@dataclass(frozen=True)
class BoolNode(Node):
    pass


@dataclass(frozen=True)
class LiteralNode(Node):
    values: tuple[int | str, ...]


@dataclass(frozen=True)
class NullableNode(Node):
    inner: Node


@dataclass(frozen=True)
class ListNode(Node):
    item: Node
    lo: int
    hi: int


@dataclass(frozen=True)
class MapNode(Node):
    key: StrNode
    value: Node
    lo: int
    hi: int


REQUIRED: Any = object()
"""The default of a field that must be present."""


@dataclass(frozen=True)
class Field:
    name: str
    node: Node
    default: object = REQUIRED
    since: int = 0


@dataclass(frozen=True, eq=False)
class StructNode(Node):
    name: str
    fields: tuple[Field, ...]


# -- from annotations to nodes ----------------------------------------------------------

_BIN_TYPES = {bytes, bytearray, memoryview}
_STRUCTS: dict[type, StructNode] = {}


def struct_node(typed_dict: type) -> StructNode:
    """The node of a TypedDict class (built once, then cached)."""
    found = _STRUCTS.get(typed_dict)
    if found is not None:
        return found
    if not typing.is_typeddict(typed_dict):
        raise TypeError(f"{typed_dict!r} is not a TypedDict")
    fields = []
    for name, annotation in typing.get_type_hints(typed_dict, include_extras=True).items():
        where = f"{typed_dict.__name__}.{name}"
        node, default, since = _parse(annotation, where)
        if since and default is REQUIRED:
            raise TypeError(f"{where}: a field added in a later version needs a Default")
        if isinstance(default, list | dict) and default:
            raise TypeError(f"{where}: a mutable Default must be empty")
        fields.append(Field(name, node, default, since))
    node = StructNode(typed_dict.__name__, tuple(fields))
    _STRUCTS[typed_dict] = node
    return node


def _parse(annotation: object, where: str) -> tuple[Node, object, int]:
    """(node, default, since) of a field's annotation."""
    default, since = REQUIRED, 0
    tp, meta = _unwrap(annotation)
    for m in meta:
        if isinstance(m, Default):
            default = m.value
        elif isinstance(m, Since):
            since = m.version
    return _node(tp, [m for m in meta if isinstance(m, Range | Len)], where), default, since


def _unwrap(annotation: object) -> tuple[object, list[object]]:
    """The type inside ``Annotated[...]`` layers and their metadata, outermost first."""
    meta: list[object] = []
    while get_origin(annotation) is Annotated:
        annotation, *more = get_args(annotation)
        meta.extend(more)
    for m in meta:
        if not isinstance(m, Range | Len | Default | Since):
            raise TypeError(f"unknown schema marker {m!r}")
    return annotation, meta


def _item(annotation: object, where: str, bounds: list[Range | Len]) -> Node:
    """The node of a type inside another (list item, map key or value, union member)."""
    tp, meta = _unwrap(annotation)
    if any(isinstance(m, Default | Since) for m in meta):
        raise TypeError(f"{where}: Default and Since belong on fields, not on inner types")
    return _node(tp, bounds + [m for m in meta if isinstance(m, Range | Len)], where)


def _node(tp: object, bounds: list[Range | Len], where: str) -> Node:
    """The node of a bare type; the innermost Range and Len in ``bounds`` apply."""
    if get_origin(tp) is Annotated:
        return _item(tp, where, bounds)
    rng = next((b for b in reversed(bounds) if isinstance(b, Range)), None)
    length = next((b for b in reversed(bounds) if isinstance(b, Len)), None)
    origin, args = get_origin(tp), get_args(tp)
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in args if a is not type(None)]
        if len(rest) < len(args):
            return NullableNode(_node(_union(rest), bounds, where))
        if set(rest) == _BIN_TYPES:
            tp = bytes
        else:
            raise TypeError(f"{where}: unions other than X | None and bytes-like are not supported")
    if tp is bool:
        return BoolNode()
    if tp is int:
        if rng is None:
            raise TypeError(f"{where}: an int needs a Range (use I32, I64, ...)")
        return IntNode(rng.lo, rng.hi)
    if tp is str:
        return StrNode(*(length.lo, length.hi) if length else (0, MAX_STRING_LEN))
    if tp in _BIN_TYPES:
        return BinNode(*(length.lo, length.hi) if length else (0, MAX_FRAME_BYTES))
    if origin is Literal:
        if not all(type(a) in (int, str) for a in args):
            raise TypeError(f"{where}: Literal values must be ints or strs")
        return LiteralNode(tuple(args))
    if origin in (list, dict):
        if length is None:
            raise TypeError(f"{where}: a list or map needs a Len")
        if origin is list:
            return ListNode(_item(args[0], f"{where}[]", []), length.lo, length.hi)
        key = _item(args[0], f"{where}{{key}}", [])
        if not isinstance(key, StrNode):
            raise TypeError(f"{where}: map keys must be str")
        return MapNode(key, _item(args[1], f"{where}{{}}", []), length.lo, length.hi)
    if isinstance(tp, type) and typing.is_typeddict(tp):
        return struct_node(tp)
    raise TypeError(f"{where}: unsupported type {tp!r}")


def _union(members: list[Any]) -> object:
    if len(members) == 1:
        return members[0]
    return typing.Union[tuple(members)]  # noqa: UP007 (built from a runtime list)
