"""Hypothesis strategies and helpers derived from mq.wire's schema trees.

Valid bodies are generated from the nodes (not from the validators), and
:func:`complete` fills in defaults independently of :mod:`mq.wire.validation`,
so a round-trip test compares the decoder against a second implementation.
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from typing import Any, NamedTuple

from hypothesis import strategies as st

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

MAX_ITEMS = 3
"""Longest generated list or map: enough to exercise indexes, cheap to round-trip."""
MAX_TEXT = 12
KEY_ALPHABET = string.ascii_letters + string.digits + "._-"
"""Map keys (topic and config names) from a plain alphabet, so the paths the
tests expect spell them the way the validator's error messages do."""
MAX_BIN = 64


def values(node: Node, version: int = 0) -> st.SearchStrategy[Any]:
    """Values that fit ``node`` at ``version``; optional fields are sometimes left out."""
    if isinstance(node, IntNode):
        return st.integers(node.lo, node.hi)
    if isinstance(node, StrNode):
        return st.text(min_size=node.lo, max_size=min(node.hi, max(node.lo, MAX_TEXT)))
    if isinstance(node, BinNode):
        return st.binary(min_size=node.lo, max_size=min(node.hi, MAX_BIN))
    if isinstance(node, BoolNode):
        return st.booleans()
    if isinstance(node, LiteralNode):
        return st.sampled_from(node.values)
    if isinstance(node, NullableNode):
        return st.none() | values(node.inner, version)
    if isinstance(node, ListNode):
        return st.lists(
            values(node.item, version), min_size=node.lo, max_size=min(node.hi, MAX_ITEMS)
        )
    if isinstance(node, MapNode):
        key = node.key
        return st.dictionaries(
            st.text(KEY_ALPHABET, min_size=max(key.lo, 1), max_size=min(key.hi, MAX_TEXT)),
            values(node.value, version),
            min_size=node.lo,
            max_size=min(node.hi, MAX_ITEMS),
        )
    if isinstance(node, StructNode):
        fields = [f for f in node.fields if f.since <= version]
        return st.fixed_dictionaries(
            {f.name: values(f.node, version) for f in fields if f.default is REQUIRED},
            optional={f.name: values(f.node, version) for f in fields if f.default is not REQUIRED},
        )
    raise TypeError(node)


def complete(node: Node, value: Any, version: int = 0) -> Any:
    """A deep copy of a valid ``value`` with every absent optional field set to its default."""
    if isinstance(node, NullableNode):
        return None if value is None else complete(node.inner, value, version)
    if isinstance(node, ListNode):
        return [complete(node.item, v, version) for v in value]
    if isinstance(node, MapNode):
        return {k: complete(node.value, v, version) for k, v in value.items()}
    if isinstance(node, StructNode):
        out = {}
        for f in node.fields:
            if f.since > version or f.name not in value:
                default = f.default
                out[f.name] = type(default)() if isinstance(default, list | dict) else default
            else:
                out[f.name] = complete(f.node, value[f.name], version)
        return out
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


class Slot(NamedTuple):
    """One present field or item of a value: where it is and what it must be."""

    path: str
    container: Any
    key: Any
    node: Node
    required: bool
    """A struct field without a default (deleting it must be refused)."""


def slots(node: Node, value: Any, path: str = "") -> Iterator[Slot]:
    """Every present field or item of a valid ``value``, outermost first."""
    if isinstance(node, NullableNode):
        if value is not None:
            yield from slots(node.inner, value, path)
    elif isinstance(node, ListNode):
        for i, item in enumerate(value):
            yield Slot(f"{path}[{i}]", value, i, node.item, False)
            yield from slots(node.item, item, f"{path}[{i}]")
    elif isinstance(node, MapNode):
        for k, item in value.items():
            yield Slot(f"{path}[{k!r}]", value, k, node.value, False)
            yield from slots(node.value, item, f"{path}[{k!r}]")
    elif isinstance(node, StructNode):
        for f in node.fields:
            if f.name in value:
                yield Slot(f"{path}.{f.name}", value, f.name, f.node, f.default is REQUIRED)
                yield from slots(f.node, value[f.name], f"{path}.{f.name}")


def wrong_values(node: Node) -> list[Any]:
    """Values ``node`` must refuse (None only where the node is not nullable)."""
    if isinstance(node, NullableNode):
        return [w for w in wrong_values(node.inner) if w is not None]
    common: list[Any] = [1.5, [], {}]
    if isinstance(node, IntNode):
        out = ["1", True, None, *common]
        out += [node.hi + 1] if node.hi < (1 << 64) - 1 else []
        out += [node.lo - 1] if node.lo > -(1 << 63) else []
        return out
    if isinstance(node, StrNode):
        out = [1, b"x", None, *common]
        out += ["x" * (node.hi + 1)] if node.hi < 1000 else []
        out += [""] if node.lo > 0 else []
        return out
    if isinstance(node, BinNode):
        return ["s", 1, None, *common]
    if isinstance(node, BoolNode):
        return [1, 0, "true", None, *common]
    if isinstance(node, LiteralNode):
        return ["nope", 12345, True, None, 1.5]
    if isinstance(node, ListNode):
        return ["x", {}, None, 1]
    if isinstance(node, MapNode):
        return ["x", [], None, 1]
    if isinstance(node, StructNode):
        return ["x", [], None, 1]
    raise TypeError(node)
