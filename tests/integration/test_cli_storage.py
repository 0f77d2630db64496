"""``mq storage dump`` and ``mq storage verify`` end to end.

Through click's runner for the details, and once through the installed ``mq``
console script to prove the entry point works. Segments are built from
kafka-python's encoder (independent of mq's) and from mq's own Log.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import mq_cli.storage
import pytest
from click.testing import CliRunner, Result
from mq_cli.main import main

import mq
from mq.records.batch import LENGTH_AT, RECORDS_AT, set_base_offset
from mq.storage.config import LogConfig
from mq.storage.log import Log

with warnings.catch_warnings():
    # kafka-python 3 loads its protocol schemas with importlib.resources' legacy
    # read_text/open_text, deprecated since Python 3.11: their warning, not ours.
    warnings.filterwarnings("ignore", r".* is deprecated\. Use files\(\)", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

SEGMENT = f"{0:020d}.log"
COUNTS = [2, 1, 3, 2]
T0 = 1_700_000_000_000
ROW = re.compile(r"^ *(\d+) +(\d+) +(\d+) +(\d+) +(\d+) +(\S+) +(\S+) +(\w+) +(ok|BAD)$")
"""A batch row of the dump table: position .. bytes, two timestamps, codec, CRC."""


def kafka_batch(base_offset: int, count: int, timestamp: int) -> bytearray:
    """A batch from kafka-python's encoder, its baseOffset rewritten (outside the CRC)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for i in range(count):
        builder.append(i, timestamp=timestamp + i, key=b"k%d" % i, value=b"v" * 40, headers=[])
    data = bytearray(builder.build())
    set_base_offset(data, 0, base_offset)
    return data


def _layout() -> tuple[bytes, list[int], list[int]]:
    data, positions, bases, offset = bytearray(), [], [], 0
    for k, count in enumerate(COUNTS):
        positions.append(len(data))
        bases.append(offset)
        data += kafka_batch(offset, count, T0 + 1000 * k)
        offset += count
    return bytes(data), positions, bases


SEG, POSITIONS, BASES = _layout()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """The CLI configures the root logger; leave it as it was for other tests."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    (tmp_path / "t-0").mkdir()
    path = tmp_path / "t-0" / SEGMENT
    path.write_bytes(SEG)
    return path


def damage(path: Path, k: int) -> None:
    """Flip a byte in batch k's records: its CRC fails, its boundaries hold."""
    data = bytearray(path.read_bytes())
    data[POSITIONS[k] + RECORDS_AT + 2] ^= 0x10
    path.write_bytes(data)


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def rows(result: Result) -> list[tuple[int, int, int, int, str]]:
    """(position, base offset, last offset, records, crc) of each batch row."""
    found = [ROW.match(line) for line in result.stdout.splitlines()]
    return [(int(m[1]), int(m[2]), int(m[3]), int(m[4]), m[9]) for m in found if m]


def expected_rows(bad: int | None = None) -> list[tuple[int, int, int, int, str]]:
    return [
        (pos, base, base + n - 1, n, "BAD" if k == bad else "ok")
        for k, (pos, base, n) in enumerate(zip(POSITIONS, BASES, COUNTS, strict=True))
    ]


def test_dump_prints_one_aligned_row_per_batch(segment: Path) -> None:
    result = invoke("storage", "dump", segment)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["POSITION", "BASE", "OFFSET"]
    assert rows(result) == expected_rows()
    assert len({len(line) for line in lines[1:-1]}) == 1  # aligned columns
    assert "2023-11-14T22:13:21.000Z" in lines[2]  # batch 1's first timestamp
    assert lines[-1] == f"4 batches, 8 records, {len(SEG)} bytes; then end of file"


@pytest.mark.parametrize("k", [0, 2, 3])
def test_dump_marks_a_bad_crc_and_goes_on(segment: Path, k: int) -> None:
    damage(segment, k)
    result = invoke("storage", "dump", segment)
    assert result.exit_code == 0, result.output
    assert rows(result) == expected_rows(bad=k)
    assert "1 with a BAD CRC" in result.stdout


def test_dump_json_gives_one_object_per_line(segment: Path) -> None:
    damage(segment, 1)
    segment.write_bytes(segment.read_bytes() + bytes(100))
    result = invoke("storage", "dump", "--json", segment)
    assert result.exit_code == 0, result.output
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["type"] for o in objects] == ["batch"] * 4 + ["padding"]
    assert [o["crc_ok"] for o in objects[:4]] == [True, False, True, True]
    assert [o["base_offset"] for o in objects[:4]] == BASES
    assert objects[0]["max_timestamp"] == T0 + 1
    assert objects[-1] == {"type": "padding", "position": len(SEG), "size": 100}


def test_dump_stops_where_boundaries_are_lost(segment: Path) -> None:
    segment.write_bytes(SEG[: POSITIONS[2] + 70])
    result = invoke("storage", "dump", segment)
    assert result.exit_code == 0, result.output
    assert rows(result) == expected_rows()[:2]
    damaged = [line for line in result.stdout.splitlines() if "DAMAGED" in line]
    assert len(damaged) == 1
    assert damaged[0].split()[0] == str(POSITIONS[2])


def test_verify_ok_prints_one_summary_line(segment: Path) -> None:
    result = invoke("storage", "verify", segment.parent.parent)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"OK: 1 file, 4 valid batches, {len(SEG)} bytes checked"]


def test_verify_a_log_written_by_log(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=64 * 1024, max_message_bytes=32 * 1024)
    log = Log.open(tmp_path / "t-0", config)
    for n in range(200):
        log.append(kafka_batch(0, 8, T0 + n))
    log.close()
    files = len(list((tmp_path / "t-0").glob("*.log")))
    result = invoke("storage", "verify", tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"OK: {files} files, 200 valid batches, ")


@pytest.mark.parametrize("k", range(len(COUNTS)))
def test_verify_names_the_first_bad_batch(segment: Path, k: int) -> None:
    damage(segment, k)
    result = invoke("storage", "verify", segment.parent)
    assert result.exit_code == 1
    bad = f"BAD: {segment} at byte {POSITIONS[k]}, offset {BASES[k]}: CRC mismatch"
    assert result.stdout.splitlines()[0].startswith(bad)


def test_verify_reports_a_broken_length_field(segment: Path) -> None:
    data = bytearray(SEG)
    data[POSITIONS[1] + LENGTH_AT : POSITIONS[1] + LENGTH_AT + 4] = b"\x7f\xff\xff\xff"
    segment.write_bytes(data)
    result = invoke("storage", "verify", segment)
    assert result.exit_code == 1
    assert f"at byte {POSITIONS[1]}, offset {BASES[1]}: batch of " in result.stdout


def test_verify_reports_a_truncated_file(segment: Path) -> None:
    segment.write_bytes(SEG[:-10])
    result = invoke("storage", "verify", segment)
    assert result.exit_code == 1
    assert f"at byte {POSITIONS[-1]}, offset {BASES[-1]}: " in result.stdout
    assert "runs past the end" in result.stdout


def test_verify_accepts_zero_padding(segment: Path) -> None:
    segment.write_bytes(SEG + bytes(4096))
    result = invoke("storage", "verify", segment)
    assert result.exit_code == 0, result.output
    assert "plus 4096 bytes of zero padding" in result.stdout


@pytest.mark.parametrize("command", ["dump", "verify"])
def test_a_missing_path_is_a_clean_usage_error(tmp_path: Path, command: str) -> None:
    result = invoke("storage", command, tmp_path / "nope.log")
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    assert "Traceback" not in result.output


def test_dump_of_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("storage", "dump", tmp_path)
    assert result.exit_code == 2
    assert "is a directory" in result.stderr


def test_verify_of_a_dir_without_segments_fails(tmp_path: Path) -> None:
    result = invoke("storage", "verify", tmp_path)
    assert result.exit_code == 1
    assert "no segment files" in result.stderr


@pytest.mark.parametrize("command", ["dump", "verify"])
def test_an_unreadable_file_is_a_clean_error(
    segment: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Path) -> object:  # as a segment of mode 000 does, unless we are root
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    def refuse_lazily(path: Path) -> Iterator[object]:  # as the generator dump_segment does
        yield refuse(path)

    if command == "dump":
        monkeypatch.setattr(mq_cli.storage, "dump_segment", refuse_lazily)
    else:
        monkeypatch.setattr(mq_cli.storage, "verify", refuse)
    result = invoke("storage", command, segment)
    assert result.exit_code == 1
    assert result.stderr == f"Error: cannot read {segment}: Permission denied\n"


def test_version_and_verbose_logging(segment: Path) -> None:
    assert invoke("--version").stdout == f"mq, version {mq.__version__}\n"
    quiet = invoke("storage", "verify", segment)
    loud = invoke("-v", "storage", "verify", segment)
    assert "verifying" not in quiet.stderr
    assert f"INFO mq_cli.storage: verifying {segment}" in loud.stderr
    assert loud.stdout == quiet.stdout


def test_the_installed_console_script(segment: Path) -> None:
    script = shutil.which("mq", path=str(Path(sys.executable).parent))
    assert script is not None, "pip install -e . puts the mq script next to python"
    good = subprocess.run(
        [script, "storage", "verify", segment], capture_output=True, text=True, timeout=60
    )
    assert (good.returncode, good.stderr) == (0, "")
    assert good.stdout.startswith("OK: 1 file, 4 valid batches")
    damage(segment, 2)
    bad = subprocess.run(
        [script, "storage", "verify", segment], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 1
    assert f"at byte {POSITIONS[2]}, offset {BASES[2]}: CRC mismatch" in bad.stdout
