"""mq.interpreter: once settled, a full collection walks only what was made after start,
and a thread waiting for the GIL gets it sooner.

Each case runs in a fresh interpreter (the collector is process-wide): the
broker's modules are imported and a broker object built, as ``mq serve`` does
before it settles the heap.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from mq import interpreter

SCRIPT = """
import gc, sys
from pathlib import Path
from mq import interpreter
from mq.broker.broker import Broker
from mq.broker.config import BrokerConfig
from mq.broker.server import Server
server = Server(Broker(BrokerConfig(data_dir=Path(sys.argv[2]))))
before = len(gc.get_objects())
frozen = interpreter.settle(int(sys.argv[1]), int(sys.argv[3]))
young = [object() for _ in range(10)]  # made after: still the collector's
after = len(gc.get_objects())
print(before, frozen, after, *gc.get_threshold(), round(sys.getswitchinterval() * 1e6))
"""


def settled(every: int, data_dir: str, switch_us: int) -> list[int]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(every), data_dir, str(switch_us)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [int(n) for n in out]


def test_the_start_up_heap_is_frozen_and_full_collections_are_rarer(tmp_path: object) -> None:
    before, frozen, after, young, middle, full, switch_us = settled(100, str(tmp_path), 1_000)
    assert before > 20_000  # modules, classes, functions: what every full collection walked
    assert frozen >= before * 0.9
    assert after < 1_000  # what a full collection walks now
    assert (young, middle, full, switch_us) == (700, 10, 100, 1_000)


def test_zero_leaves_pythons_defaults(tmp_path: object) -> None:
    before, frozen, after, young, middle, full, switch_us = settled(0, str(tmp_path), 0)
    assert frozen == 0
    assert after >= before
    assert (young, middle, full, switch_us) == (700, 10, 10, 5_000)


def test_every_bound_is_checked() -> None:
    with pytest.raises(ValueError, match="full_collection_every"):
        interpreter.settle(-1)
