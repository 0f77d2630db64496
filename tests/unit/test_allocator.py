"""mq.allocator: glibc keeps freed memory once told to, and only then.

Each case runs in a fresh interpreter (the setting is process-wide): 64 MiB of
256 KiB buffers are filled and freed, and the resident set tells whether the
pages went back to the kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mq import allocator

SCRIPT = """
import sys
from mq.allocator import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "tune" else False
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
before = rss()
blocks = [bytearray(256 * 1024) for _ in range(256)]
for b in blocks:
    b[::4096] = b"x" * len(b[::4096])
del blocks
print(applied, (rss() - before) // (1024 * 1024))
"""

glibc = pytest.mark.skipif(allocator._glibc() is None, reason="not glibc")


def kept_mib(mode: str, **env: str) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0] == "True", int(out[1])


@glibc
def test_freed_buffers_stay_with_the_process_only_when_tuned() -> None:
    applied, kept = kept_mib("tune")
    assert applied
    assert kept >= 48  # of the 64 MiB freed
    applied, kept = kept_mib("default")
    assert not applied
    assert kept <= 16  # glibc's defaults: back to the kernel


@glibc
def test_the_environment_can_opt_out() -> None:
    applied, kept = kept_mib("tune", MQ_MALLOC_TUNING="0")
    assert not applied
    assert kept <= 16


def test_thresholds_are_byte_counts() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        allocator.keep_freed_memory(-1)
