"""The embedded metadata store writes its file off the event loop, and once per burst
of commits, not once per commit (issue 18, F5: ``metadata.json`` was rewritten
synchronously, on the loop, per entry of an alter_configs)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from mq.replication.cluster_state import (
    ClusterView,
    PartitionState,
    TopicRecord,
    create_topic,
)
from mq.replication.local_store import LocalStore
from mq.replication.membership import campaign
from mq.replication.store import Put
from mq.storage.fileio import FileIO


class CountingIO(FileIO):
    """Counts whole-file writes and notes the threads that make them."""

    def __init__(self) -> None:
        self.writes = 0
        self.threads: set[int] = set()

    def write_file_atomic(self, path: Path, data: bytes, *, durable: bool = True) -> None:
        self.writes += 1
        self.threads.add(threading.get_ident())
        super().write_file_atomic(path, data, durable=durable)


async def test_the_file_is_written_in_a_worker_thread(tmp_path: Path) -> None:
    io = CountingIO()
    store = LocalStore(tmp_path / "metadata.json", io=io)
    await store.start()
    await store.put("/a", b"1")
    await store.close()
    assert io.writes == 1
    assert threading.get_ident() not in io.threads


async def test_concurrent_commits_share_writes_and_all_are_durable(tmp_path: Path) -> None:
    io = CountingIO()
    store = LocalStore(tmp_path / "metadata.json", io=io)
    await store.start()
    revisions = await asyncio.gather(*(store.commit([], [Put(f"/k{i}", b"v")]) for i in range(50)))
    await store.close()
    assert sorted(r for r in revisions if r is not None) == list(range(1, 51))
    assert io.writes <= 2  # the first commit's write, then one for the 49 that came meanwhile
    reopened = LocalStore(tmp_path / "metadata.json")
    await reopened.start()
    entries, revision = await reopened.get_prefix("/k")
    assert revision == 50
    assert len(entries) == 50
    await reopened.close()


async def test_the_configs_of_many_topics_are_one_transaction(tmp_path: Path) -> None:
    from mq.replication.cluster_state import update_topics_configs  # the API this test is about

    io = CountingIO()
    store = LocalStore(tmp_path / "metadata.json", io=io)
    await store.start()
    controller = await campaign(store, 1, await store.grant_lease(10_000))
    assert controller is not None
    names = [f"t{i}" for i in range(40)]
    for name in names:
        await create_topic(
            store, controller, TopicRecord(name, name, 1), [PartitionState.new((1,))]
        )
    writes = io.writes
    wanted = {name: {"retention.ms": "1000"} for name in names} | {"gone": {}}
    revision, failures = await update_topics_configs(store, controller, wanted)
    assert io.writes == writes + 1
    assert list(failures) == ["gone"]
    view = await ClusterView.load(store)
    assert all(view.topics[name].configs == {"retention.ms": "1000"} for name in names)
    assert revision == (await store.get_prefix("/"))[1]
    await store.close()
