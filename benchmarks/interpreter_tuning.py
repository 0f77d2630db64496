"""What the broker's interpreter tuning costs: W1 and W3 with and without it, side by side.

:mod:`mq.interpreter` freezes the broker's start-up heap, collects generation 2
ten times less often and makes the GIL's switch interval 1 ms instead of 5
(``gc_full_collection_every``, ``gil_switch_interval_us``). It is there for the
isolation benchmark's latency under greedy clients; this measures what it costs
the throughput of everyone else. Two broker processes run at once: ``tuned`` (the
defaults) and ``python`` (both settings 0: Python's own collector and interval),
alternating W1 ``send()``, W1 ``send_many`` and W3 on a new topic
(:mod:`benchmarks.ab`: medians of paired ratios of msg/s and broker CPU per
message). ``--interleaved CHUNKS``: W1 ``send()`` only (``--many``: ``send_many``),
in chunks sent to each broker in turn, with a second ``python`` broker as the
control, the method that tells a few per cent apart on this machine (whole
alternating runs of ``send_many`` differed by 0.79-1.15 between two equal brokers).
Usage::

    python -m benchmarks.interpreter_tuning [--messages N] [--runs N]
        [--interleaved CHUNKS [--many]] [--json]
"""

from __future__ import annotations

import argparse
import sys

from benchmarks import ab

UNTUNED = "gc_full_collection_every = 0\ngil_switch_interval_us = 0\n"
NAMES = ("python", "tuned")


def measure(
    messages: int, size: int, runs: int, chunks: int = 0, many: bool = False
) -> list[ab.Comparison] | ab.Interleaved:
    return ab.config_cost(UNTUNED, NAMES, messages, size, runs, chunks, many)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ab.add_arguments(parser)
    parser.add_argument("--many", action="store_true", help="interleaved: W1 send_many")
    parser.add_argument("--quick", action="store_true", help="20,000 messages, 2 runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.runs = 20_000, 2
    result = measure(args.messages, args.size, args.runs, args.interleaved, args.many)
    return ab.report_either(result, NAMES, args.json)


if __name__ == "__main__":
    sys.exit(main())
