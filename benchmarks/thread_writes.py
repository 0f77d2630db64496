"""What copying big appends in a thread costs: W1 and W3 with and without it, side by side.

Appends of ``thread_write_bytes`` (128 KiB) or more are copied into their segment
in the writers' blocking-call thread, so that the event loop serves other clients
meanwhile (:mod:`mq.storage.steps`; the noisy-neighbour benchmark shows what that
buys). This measures what it costs throughput: two broker processes at once,
``loop`` (``thread_write_bytes = 0``: every append copied on the loop) and
``thread`` (the default), with :mod:`benchmarks.ab`'s methods. Only appends of
128 KiB or more take the thread: W1 ``send()`` (16 KiB batches) never does, W1
``send_many`` (256 KiB batches) always does, so ``--interleaved CHUNKS --many`` is
the measurement that matters.

Usage::

    python -m benchmarks.thread_writes [--messages N] [--runs N]
        [--interleaved CHUNKS [--many]] [--size BYTES] [--json]
"""

from __future__ import annotations

import argparse
import sys

from benchmarks import ab

ON_THE_LOOP = "thread_write_bytes = 0\n"
NAMES = ("loop", "thread")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ab.add_arguments(parser)
    parser.add_argument("--many", action="store_true", help="interleaved: W1 send_many")
    args = parser.parse_args(argv)
    result = ab.config_cost(
        ON_THE_LOOP, NAMES, args.messages, args.size, args.runs, args.interleaved, args.many
    )
    return ab.report_either(result, NAMES, args.json)


if __name__ == "__main__":
    sys.exit(main())
