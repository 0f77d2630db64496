"""nftables partitions on loopback (root and nft only): traffic really dropped, rules
really removed."""

from __future__ import annotations

import os
import socket

import pytest

from mq.chaos import netfilter


@pytest.mark.skipif(netfilter.unavailable_reason() is not None, reason="needs root and nft")
def test_a_partition_drops_traffic_and_heal_removes_it() -> None:
    server = socket.socket()
    host = "127.0.6.7"
    server.bind((host, 0))
    server.listen()
    port = server.getsockname()[1]
    partitions = netfilter.Partitions()
    try:
        name = partitions.isolate("127.0.6.7", port)
        assert name in netfilter.tables()
        assert name.startswith(f"mq_chaos_{os.getpid()}_")
        with (
            pytest.raises(TimeoutError),
            socket.create_connection(("127.0.6.7", port), timeout=0.5),
        ):
            pass
    finally:
        partitions.heal()
    assert name not in netfilter.tables()
    with socket.create_connection(("127.0.6.7", port), timeout=2):
        pass
    server.close()


@pytest.mark.skipif(netfilter.unavailable_reason() is not None, reason="needs root and nft")
def test_leftovers_of_dead_processes_are_removed_live_ones_kept() -> None:
    dead = 2**22 + 12_345  # above the default pid_max: never a live process
    with pytest.raises(ProcessLookupError):
        os.kill(dead, 0)
    leftover = f"{netfilter.TABLE_PREFIX}{dead}_1"
    netfilter.Partitions._load(f"table inet {leftover} {{ }}\n")
    mine = netfilter.Partitions()
    try:
        live = mine.isolate("127.0.6.7", 9)
        removed = netfilter.cleanup_stale()
        assert leftover in removed
        assert live not in removed
        assert live in netfilter.tables()
        assert leftover not in netfilter.tables()
    finally:
        mine.heal()
        if leftover in netfilter.tables():
            netfilter.Partitions._load(f"delete table inet {leftover}\n")
