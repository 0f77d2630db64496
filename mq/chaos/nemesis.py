"""The nemesis's schedule: which faults, when, for how long — pure and seeded.

A run's faults come one after the other (never two at once, so that every
fault has a clear start, hold and repair), each at a time drawn from a
seeded :class:`random.Random`: the same seed, kinds and duration always give
the same schedule (:func:`schedule`). What a fault hits (a broker, a
segment) is drawn from the fault's own ``pick`` when it runs, since it may
depend on the cluster (which broker leads).

The kinds:

* ``kill``: SIGKILL a broker, restart it after the hold;
* ``pause``: SIGSTOP a broker, SIGCONT after the hold;
* ``leader``: SIGKILL the leader of a workload partition, restart it;
* ``controller``: SIGKILL the controller, restart it;
* ``two``: SIGKILL two brokers, restart both;
* ``etcd``: SIGKILL etcd, restart it on its data directory;
* ``partition``: a network partition with nftables, removed after the hold
  (root and ``nft`` only): one broker isolated from the others and etcd, two
  brokers cut apart, or one broker with etcd against the other two (each
  process told apart by its net_cls class, :mod:`mq.chaos.netcls`); without
  net_cls, every packet to one broker's address is dropped instead;
* ``bitflip``: stop a broker, flip one bit in a closed segment of one of its
  workload replicas, restart it (the broker must detect the damage);
* ``truncate``: the same, cutting a closed segment short;
* ``disk``: fill the small tmpfs that is one broker's data directory, free it
  after the hold, restart that broker (root only).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = (
    "kill",
    "pause",
    "leader",
    "controller",
    "two",
    "etcd",
    "partition",
    "bitflip",
    "truncate",
    "disk",
)
ROOT_KINDS = frozenset({"partition", "disk"})
"""Faults that need root (nftables rules, a tmpfs mount)."""
FIRST_FAULT_S = (2.0, 4.0)
"""When the first fault comes: after the workloads have written a little."""
HOLD_S = (1.0, 5.0)
"""How long a fault lasts: longer than a client request timeout at the top end,
shorter than the etcd session at the bottom."""
GAP_S = (1.0, 4.0)
"""Quiet time after a fault's repair before the next."""
TAIL_S = 3.0
"""No fault starts in the last seconds of a run: it could not be held."""
MAX_FAULTS = 1_000
"""Faults one run schedules at most (a bound on the loop, never reached in practice)."""


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: when (seconds after the workloads start), what, for how long,
    and the draw that picks its target."""

    at: float
    kind: str
    hold: float
    pick: int


def parse_kinds(text: str) -> list[str]:
    """``"kill,pause"`` -> ``["kill", "pause"]``; ``"all"`` -> every kind; unknown ones
    raise ValueError naming them."""
    if text.strip() == "all":
        return list(KINDS)
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}: choose from {', '.join(KINDS)}")
    if not kinds:
        raise ValueError("no fault kinds given")
    return kinds


def schedule(seed: int, kinds: list[str], duration: float) -> list[Fault]:
    """The faults of one run: the same arguments always give the same list."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = rng.uniform(*FIRST_FAULT_S)
    while at < duration - TAIL_S and len(faults) < MAX_FAULTS and kinds:
        kind = rng.choice(kinds)
        hold = min(rng.uniform(*HOLD_S), max(duration - TAIL_S - at, 0.5))
        faults.append(Fault(round(at, 3), kind, round(hold, 3), rng.randrange(1 << 30)))
        at += hold + rng.uniform(*GAP_S)
    return faults
