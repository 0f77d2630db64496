"""The share-state partition leader's fence (:meth:`ShareStateStore.admit`): a save or a
fence of a share partition is refused once a later leader epoch was admitted for it, or
once this broker's view shows the data partition in a later epoch."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgpack
import pytest

from mq.broker.share_store import EPOCH_HEADER, TOPIC_ID_HEADER, ShareKey, ShareStateStore
from mq.errors import FencedLeaderEpochError
from mq.records.records import build_batch
from mq.replication.cluster_state import ClusterView, TopicRecord
from mq.replication.placement import PartitionState

KEY = ShareKey("jobs", "jobs", 0)


def batch(epoch: int, *, fence: bool = False, topic_id: str = "t1") -> bytes:
    value: dict[str, Any] = {"topic_id": topic_id, "epoch": epoch}
    value.update({"fence": True} if fence else {"state": {"start": 0, "runs": []}})
    key = KEY.encode_fence() if fence else KEY.encode()
    return build_batch([(key, msgpack.packb(value), [], 0)])


def store(view_epoch: int | None = None) -> ShareStateStore:
    view = ClusterView()
    if view_epoch is not None:
        view.topics["jobs"] = TopicRecord("jobs", "t1", 1)
        view.partitions[("jobs", 0)] = PartitionState((1, 2), 1, view_epoch, (1, 2))
    return ShareStateStore(SimpleNamespace(view=view))  # type: ignore[arg-type]


def test_a_fence_shuts_out_the_saves_of_earlier_epochs() -> None:
    states = store()
    states.admit(batch(3))
    states.admit(batch(4, fence=True))  # the new leader loads
    states.admit(batch(4))
    with pytest.raises(FencedLeaderEpochError):
        states.admit(batch(3))  # the deposed leader's late save
    with pytest.raises(FencedLeaderEpochError):
        states.admit(batch(3, fence=True))


def test_the_view_of_the_data_partition_fences_too() -> None:
    states = store(view_epoch=5)
    with pytest.raises(FencedLeaderEpochError):
        states.admit(batch(4))
    states.admit(batch(5))
    states.admit(batch(6))  # the view may lag the controller


def test_a_new_incarnation_of_the_topic_starts_its_epochs_afresh() -> None:
    states = store()
    states.admit(batch(7, topic_id="old"))
    states.admit(batch(0, topic_id="t1"))


def test_a_refused_batch_admits_none_of_its_records() -> None:
    states = store()
    states.admit(batch(2))
    with pytest.raises(FencedLeaderEpochError):
        states.admit(batch(9, fence=True) + batch(1))
    states.admit(batch(8))  # the fence at 9 was not remembered


def test_the_epoch_is_read_from_the_headers_without_decoding_the_state() -> None:
    states = store()
    headers = [(TOPIC_ID_HEADER, b"t1"), (EPOCH_HEADER, b"6")]
    states.admit(build_batch([(KEY.encode(), b"\xc1 not msgpack", headers, 0)]))
    with pytest.raises(FencedLeaderEpochError):
        states.admit(batch(5))


def keyed_batch(key: ShareKey, epoch: int, topic_id: str = "t1") -> bytes:
    value = {"topic_id": topic_id, "epoch": epoch, "state": {"start": 0, "runs": []}}
    return build_batch([(key.encode(), msgpack.packb(value), [], 0)])


def test_epochs_the_view_already_covers_are_not_remembered() -> None:
    """Issue 18, F7: the table used to keep one entry per share partition ever saved."""
    states = store(view_epoch=5)
    for group in range(1_000):
        states.admit(keyed_batch(ShareKey(f"g{group}", "jobs", 0), 5))
    assert len(states._epochs) == 0
    states.admit(keyed_batch(ShareKey("ahead", "jobs", 0), 6))  # the view lags: kept
    assert len(states._epochs) == 1
    with pytest.raises(FencedLeaderEpochError):  # and the view still fences the rest
        states.admit(keyed_batch(ShareKey("g1", "jobs", 0), 4))


def test_remembered_epochs_are_bounded_oldest_first() -> None:
    states = ShareStateStore(SimpleNamespace(view=ClusterView()), max_fence_entries=100)  # type: ignore[arg-type]
    for group in range(1_000):  # the view knows none of them: each is remembered
        states.admit(keyed_batch(ShareKey(f"g{group}", "jobs", 0), 3))
    assert len(states._epochs) <= 100
    assert (ShareKey("g999", "jobs", 0), "t1") in states._epochs  # the newest stay
    with pytest.raises(FencedLeaderEpochError):
        states.admit(keyed_batch(ShareKey("g999", "jobs", 0), 2))
