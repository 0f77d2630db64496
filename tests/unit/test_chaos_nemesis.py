"""The nemesis schedule (seeded, bounded), fault kind parsing, the campaign table, and
reading replica images from segment files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mq_cli.chaos import run_line, summary, table
from storage_helpers import make_batch

from mq.chaos import netfilter
from mq.chaos.checker import Anomalies
from mq.chaos.faults import FaultRecord
from mq.chaos.nemesis import FIRST_FAULT_S, HOLD_S, KINDS, TAIL_S, parse_kinds, schedule
from mq.chaos.replicas import collect, read_batches
from mq.chaos.runner import RunResult
from mq.records.batch import set_base_offset


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert schedule(7, list(KINDS), 60) == schedule(7, list(KINDS), 60)
    assert schedule(7, list(KINDS), 60) != schedule(8, list(KINDS), 60)


@given(st.integers(0, 2**32), st.floats(5, 300), st.sets(st.sampled_from(KINDS), min_size=1))
def test_schedules_are_sequential_and_inside_the_run(
    seed: int, duration: float, kinds: set[str]
) -> None:
    faults = schedule(seed, sorted(kinds), duration)
    end = 0.0
    for fault in faults:
        assert fault.kind in kinds
        assert fault.at >= FIRST_FAULT_S[0]
        assert fault.at >= end  # one at a time
        assert fault.at < duration - TAIL_S
        assert 0 < fault.hold <= HOLD_S[1]
        end = fault.at + fault.hold
    if duration > FIRST_FAULT_S[1] + TAIL_S:
        assert faults, "a run long enough for a fault gets one"


def test_every_kind_comes_up() -> None:
    seen = {f.kind for seed in range(20) for f in schedule(seed, list(KINDS), 60)}
    assert seen == set(KINDS)


def test_parse_kinds() -> None:
    assert parse_kinds("kill, pause") == ["kill", "pause"]
    assert parse_kinds("all") == list(KINDS)
    with pytest.raises(ValueError, match="unknown fault kinds \\['nuke'\\]"):
        parse_kinds("kill,nuke")
    with pytest.raises(ValueError, match="no fault kinds"):
        parse_kinds(" , ")


def _result(run: int, lost: int = 0, missed: list[str] | None = None) -> RunResult:
    result = RunResult(run, 100 + run, "both", acknowledged=1000, queue_sent=10)
    result.faults = [
        FaultRecord(3.0, "kill", 2.0, "broker 1", True, "", 0.5),
        FaultRecord(8.0, "disk", 2.0, "", False, "needs root"),
    ]
    result.anomalies = Anomalies()
    for _ in range(lost):
        result.anomalies.add("lost", "x")
    result.missed_plants = missed or []
    result.heal_s = 1.5 + run
    return result


def test_summary_and_table() -> None:
    results = [_result(0), _result(1, lost=3), _result(2, missed=["reordered"])]
    totals = summary(results)
    assert totals["runs"] == 3
    assert totals["faults"] == 3  # injected ones only
    assert totals["acknowledged"] == 3000
    assert totals["lost"] == 3
    assert totals["missed_plants"] == 1
    assert totals["heal_s"] == 3.5
    assert totals["repair_s"] == 0.5
    assert totals["failed_seeds"] == [101, 102]
    heads, cells = table(totals).splitlines()
    assert heads.split()[:4] == ["runs", "faults", "acked", "lost"]
    assert cells.split()[:4] == ["3", "3", "3000", "3"]
    assert len(heads) == len(cells)
    assert "FAIL" in run_line(results[1])
    assert "'lost': 3" in run_line(results[1])
    assert "MISSED" in run_line(results[2])
    assert run_line(results[0]).startswith("run 0 seed 100: ok, 1/2 faults")


def _batch(base_offset: int, count: int) -> bytes:
    batch = bytearray(make_batch(base_offset, count))
    set_base_offset(batch, 0, base_offset)
    return bytes(batch)


def _segment(directory: Path, base: int, batches: list[bytes], padding: int = 0) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{base:020d}.log").write_bytes(b"".join(batches) + b"\0" * padding)


def test_read_batches_up_to_the_high_watermark(tmp_path: Path) -> None:
    first = [_batch(o, 2) for o in (0, 2)]
    second = [_batch(o, 2) for o in (4, 6)]
    _segment(tmp_path / "t-0", 0, first)
    _segment(tmp_path / "t-0", 4, second, padding=4096)  # preallocated active segment
    assert read_batches(tmp_path / "t-0", 100) == b"".join(first + second)
    assert read_batches(tmp_path / "t-0", 6) == b"".join(first + second[:1])
    assert read_batches(tmp_path / "t-0", 0) == b""


def test_a_cut_batch_ends_the_image_and_a_flipped_bit_shows(tmp_path: Path) -> None:
    batches = [_batch(o, 1) for o in range(3)]
    data = b"".join(batches)
    _segment(tmp_path / "a" / "t-0", 0, [data])
    _segment(tmp_path / "b" / "t-0", 0, [data[:-5]])
    flipped = bytearray(data)
    flipped[len(batches[0]) + 70] ^= 0x10
    _segment(tmp_path / "c" / "t-0", 0, [bytes(flipped)])
    nodes = {1: tmp_path / "a", 2: tmp_path / "b", 3: tmp_path / "c", 4: tmp_path}
    images = collect(nodes, {("t", 0): 3})
    per_node = images.images[("t", 0)]
    assert per_node[1] == data
    assert per_node[2] == b"".join(batches[:2])
    assert per_node[3] != data
    assert len(per_node[3]) == len(data)
    assert per_node[4] == b""  # no directory: an empty replica


def test_partitions_need_root_and_nft() -> None:
    reason = netfilter.unavailable_reason()
    if os.geteuid() != 0:
        assert reason is not None
        assert "root" in reason
    elif shutil.which("nft") is None:
        assert reason is not None
        assert "nft" in reason
    else:
        assert reason is None
