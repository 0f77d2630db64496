"""The job's Parquet output read without Spark (pyarrow), for ``show``.

Starting a JVM to print a table takes longer than the table deserves, but
the output directory cannot simply be read file by file either: a micro-batch
that failed half way leaves part files that its retry writes again. Spark's
file sink says which files count in its log, ``_spark_metadata/``: one file
per micro-batch (``"v1"``, then one JSON object per line, ``"action": "add"``
or ``"delete"``), and every 10 batches a ``N.compact`` file that holds all
entries up to batch N. This module reads that log as Spark's
``FileStreamSinkLog`` does, and only the files it names; the Spark test checks
that it sees the same rows as ``spark.read.parquet``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq

from spark_connector.pipeline.events import COLUMNS, WindowStats

LOG_DIR: Final = "_spark_metadata"
LOG_VERSION: Final = "v1"


class OutputLogError(ValueError):
    """The output directory's ``_spark_metadata`` log is not one this reader knows."""


def committed_files(output: Path) -> list[Path]:
    """The Parquet files of ``output`` that committed micro-batches wrote, in log order."""
    log = output / LOG_DIR
    if not log.is_dir():
        return []
    batches: dict[int, Path] = {}
    compacts: dict[int, Path] = {}
    for entry in log.iterdir():
        name = entry.name
        if name.isdigit():
            batches[int(name)] = entry
        elif name.endswith(".compact") and name.removesuffix(".compact").isdigit():
            compacts[int(name.removesuffix(".compact"))] = entry
    first = max(compacts, default=-1)
    files = [compacts[first]] if first >= 0 else []
    files += [batches[batch] for batch in sorted(batches) if batch > first]
    paths: dict[str, None] = {}
    for file in files:
        for action in _entries(file):
            if action.get("action") == "delete":
                paths.pop(action["path"], None)
            elif not action.get("isDir", False):
                paths[action["path"]] = None
    return [_local(uri) for uri in paths]


def _entries(file: Path) -> list[dict[str, Any]]:
    lines = file.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != LOG_VERSION:
        raise OutputLogError(f"{file}: not a {LOG_VERSION} Spark file sink log")
    return [json.loads(line) for line in lines[1:] if line.strip()]


def _local(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise OutputLogError(f"{uri}: only local files can be read without Spark")
    return Path(unquote(parsed.path))


def read_parquet(output: Path) -> list[WindowStats]:
    """Every committed row of the job's Parquet output in ``output``."""
    rows: list[WindowStats] = []
    for file in committed_files(output):
        for row in pq.read_table(file, columns=list(COLUMNS)).to_pylist():
            row["window_start"] = _utc(row["window_start"])
            row["window_end"] = _utc(row["window_end"])
            rows.append(WindowStats(**row))
    return rows


def _utc(time: datetime) -> datetime:
    """Spark stores instants (INT96 by default, which pyarrow reads as naive UTC)."""
    return time.replace(tzinfo=UTC) if time.tzinfo is None else time.astimezone(UTC)
