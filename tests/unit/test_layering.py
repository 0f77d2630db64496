"""The storage and wire layers stay libraries: no servers, streams or sockets.

import-linter (``make lint``) forbids whole modules; this test catches what it
cannot: asyncio's server and stream functions reached through ``asyncio.``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY_PACKAGES = ["mq/records", "mq/storage", "mq/wire", "mq/groups", "mq/queues"]
FORBIDDEN_ASYNCIO = {
    "start_server",
    "start_unix_server",
    "open_connection",
    "open_unix_connection",
    "StreamReader",
    "StreamWriter",
    "create_server",
    "create_connection",
    "sock_connect",
    "sock_accept",
}
FORBIDDEN_MODULES = {"socket", "ssl", "selectors", "uvloop", "asyncio.streams", "cli", "mq_cli"}


def _library_files() -> list[Path]:
    return sorted(p for pkg in LIBRARY_PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _violations(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ASYNCIO:
            names = [f"asyncio.{node.attr}"]
            found.append(f"{path.relative_to(root)}:{node.lineno} uses .{node.attr}")
            continue
        else:
            continue
        for name in names:
            if name in FORBIDDEN_MODULES or name.split(".")[0] in FORBIDDEN_MODULES:
                found.append(f"{path.relative_to(root)}:{node.lineno} imports {name}")
            if name.startswith("mq.") and name.split(".")[1] in {"replication", "broker", "server"}:
                found.append(f"{path.relative_to(root)}:{node.lineno} imports {name}")
    return found


def test_there_are_library_files() -> None:
    assert len(_library_files()) >= 5


@pytest.mark.parametrize("path", _library_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_library_layers_use_no_servers_or_sockets(path: Path) -> None:
    assert _violations(path) == []


def test_the_check_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import asyncio\nimport socket\nasync def f():\n    await asyncio.start_server(None)\n"
    )
    assert len(_violations(bad, tmp_path)) == 2
