"""nftables partitions on loopback (root and nft only): traffic really dropped, rules
really removed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from mq.chaos import netcls, netfilter


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


CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=0.5).close()
except OSError:
    sys.exit(3)
"""


def _connects_from_child(
    classes: netcls.NetClasses | None, name: str, host: str, port: int
) -> bool:
    """Whether a child process (in class ``name`` if given) can connect to host:port."""
    child = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep(0.3)\n{CONNECT}", host, str(port)]
    )
    if classes is not None:
        classes.move(name, child.pid)
    return child.wait(10) == 0


@pytest.mark.skipif(netfilter.unavailable_reason() is not None, reason="needs root and nft")
def test_a_split_cuts_two_processes_apart_and_no_one_else() -> None:
    classes = netcls.open_classes()
    if classes is None:
        pytest.skip("no net_cls cgroup hierarchy here")
    host = "127.0.6.7"
    server = socket.socket()
    server.bind((host, 0))
    server.listen(8)
    port = server.getsockname()[1]
    partitions = netfilter.Partitions()
    try:
        cut_off = classes.classid("a")
        partitions.split([(cut_off, "127.0.6.6")], [(classes.classid("b"), host)])
        assert not _connects_from_child(classes, "a", host, port)
        assert _connects_from_child(classes, "b", host, port)  # same side as the server
        assert _connects_from_child(None, "", host, port)  # a client: no class
        with socket.create_connection((host, port), timeout=2):
            pass
        partitions.heal()
        assert _connects_from_child(classes, "a", host, port)
    finally:
        partitions.heal()
        paths = [classes.root / f"mq_chaos_{os.getpid()}_{n}" for n in ("a", "b")]
        mount_point = classes._mounted_here
        classes.close()
        server.close()
    assert not any(p.exists() for p in paths)
    if mount_point is not None:
        assert not mount_point.exists()
