"""No import circle among the modules of ``mq/storage`` (TYPE_CHECKING imports included).

Retention and compaction work on a log through :class:`mq.storage.chain.LogCore`;
``log.py`` imports them, and they import nothing from ``log.py``. An AST walk,
so that a circle hidden behind ``if TYPE_CHECKING:`` or inside a function counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

STORAGE = Path(__file__).resolve().parents[2] / "mq" / "storage"
PACKAGE = "mq.storage"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The ``mq.storage`` modules that the file at ``path`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


def storage_graph() -> dict[str, set[str]]:
    files = {f"{PACKAGE}.{p.stem}": p for p in STORAGE.glob("*.py") if p.stem != "__init__"}
    modules = set(files)
    return {name: _imports(path, modules) - {name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_finder_sees_a_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_holds_the_storage_modules() -> None:
    graph = storage_graph()
    assert {"mq.storage.log", "mq.storage.retention", "mq.storage.compaction"} <= set(graph)
    assert "mq.storage.retention" in graph["mq.storage.log"]  # the walk sees imports


def test_no_import_circle_among_storage_modules() -> None:
    assert find_cycle(storage_graph()) is None


def test_retention_and_compaction_do_not_import_the_log() -> None:
    graph = storage_graph()
    for name in ("mq.storage.retention", "mq.storage.compaction", "mq.storage.chain"):
        assert "mq.storage.log" not in graph[name], name
