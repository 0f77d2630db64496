"""Without the ``spark`` extra, the connector and the pipeline say what to install.

The extra's modules are made to look missing (``importlib.util.find_spec``
answers None for them), as on a machine where ``make run`` installed the core
package only.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import spark_connector
from spark_connector.pipeline.__main__ import main as pipeline


def _without(*names: str) -> Callable[..., ModuleSpec | None]:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> ModuleSpec | None:
        return None if name in names else real(name, *args)

    return find_spec


def test_register_names_the_missing_modules_and_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", _without("pyarrow", "numpy"))
    with pytest.raises(spark_connector.MissingExtraError) as raised:
        spark_connector.register(object())  # type: ignore[arg-type]
    message = str(raised.value)
    assert "needs pyarrow, numpy" in message
    assert "pip install -e '.[spark]'" in message
    assert "\n" not in message
    assert isinstance(raised.value, ImportError)


@pytest.mark.parametrize(
    ("args", "missing"), [(["show"], "pyarrow"), (["run", "--available-now"], "pyspark")]
)
def test_the_pipeline_commands_print_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str], missing: str
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", _without("pyspark", "pyarrow"))
    result = CliRunner().invoke(pipeline, [*args, "--output", str(tmp_path)])
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: this command needs ")
    assert missing in lines[0]
    assert "pip install -e '.[spark]'" in lines[0]


def test_with_the_extra_nothing_is_missing() -> None:
    spark_connector.require_extra()  # the test venv has it (make test installs it)


@pytest.mark.parametrize(
    "module",
    ["spark_connector.source", "spark_connector.reader", "spark_connector.writer"],
)
def test_importing_the_connector_without_the_extra_is_one_line(module: str) -> None:
    """As Spark's workers import it (unpickling a reader or writer), not via register()."""
    hide = "import sys; sys.modules['pyarrow'] = None; sys.modules['numpy'] = None"
    result = subprocess.run(
        [sys.executable, "-c", f"{hide}\nimport {module}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("spark_connector.MissingExtraError: "), result.stderr
    assert "needs pyarrow, numpy" in last
    assert "pip install 'mq[spark]'" in last
