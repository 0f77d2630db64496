"""The installed package's names: ``mq``, ``mq_cli`` and ``spark_connector``, no ``cli``.

The ``cli/`` folder installs as ``mq_cli`` (``package_dir`` in ``setup.py``): a
top-level ``cli`` in site-packages would collide with any other distribution's
package of that name. Run from a directory outside the checkout, with the
project's Python, so that only what is installed can be imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RUN_TIMEOUT_S = 60


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def test_no_top_level_cli_package_is_installed(tmp_path: Path) -> None:
    done = _python("import cli", tmp_path)
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'cli'" in done.stderr


def test_the_command_line_installs_as_mq_cli(tmp_path: Path) -> None:
    done = _python("from mq_cli.main import main; print(main.name)", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "main"  # the console script's entry point (setup.cfg)
