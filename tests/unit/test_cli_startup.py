"""The ``mq`` command starts without loading what its subcommands need.

``mq --help`` lists the commands from a table (:data:`mq_cli.main.COMMANDS`) and
a subcommand's module is imported only when it runs; these tests hold the table
equal to the commands' own help and check, in a fresh interpreter, which modules
``--help`` loads. The start-up time itself is measured by
``benchmarks/cli_startup.py``, not asserted.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner
from mq_cli.main import COMMANDS, main

HEAVY = ("mq.broker", "mq.client", "mq.storage", "mq.replication", "uvloop", "aetcd", "msgpack")
"""Modules (and their submodules) that ``--help`` must not import."""
SHORT_HELP_LIMIT = 78 - 6 - max(len(name) for name in COMMANDS)
"""The width click gives a command's short help in ``--help`` (its formatter: 80 columns
less 2, less the indent, the name column and the gap)."""
RUN_TIMEOUT_S = 60


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listed_help_is_the_commands_own(name: str) -> None:
    module, short_help = COMMANDS[name]
    command = getattr(importlib.import_module(f"mq_cli.{module}"), name)
    assert isinstance(command, click.Command)
    assert command.get_short_help_str(SHORT_HELP_LIMIT) == short_help


def _loaded_by(*args: str) -> list[str]:
    code = (
        "import sys, json\n"
        "from mq_cli.main import main\n"
        "try:\n"
        f"    main({list(args)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=RUN_TIMEOUT_S, check=True
    )
    loaded: list[str] = json.loads(done.stderr.decode().strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    "args", [("--help",), ("topic", "--help"), ("queue", "--help"), ("--version",)]
)
def test_help_loads_no_heavy_module(args: tuple[str, ...]) -> None:
    loaded = _loaded_by(*args)
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]
    assert heavy == []


def test_every_command_is_reachable_and_cluster_keeps_rebalance() -> None:
    runner = CliRunner()
    listed = runner.invoke(main, ["--help"])
    assert listed.exit_code == 0
    for name in COMMANDS:
        assert name in listed.output
        assert runner.invoke(main, [name, "--help"]).exit_code == 0, name
    assert "rebalance" in runner.invoke(main, ["cluster", "--help"]).output
    assert runner.invoke(main, ["nosuch"]).exit_code == 2
