"""Network partitions on loopback with nftables (root only), always removed.

Each partition is an nftables table of its own, named
``mq_chaos_<pid>_<n>``, with one output-hook chain that drops packets on
``lo``: between two groups of processes told apart by their net_cls class
(:meth:`Partitions.split`, see :mod:`mq.chaos.netcls`), or, where there is
no net_cls, every packet to one address and port (:meth:`Partitions.isolate`:
nobody reaches that broker, but its own connections out still work). The
unique name is how :func:`cleanup_stale` finds the leftovers of a chaos
process that died (every campaign calls it first). :class:`Partitions`
removes every table it added on :meth:`Partitions.heal`, also from a
``finally`` on an exception or Ctrl-C.

Not thread-safe: the nemesis thread adds and heals, the runner's ``finally``
heals after that thread has stopped.
"""

from __future__ import annotations

import os
import shutil
import subprocess

TABLE_PREFIX = "mq_chaos_"
"""Every table this module adds starts with this (and only those are removed)."""
NFT_TIMEOUT_S = 10.0
"""Bound on one ``nft`` command (it answers in milliseconds)."""


class NetfilterError(RuntimeError):
    """An nft command failed (the message has its output)."""


def unavailable_reason() -> str | None:
    """Why partitions cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network partitions need root (nftables rules on lo): skipped"
    if shutil.which("nft") is None:
        return "network partitions need the nft command (apt-get install nftables): skipped"
    return None


def _nft(*args: str) -> str:
    try:
        done = subprocess.run(
            ["nft", *args], capture_output=True, text=True, timeout=NFT_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetfilterError(f"nft {' '.join(args)}: {exc}") from exc
    if done.returncode != 0:
        raise NetfilterError(f"nft {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def tables() -> list[str]:
    """The inet tables this module added that still exist (any process's)."""
    out = _nft("list", "tables", "inet")
    names = [line.split()[-1] for line in out.splitlines() if line.startswith("table inet ")]
    return [name for name in names if name.startswith(TABLE_PREFIX)]


def cleanup_stale() -> list[str]:
    """Delete the tables of chaos processes that no longer run; returns them."""
    removed = []
    for name in tables():
        pid_text = name.removeprefix(TABLE_PREFIX).split("_")[0]
        if pid_text.isdigit() and alive(int(pid_text)):
            continue
        _nft("delete", "table", "inet", name)
        removed.append(name)
    return removed


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Partitions:
    """The partitions one run made, each a table; :meth:`heal` removes them all."""

    def __init__(self) -> None:
        self._count = 0
        self.active: list[str] = []

    def isolate(self, address: str, port: int) -> str:
        """Drop every packet on lo to ``address:port`` (TCP); returns the table name."""
        self._count += 1
        name = f"{TABLE_PREFIX}{os.getpid()}_{self._count}"
        rules = (
            f"table inet {name} {{\n"
            f"  chain out {{\n"
            f"    type filter hook output priority 0; policy accept;\n"
            f'    oifname "lo" ip daddr {address} tcp dport {port} drop\n'
            f"  }}\n"
            f"}}\n"
        )
        self.active.append(name)  # before adding: heal removes it even if half made
        self._load(rules)
        return name

    def split(self, side_a: list[tuple[int, str]], side_b: list[tuple[int, str]]) -> str:
        """A partition between two groups of processes, each ``(net_cls class id,
        address)``: packets of a class on one side to an address on the other are
        dropped, both ways (see :mod:`mq.chaos.netcls`); returns the table name."""
        self._count += 1
        name = f"{TABLE_PREFIX}{os.getpid()}_{self._count}"
        drops = [
            f'    oifname "lo" meta cgroup {src} ip daddr {dst} drop\n'
            for one, other in ((side_a, side_b), (side_b, side_a))
            for src, _ in one
            for _, dst in other
        ]
        rules = (
            f"table inet {name} {{\n"
            f"  chain out {{\n"
            f"    type filter hook output priority 0; policy accept;\n"
            f"{''.join(drops)}"
            f"  }}\n"
            f"}}\n"
        )
        self.active.append(name)
        self._load(rules)
        return name

    @staticmethod
    def _load(rules: str) -> None:
        try:
            done = subprocess.run(
                ["nft", "-f", "-"],
                input=rules,
                capture_output=True,
                text=True,
                timeout=NFT_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise NetfilterError(f"nft -f: {exc}") from exc
        if done.returncode != 0:
            raise NetfilterError(f"nft -f: {done.stderr.strip()}")

    def heal(self) -> None:
        """Remove every table this object added (those already gone are skipped)."""
        existing = set(tables()) if self.active else set()
        while self.active:
            name = self.active.pop()
            if name in existing:
                _nft("delete", "table", "inet", name)
