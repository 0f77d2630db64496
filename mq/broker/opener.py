"""Opens partition logs off the event loop, a bounded chunk at a time (issue 18).

Opening a new partition's log makes its files: the directory, the
``partition.metadata`` marker, the first segment and its indexes, the recovery
checkpoint (two fsyncs) and the producer snapshot. On the event loop, a
``create_topics`` of 1,000 partitions stalled every client for seconds. Here
the :class:`~mq.broker.replicas.ReplicaManager` queues each partition to open
(:meth:`PartitionOpener.submit`); one task takes :data:`OPEN_CHUNK` of them at
a time and opens their logs in :data:`OPEN_THREADS` worker threads (one job per
thread per chunk), then hands
each opened log back on the event loop, where the replica manager registers
the partition and gives it its role from the view as it is by then.

Ordering guarantees:

* a partition is not in ``broker.partitions`` (so not served: a request gets
  NOT_LEADER_OR_FOLLOWER, retriable) before its files exist;
* :meth:`PartitionOpener.opening` says whether a topic still has partitions
  queued or in progress, so a ``create_topics`` answers only once they are
  open (:meth:`~mq.broker.broker.Broker.create_topic` waits for it);
* a partition is opened once: a reconcile that finds it queued does nothing
  (the one after the open applies the view's latest state).

Thread safety: :meth:`submit`, :meth:`opening` and :meth:`stop` run on the
event loop; only :func:`_open_logs` runs in the worker threads (file system
calls and a fresh :class:`~mq.storage.log.Log` no other thread sees yet).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path
from typing import NamedTuple

from mq.errors import StorageError
from mq.records.encryption import Keyring
from mq.replication.cluster_state import TopicRecord
from mq.storage.checkpoint import read_high_watermark
from mq.storage.config import LogConfig
from mq.storage.log import Log

log = logging.getLogger(__name__)

OPEN_CHUNK = 8
"""Partitions opened per round before the results go back to the event loop. Each
open costs a few hundred microseconds of the loop when its partition is registered
(its checkpoint read, role, writer task), so a chunk keeps that under ~10 ms, and
the chunk's partitions become servable together instead of all at the end."""
OPEN_THREADS = 2
"""Worker threads that make a chunk's files at once: most of an open is fsyncs
(the checkpoint, the directory), which release the GIL and which a disk merges
when several are in flight; more threads would only queue on the same disk."""
TOPIC_ID_FILE = "partition.metadata"

Key = tuple[str, int]


class OpenedLog(NamedTuple):
    log: Log
    high_watermark: int
    """Its high watermark checkpoint (0 if none)."""


Opened = Callable[[TopicRecord, int, "OpenedLog | Exception"], None]


class PartitionOpener:
    """A queue of partitions to open, opened in worker threads a chunk at a time."""

    def __init__(self, data_dir: Path, on_opened: Opened, keyring: Keyring | None) -> None:
        self._data_dir = data_dir
        self._keyring = keyring
        """Encryption at rest: the logs seal and open batches with it (None: plain)."""
        self._on_opened = on_opened
        self._queue: dict[Key, tuple[TopicRecord, LogConfig]] = {}
        """Partitions waiting to open, in submission order."""
        self._in_progress: set[Key] = set()
        self._topics: Counter[str] = Counter()
        """Partitions queued or in progress, per topic."""
        self._task: asyncio.Task[None] | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._stopping = False

    def __len__(self) -> int:
        return len(self._queue) + len(self._in_progress)

    def __contains__(self, key: Key) -> bool:
        return key in self._queue or key in self._in_progress

    def opening(self, topic: str) -> bool:
        """Whether partitions of ``topic`` are queued or being opened (O(1))."""
        return self._topics[topic] > 0

    def submit(self, topic: TopicRecord, index: int, config: LogConfig) -> None:
        """Queue ``topic-index`` to open (nothing if it is queued or opening already)."""
        key = (topic.name, index)
        if key in self or self._stopping:
            return
        self._queue[key] = (topic, config)
        self._topics[topic.name] += 1
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="open-logs")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        if self._threads is None:
            self._threads = ThreadPoolExecutor(OPEN_THREADS, thread_name_prefix="mq-open")
        while self._queue and not self._stopping:
            chunk = []
            for key in list(islice(self._queue, OPEN_CHUNK)):  # O(chunk), not O(queue)
                chunk.append((key, *self._queue.pop(key)))
                self._in_progress.add(key)
            # one job per thread (every OPEN_THREADS-th partition of the chunk), not one
            # per partition: a thread hand-off each cost the loop a future and a wake-up
            jobs = [
                loop.run_in_executor(
                    self._threads,
                    _open_logs,
                    self._data_dir,
                    [(topic, key[1], config) for key, topic, config in chunk[n::OPEN_THREADS]],
                    self._keyring,
                )
                for n in range(min(OPEN_THREADS, len(chunk)))
            ]
            done = await asyncio.gather(*jobs, return_exceptions=True)
            per_job: list[list[OpenedLog | Exception] | list[BaseException]] = [
                # a bug in a job: each of its partitions fails with it
                [opened] * len(chunk[n::OPEN_THREADS])
                if isinstance(opened, BaseException)
                else opened
                for n, opened in enumerate(done)
            ]
            results = [per_job[i % OPEN_THREADS][i // OPEN_THREADS] for i in range(len(chunk))]
            for (key, topic, _), result in zip(chunk, results, strict=True):
                self._in_progress.discard(key)
                self._topics[key[0]] -= 1
                if self._topics[key[0]] <= 0:
                    del self._topics[key[0]]
                if isinstance(result, BaseException) and not isinstance(result, Exception):
                    raise result
                try:
                    self._on_opened(topic, key[1], result)
                except Exception:  # one partition's bug must not strand the queue
                    log.exception("%s-%d: registering the opened log failed", *key)

    async def stop(self) -> None:
        """Finish the chunk in progress (its logs are handed over, then closed with the
        broker's partitions) and drop the rest of the queue."""
        self._stopping = True
        for key in self._queue:
            self._topics[key[0]] -= 1
        self._queue.clear()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if self._threads is not None:
            self._threads.shutdown(wait=True)
            self._threads = None


def _open_logs(
    data_dir: Path, logs: list[tuple[TopicRecord, int, LogConfig]], keyring: Keyring | None
) -> list[OpenedLog | Exception]:
    """Open each of ``logs`` in turn (in a worker thread): its log or its error."""
    results: list[OpenedLog | Exception] = []
    for topic, index, config in logs:
        try:
            results.append(_open_log(data_dir, topic, index, config, keyring))
        except Exception as exc:  # that partition stays offline; the others open
            results.append(exc)
    return results


def _open_log(
    data_dir: Path, topic: TopicRecord, index: int, config: LogConfig, keyring: Keyring | None
) -> OpenedLog:
    """Make (or recover) ``topic-index``'s files and open its log, and read its high
    watermark checkpoint: in a worker thread."""
    directory = data_dir / f"{topic.name}-{index}"
    try:
        claim(directory, topic.topic_id)
        opened = Log.open(directory, config, keyring=keyring)
        return OpenedLog(opened, read_high_watermark(directory) or 0)
    except OSError as exc:
        raise StorageError(f"{directory}: {exc}") from exc


def claim(directory: Path, topic_id: str) -> None:
    """Make ``directory`` this topic's: one of an older topic of that name is removed."""
    marker = directory / TOPIC_ID_FILE
    if directory.exists():
        try:
            found = marker.read_text().strip()
        except FileNotFoundError:
            found = topic_id  # from before topic ids were written: adopt it
        if found != topic_id:
            log.warning("removing %s: left by an older topic of that name", directory.name)
            shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        try:
            marker.write_text(topic_id + "\n")
        except OSError as exc:
            raise StorageError(f"cannot write {marker}: {exc}") from exc
