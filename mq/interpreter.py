"""The interpreter tuned for a broker: full collections rare and small, the GIL handed
back to the event loop sooner.

**The collector.**

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
while ten such requests run, one after another): full collections 34 → 2, the
probe's worst wait 126 → 43 ms for metadata and 92 → 22 ms for ``alter_configs``.

**The GIL.** Big frames are decoded and encoded in the codec thread
(:mod:`mq.broker.pacing`), in pure Python for the most part, so that thread and
the event loop's take turns with the GIL: a thread that wants it waits until the
holder has run for ``sys.getswitchinterval()``, 5 ms by default, and a quiet
client's request needs the loop's thread several times (read, handle, append,
answer). :data:`SWITCH_INTERVAL_US` (``gil_switch_interval_us``) makes each turn
1 ms. It costs nothing while a single thread runs (the interval only matters
when another thread asks for the GIL). Measured with the isolation benchmark's
huge lists (same machine, alternating runs of 5 ms and 1 ms): the quiet client's
p50 14.1-14.3 → 4.7 ms and p99 53-54 → 34 ms; 0.5 and 0.2 ms gave the same p99.

What it costs the others: nothing measurable. ``benchmarks.interpreter_tuning
--interleaved 300`` (W1 ``send()``, per-chunk paired ratios, tuned over Python's
defaults): msg/s 1.009 and broker CPU 0.993, against 1.001 and 0.986 for two
untuned brokers; with ``--many`` (``send_many``, 200 chunks): 1.006 and 1.002,
against 1.012 and 0.991.

Process-wide: ``mq serve`` calls :func:`settle` once it listens (a broker
embedded in another program leaves that program's interpreter alone); 0 in
either setting leaves Python's default for it.
"""

from __future__ import annotations

import gc
import sys
from typing import Final

FULL_COLLECTION_EVERY: Final = 100
"""Generation-1 collections between two full ones (Python's default: 10)."""
SWITCH_INTERVAL_US: Final = 1_000
"""How long a thread holds the GIL while another waits for it (Python's default: 5,000)."""


def settle(
    full_collection_every: int = FULL_COLLECTION_EVERY, switch_interval_us: int = SWITCH_INTERVAL_US
) -> int:
    """Collect, freeze what survives (the start-up heap) and set generation 2's threshold
    (unless ``full_collection_every`` is 0); set the GIL's switch interval (unless
    ``switch_interval_us`` is 0). Returns how many objects are frozen."""
    if full_collection_every < 0 or switch_interval_us < 0:
        raise ValueError("full_collection_every and switch_interval_us must be >= 0")
    if full_collection_every:
        gc.collect()
        gc.freeze()
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, full_collection_every)
    if switch_interval_us:
        sys.setswitchinterval(switch_interval_us / 1_000_000)
    return gc.get_freeze_count()
