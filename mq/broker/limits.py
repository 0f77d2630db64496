"""The broker's file budget: descriptors and maps, and the partitions they allow (issue 18, F2).

Two kernel limits bound what a broker's storage may hold open:

* ``RLIMIT_NOFILE``, the descriptors of the process. At start the broker
  raises its soft limit to the hard one (as Kafka's scripts advise). Of that,
  :attr:`~mq.broker.config.BrokerConfig.fd_reserve` is left to sockets and
  the process; the rest caps the cache of active segments' descriptors
  (:data:`mq.storage.handles.FILES`). A partition keeps *no* descriptor for
  good: its active file is reopened when the cache closed it, sealed segments
  are read through maps, which hold none (:mod:`mq.storage.mapping`). So the
  number of partitions does not depend on ``RLIMIT_NOFILE``, and a broker
  with 10,000 partitions starts under a limit of 1,024.
* ``vm.max_map_count``, the map areas of the process (65,530 by default). Each
  hosted partition keeps one, its active segment's map; sealed segments' maps
  are cached (:data:`mq.storage.handles.MAPS`,
  :attr:`~mq.broker.config.BrokerConfig.max_segment_maps`) and
  :attr:`~mq.broker.config.BrokerConfig.map_reserve` is left to the process.
  What remains is the most partitions this broker may host; an operator may
  set a lower :attr:`~mq.broker.config.BrokerConfig.max_partitions`.

The broker registers its ``max_partitions``; the controller refuses a topic
whose replicas would take a broker past it (POLICY_VIOLATION, before anything
is written), and a broker refuses to open a replica past it (a reassignment, a
limit lowered since), logging why.

:func:`derive` is pure; :func:`apply` reads the limits and sizes the caches.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass
from pathlib import Path

from mq.broker.config import BrokerConfig
from mq.storage import handles

log = logging.getLogger(__name__)

MIN_OPEN_FILES = 16
"""Fewest active files the cache keeps whatever the budget says: a smaller cache
would reopen a file on nearly every append to a partition. A budget below it is
a configuration to warn about, not a reason for a broker not to start."""
PROCESS_FDS = 64
"""Descriptors the process itself keeps besides storage files and client sockets:
the listening socket, the metadata store's and peers' connections, log files, the
interpreter's and uvloop's own. Connections get what is left of ``RLIMIT_NOFILE``
after the storage files and these."""
DEFAULT_MAX_MAP_COUNT = 65_530
"""Linux's default ``vm.max_map_count``, used when ``/proc`` cannot say."""
MAX_MAP_COUNT_PATH = Path("/proc/sys/vm/max_map_count")
NR_OPEN_PATH = Path("/proc/sys/fs/nr_open")
"""The ceiling of ``RLIMIT_NOFILE`` when the hard limit is unlimited."""


@dataclass(frozen=True)
class Limits:
    """What the broker's storage may hold open, derived from the kernel's limits."""

    nofile: int
    """``RLIMIT_NOFILE`` (soft, after raising it to the hard limit)."""
    max_map_count: int
    open_files: int
    """Capacity of the cache of active segments' descriptors."""
    segment_maps: int
    """Capacity of the cache of sealed segments' maps."""
    max_partitions: int
    """Most partition replicas this broker hosts."""
    partitions_by_maps: int
    """What the map budget alone allows (``max_partitions`` may be lower, by config)."""
    connection_fds: int
    """Descriptors left to sockets after the storage files and :data:`PROCESS_FDS`
    (a ``max_connections`` above it is warned about at start: past it, accepting
    fails with EMFILE and the file cache gives descriptors back)."""

    def refusal(self, hosted: int, adding: int) -> str | None:
        """Why ``adding`` more replicas to ``hosted`` ones go past the limit, or None."""
        if hosted + adding <= self.max_partitions:
            return None
        return (
            f"{hosted} hosted + {adding} new partitions exceed this broker's limit of "
            f"{self.max_partitions} (max_partitions; the map budget allows "
            f"{self.partitions_by_maps}: vm.max_map_count {self.max_map_count})"
        )


def derive(config: BrokerConfig, nofile: int, max_map_count: int) -> Limits:
    """The limits for ``config`` under ``nofile`` descriptors and ``max_map_count`` maps."""
    fd_budget = nofile - config.fd_reserve
    open_files = max(MIN_OPEN_FILES, min(config.max_open_files, fd_budget))
    segment_maps = max(1, min(config.max_segment_maps, max_map_count - config.map_reserve))
    by_maps = max(0, max_map_count - config.map_reserve - segment_maps)
    cap = config.max_partitions
    return Limits(
        nofile=nofile,
        max_map_count=max_map_count,
        open_files=open_files,
        segment_maps=segment_maps,
        max_partitions=min(cap, by_maps) if cap else by_maps,
        partitions_by_maps=by_maps,
        connection_fds=max(0, nofile - open_files - PROCESS_FDS),
    )


def raise_nofile() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        target = _read_int(NR_OPEN_PATH, soft)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, target, exc)
    return soft


def read_max_map_count() -> int:
    return _read_int(MAX_MAP_COUNT_PATH, DEFAULT_MAX_MAP_COUNT)


def _read_int(path: Path, default: int) -> int:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return default


def apply(config: BrokerConfig) -> Limits:
    """Raise the descriptor limit, derive the budget, size the process's caches."""
    limits = derive(config, raise_nofile(), read_max_map_count())
    if limits.nofile - config.fd_reserve < MIN_OPEN_FILES:
        log.warning(
            "RLIMIT_NOFILE %d leaves %d descriptors past fd_reserve %d: keeping %d files "
            "open anyway; raise the limit (ulimit -n)",
            limits.nofile,
            limits.nofile - config.fd_reserve,
            config.fd_reserve,
            MIN_OPEN_FILES,
        )
    handles.configure(limits.open_files, limits.segment_maps)
    if limits.connection_fds < config.max_connections:
        log.warning(
            "RLIMIT_NOFILE %d leaves descriptors for %d connections, fewer than "
            "max_connections %d: raise the limit (ulimit -n) or lower max_connections",
            limits.nofile,
            limits.connection_fds,
            config.max_connections,
        )
    log.info(
        "file budget: RLIMIT_NOFILE %d, %d active files open at most, %d segment maps, "
        "up to %d partitions (vm.max_map_count %d)",
        limits.nofile,
        limits.open_files,
        limits.segment_maps,
        limits.max_partitions,
        limits.max_map_count,
    )
    return limits
