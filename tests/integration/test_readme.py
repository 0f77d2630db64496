"""The README runs as written: its tour, queue and storage examples, in order.

The shell and Python blocks of the sections named in :data:`SECTIONS` are taken
from ``README.md`` and run one after the other against a fresh ``mq serve`` (its
own data dir, a free loopback port), with the project's ``mq`` first on PATH and
the README's address ``127.0.0.1:9292`` and data dir ``mq-data`` rewritten to that
broker's. Every block must exit 0, so an example that drifts from the code fails
here. A line that the README marks as a placeholder (``# placeholder``) is shown
to readers, not run. The storage tools' block runs last: it inspects the data the
tour wrote (the README says so).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from broker_process import BrokerProcess

README = Path(__file__).resolve().parents[2] / "README.md"
SECTIONS = (
    "A short tour",
    "From Python",
    "Queues (SQS semantics on the log)",
    "Quotas and fair sharing",
    "Admin tools",
)
"""The README's sections whose examples run, in the order they run."""
README_BOOTSTRAP = "127.0.0.1:9292"
README_DATA_DIR = "mq-data"
PLACEHOLDER = "# placeholder"
BLOCK_TIMEOUT_S = 60
"""Longest one block may take (the tour's 100,000 messages take a few seconds)."""

FENCE = re.compile(r"^```(\w*)\s*$")
HEADING = re.compile(r"^(#+)\s+(.*?)\s*$")


@dataclass(frozen=True)
class Block:
    section: str
    language: str
    code: str
    line: int
    """Where the block starts in README.md (1-based), for failure messages."""


def readme_blocks(text: str) -> list[Block]:
    """Every fenced block with its section heading and language."""
    blocks: list[Block] = []
    section, language, start = "", None, 0
    lines: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if language is not None:
            if fence and not fence.group(1):
                blocks.append(Block(section, language, "\n".join(lines) + "\n", start))
                language = None
            else:
                lines.append(line)
        elif fence:
            language, start, lines = fence.group(1), number, []
        elif heading := HEADING.match(line):
            section = heading.group(2)
    return blocks


def runnable(blocks: list[Block]) -> list[Block]:
    """The shell and Python blocks of :data:`SECTIONS`, in that order."""
    return [
        b
        for name in SECTIONS
        for b in blocks
        if b.section == name and b.language in ("sh", "python")
    ]


def rewrite(code: str, bootstrap: str, data_dir: Path) -> str:
    kept = [line for line in code.splitlines() if PLACEHOLDER not in line]
    text = "\n".join(kept) + "\n"
    return text.replace(README_BOOTSTRAP, bootstrap).replace(README_DATA_DIR, str(data_dir))


def test_the_extraction_finds_the_examples() -> None:
    blocks = runnable(readme_blocks(README.read_text()))
    found = {(b.section, b.language) for b in blocks}
    assert found == {
        ("A short tour", "sh"),
        ("From Python", "python"),
        ("Queues (SQS semantics on the log)", "sh"),
        ("Queues (SQS semantics on the log)", "python"),
        ("Quotas and fair sharing", "sh"),
        ("Quotas and fair sharing", "python"),
        ("Admin tools", "sh"),
    }
    assert [b.section for b in blocks][-1] == "Admin tools"
    sample = "x\n```sh\nmq a  # placeholder\nmq b 127.0.0.1:9292 mq-data/x\n```\n"
    [block] = readme_blocks("## Admin tools\n" + sample)
    assert rewrite(block.code, "127.0.0.1:1", Path("/d")) == "mq b 127.0.0.1:1 /d/x\n"


@pytest.mark.slow
def test_the_readme_examples_run_as_written(tmp_path: Path) -> None:
    data_dir = tmp_path / "mq-data"
    broker = BrokerProcess(data_dir)
    broker.start()
    try:
        bootstrap = broker.bootstrap
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "MQ_BOOTSTRAP": bootstrap,
        }
        outputs: dict[str, bytes] = {}
        for block in runnable(readme_blocks(README.read_text())):
            code = rewrite(block.code, bootstrap, data_dir)
            argv = (
                ["sh", "-e", "-c", code] if block.language == "sh" else [sys.executable, "-c", code]
            )
            done = subprocess.run(
                argv,
                cwd=tmp_path,
                env=env,
                capture_output=True,
                timeout=BLOCK_TIMEOUT_S,
                check=False,
            )
            where = f"README.md:{block.line} ({block.section}, {block.language})"
            assert done.returncode == 0, (
                f"{where} failed with {done.returncode}:\n"
                f"{done.stderr.decode(errors='replace')[-3000:]}"
            )
            outputs[block.section] = outputs.get(block.section, b"") + done.stdout
        # the commands really ran against the broker: what the tour and the tools printed
        assert b"\n100000\n" in outputs["A short tour"]  # mq consume ... | wc -l
        assert b"acknowledged" in outputs["From Python"]
        assert b"OK: " in outputs["Admin tools"]  # mq storage verify
    finally:
        broker.stop()
