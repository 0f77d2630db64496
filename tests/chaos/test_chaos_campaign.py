"""A short chaos campaign in CI: real etcd, 3 real brokers on 127.0.6.x, both workloads,
every fault that works here (the root ones too when root), and 0 anomalies.

Each run checks its history and proves the checker on planted anomalies; the
assertions below also require that the runs did something (faults injected,
records acknowledged, messages delivered) and left nothing behind (nftables
tables, tmpfs mounts).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mq.chaos import netfilter
from mq.chaos.nemesis import KINDS, ROOT_KINDS
from mq.chaos.runner import RunConfig, run_campaign

pytestmark = pytest.mark.slow

RUNS = 2
"""Two seeds here; tests/chaos/test_chaos_secured.py runs a third on a secured cluster."""
DURATION_S = 20.0
HOSTS = ("127.0.6.1", "127.0.6.2", "127.0.6.3")
ETCD_HOST = "127.0.6.9"


def _faults() -> list[str]:
    root = os.geteuid() == 0
    return [k for k in KINDS if root or k not in ROOT_KINDS]


def _mounts_under(path: Path) -> list[str]:
    with open("/proc/mounts") as mounts:
        return [line for line in mounts if str(path) in line]


def test_a_short_campaign_finds_no_anomaly(tmp_path: Path) -> None:
    config = RunConfig(
        seed=1_000,
        workload="both",
        duration=DURATION_S,
        faults=_faults(),
        data_dir=tmp_path,
        hosts=HOSTS,
        etcd_host=ETCD_HOST,
    )
    lines: list[str] = []
    results = run_campaign(config, RUNS, log=lines.append)
    assert len(results) == RUNS
    assert sum(r.injected for r in results) >= RUNS, "the nemesis injected faults"
    for result in results:
        assert result.acknowledged > 0
        assert result.queue_deliveries > 0
        assert result.missed_plants == [], f"seed {result.seed}: the checker missed some"
        found = {k: v for k, v in result.anomalies.counts.items() if v}
        faults = [(f.kind, f.target, f.skipped) for f in result.faults]
        assert not found, f"seed {result.seed}: {found} {result.anomalies.examples} {faults}"
        assert result.problems == [], f"seed {result.seed}: {result.problems}"
        assert result.healed
    if netfilter.unavailable_reason() is None:
        assert not [t for t in netfilter.tables() if t.startswith(f"mq_chaos_{os.getpid()}_")]
    assert _mounts_under(tmp_path) == []
