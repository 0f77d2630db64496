"""The broker's file budget (:mod:`mq.broker.limits`) and the controller's capacity check."""

from __future__ import annotations

import resource

import pytest

from mq.broker import limits
from mq.broker.config import BrokerConfig
from mq.errors import InvalidConfigError
from mq.replication.placement import over_capacity, replica_counts


def test_the_descriptor_budget_caps_the_file_cache() -> None:
    config = BrokerConfig(max_open_files=4096, fd_reserve=512)
    assert limits.derive(config, 1_024, 65_530).open_files == 512
    assert limits.derive(config, 100_000, 65_530).open_files == 4096
    # a limit below the reserve still starts, with the smallest useful cache
    assert limits.derive(config, 256, 65_530).open_files == limits.MIN_OPEN_FILES


def test_partitions_come_from_the_map_budget_not_from_descriptors() -> None:
    config = BrokerConfig(max_segment_maps=16_384, map_reserve=2_048)
    found = limits.derive(config, 1_024, 65_530)
    assert found.max_partitions == found.partitions_by_maps == 65_530 - 2_048 - 16_384
    assert limits.derive(config, 1_000_000, 65_530).max_partitions == found.max_partitions
    # an operator's cap wins when lower, never when higher
    assert limits.derive(replace_cap(config, 10_000), 1_024, 65_530).max_partitions == 10_000
    assert limits.derive(replace_cap(config, 10**9), 1_024, 65_530).max_partitions == 47_098
    # a small vm.max_map_count shrinks the map cache before the partitions
    small = limits.derive(config, 1_024, 4_096)
    assert small.segment_maps == 4_096 - 2_048
    assert small.max_partitions == 0


def test_connections_get_the_descriptors_storage_and_the_process_leave() -> None:
    config = BrokerConfig(max_open_files=1_024, fd_reserve=512)
    # 1,024 descriptors: 512 for storage files, 64 for the process, 448 for sockets
    assert limits.derive(config, 1_024, 65_530).connection_fds == 1_024 - 512 - 64
    assert limits.derive(config, 100_000, 65_530).connection_fds == 100_000 - 1_024 - 64
    assert limits.derive(config, 16, 65_530).connection_fds == 0


def test_a_max_connections_the_descriptors_cannot_hold_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(limits, "raise_nofile", lambda: 1_024)
    monkeypatch.setattr(limits.handles, "configure", lambda files, maps: None)  # process-wide
    config = BrokerConfig(max_open_files=1_024, fd_reserve=512, max_connections=4_096)
    with caplog.at_level("WARNING", logger=limits.__name__):
        assert limits.apply(config).connection_fds == 448
    assert "leaves descriptors for 448 connections, fewer than max_connections 4096" in (
        caplog.text
    )
    caplog.clear()
    with caplog.at_level("WARNING", logger=limits.__name__):
        limits.apply(config.with_overrides(max_connections=400))
    assert "max_connections" not in caplog.text


def replace_cap(config: BrokerConfig, cap: int) -> BrokerConfig:
    return config.with_overrides(max_partitions=cap)


def test_refusal_names_the_limit() -> None:
    found = limits.derive(BrokerConfig(max_partitions=10), 1_024, 65_530)
    assert found.refusal(9, 1) is None
    reason = found.refusal(10, 1)
    assert reason is not None
    assert "limit of 10" in reason
    assert "max_partitions" in reason


def test_bad_budget_settings_are_refused() -> None:
    for key in ("fd_reserve", "map_reserve", "max_partitions"):
        with pytest.raises(InvalidConfigError, match=key):
            BrokerConfig(**{key: -1})
    for key in ("max_open_files", "max_segment_maps"):
        with pytest.raises(InvalidConfigError, match=key):
            BrokerConfig(**{key: 0})


def test_the_soft_descriptor_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit: raised to fs.nr_open instead")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard - 1, hard))
        assert limits.raise_nofile() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_over_capacity_counts_every_replica_of_a_broker() -> None:
    existing = replica_counts([(1, 2), (2, 3), (1, 3)])
    assert existing == {1: 2, 2: 2, 3: 2}
    assert over_capacity({1: 4, 2: 4, 3: 4}, existing, [(1, 2), (1, 3)]) is None
    reason = over_capacity({1: 3, 2: 0, 3: 9}, existing, [(1, 2), (1, 3)])
    assert reason is not None
    assert reason.startswith("broker 1 hosts 2 partitions and may host 3")
    # 0: a broker that registered no limit (an older version) is not capped
    assert over_capacity({1: 0, 2: 0}, existing, [(1, 2)] * 100) is None
