"""What a partition leader knows of its followers: their log ends, the ISR, the high watermark.

Kafka's rules, as pure bookkeeping (the caller passes the clock):

* a follower's **log end offset** is the offset of its latest fetch (it asks
  for what it does not have yet);
* a follower is **caught up** at the time of a fetch that asked for the
  leader's log end, or — the leader having moved on meanwhile — for at least
  the log end the leader had at the follower's previous fetch: it was caught up
  when it sent that previous one. An ISR member not caught up for
  ``lag_max_ms`` is a candidate to leave the ISR;
* a follower outside the ISR is a candidate to rejoin once it has every
  message below the high watermark and is fetching in the current leader
  epoch (it asked at or after the offset where the epoch began);
* the **high watermark** is the smallest log end over the ISR (the leader's
  own included) and never goes back. It only counts ISR changes once the
  metadata store has them (:meth:`set_isr`), so a follower about to be dropped
  still holds it until then: an acknowledged message is on every replica the
  store says is in sync.

No I/O: the partition owns one of these while it leads and turns the
candidates into compare-and-swap writes of its state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

UNKNOWN = -1


@dataclass
class FollowerState:
    log_end: int = UNKNOWN
    caught_up_ms: float = 0.0
    """When it was last known to have everything the leader had."""
    last_fetch_ms: float = 0.0
    leader_end_at_last_fetch: int = UNKNOWN


class ReplicaTracker:
    """The leader's view of one partition's replicas during one leader epoch."""

    def __init__(
        self,
        leader: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        *,
        leader_end: int,
        high_watermark: int,
        epoch_start: int,
        now_ms: float,
    ) -> None:
        self.leader = leader
        self.isr = frozenset(isr) | {leader}
        self.leader_end = leader_end
        self.high_watermark = min(high_watermark, leader_end)
        self.epoch_start = epoch_start
        """The leader's log end when it took this epoch: followers fetching below it may
        hold another leader's data there and must be checked before they rejoin."""
        # everyone gets a full lag period from the election before counting as lagging
        self.followers = {r: FollowerState(caught_up_ms=now_ms) for r in replicas if r != leader}
        self._advance()

    # -- inputs ----------------------------------------------------------------------------

    def leader_appended(self, leader_end: int) -> bool:
        """The leader's log now ends at ``leader_end``; whether the high watermark moved."""
        self.leader_end = max(self.leader_end, leader_end)
        return self._advance()

    def leader_truncated(self, leader_end: int) -> None:
        self.leader_end = leader_end
        self.high_watermark = min(self.high_watermark, leader_end)

    def follower_fetched(self, node: int, fetch_offset: int, now_ms: float) -> bool:
        """A follower fetched from ``fetch_offset``; whether the high watermark moved."""
        state = self.followers.get(node)
        if state is None:
            return False
        if fetch_offset >= self.leader_end:
            state.caught_up_ms = now_ms
        elif fetch_offset >= state.leader_end_at_last_fetch >= 0:
            state.caught_up_ms = max(state.caught_up_ms, state.last_fetch_ms)
        state.log_end = fetch_offset
        state.last_fetch_ms = now_ms
        state.leader_end_at_last_fetch = self.leader_end
        return self._advance()

    def set_isr(self, isr: Iterable[int], replicas: Iterable[int], now_ms: float) -> bool:
        """The metadata store has a new ISR (or replica set); whether the high watermark moved."""
        self.isr = frozenset(isr) | {self.leader}
        wanted = {r for r in replicas if r != self.leader}
        for node in wanted - self.followers.keys():
            self.followers[node] = FollowerState(caught_up_ms=now_ms)
        for node in self.followers.keys() - wanted:
            del self.followers[node]
        return self._advance()

    # -- decisions -------------------------------------------------------------------------

    def lagging(self, now_ms: float, lag_max_ms: float) -> set[int]:
        """ISR followers that have not caught up for ``lag_max_ms``: they should leave."""
        return {
            node
            for node, state in self.followers.items()
            if node in self.isr and now_ms - state.caught_up_ms > lag_max_ms
        }

    def caught_up(self) -> set[int]:
        """Followers outside the ISR that have everything below the high watermark."""
        return {
            node
            for node, state in self.followers.items()
            if node not in self.isr
            and state.log_end >= self.high_watermark
            and state.log_end >= self.epoch_start
        }

    def _advance(self) -> bool:
        ends = [self.leader_end]
        for node in self.isr:
            if node != self.leader:
                state = self.followers.get(node)
                ends.append(state.log_end if state is not None else UNKNOWN)
        candidate = min(ends)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False
