"""The cyclic garbage collector tuned for a broker: full collections rare and small.

CPython's collector stops the interpreter while it runs, and a full (generation
2) collection walks every tracked container in the process. A broker's heap
right after start is ~53,000 such objects (modules, classes, functions), and a
request at its list bounds adds up to a few hundred thousand while it is served
(a metadata answer for 100,000 names is 100,000 dicts and lists). With Python's
defaults, ``(700, 10, 10)``, a full collection runs after every ~70,000 net
allocations once the survivors grew by a quarter: ten metadata requests for
100,000 unknown names caused 23-34 full collections of 80-110 ms each, every one
of them a stall for every client of the broker (issue 18's isolation benchmark:
a fresh connection's ``api_versions`` waited up to 140 ms). Two changes, both
what long-running Python servers commonly do:

* :func:`settle` freezes the heap the broker built while starting
  (``gc.freeze()``, after a collection): those objects are never walked again.
  Objects made later are collected as usual; frozen ones that later become
  cyclic garbage are not (the start-up heap lives as long as the process);
* generation 2 is collected every :data:`FULL_COLLECTION_EVERY` collections of
  generation 1 instead of 10 (``gc_full_collection_every``). Young cycles still
  die in the cheap young collections; only cycles that survive two of those
  wait longer (and are bounded by the survivors' own growth rule).

Measured on the reference VM (a connection sending ``api_versions`` every 2 ms
while ten such requests run, one after another): full collections 34 → 2, the probe's worst wait 126 → 43 ms for
metadata and 92 → 22 ms for ``alter_configs``.

Process-wide: ``mq serve`` calls :func:`settle` once it listens, unless its
``gc_full_collection_every`` is 0 (a broker embedded in another program leaves
that program's collector alone).
"""

from __future__ import annotations

import gc
from typing import Final

FULL_COLLECTION_EVERY: Final = 100
"""Generation-1 collections between two full ones (Python's default: 10)."""

applied: tuple[int, int, int] | None = None
"""The thresholds :func:`settle` set in this process, None until it ran."""


def settle(full_collection_every: int = FULL_COLLECTION_EVERY) -> int:
    """Collect, freeze what survives (the start-up heap), and set generation 2's
    threshold; returns how many objects were frozen."""
    global applied
    if full_collection_every < 1:
        raise ValueError("full_collection_every must be >= 1")
    gc.collect()
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, full_collection_every)
    applied = (young, middle, full_collection_every)
    return gc.get_freeze_count()
