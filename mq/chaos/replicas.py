"""Every replica's batches, read straight from its segment files (read-only).

The divergence check compares replicas byte for byte up to the high
watermark, so it must see what is on disk, not what a recovery would make of
it: :func:`read_batches` walks a partition directory's ``*.log`` files with
the batch header layout of :mod:`mq.records.batch` and never writes (opening
a :class:`~mq.storage.log.Log` could truncate a damaged tail). A batch is
taken by its length field, unchecked: a flipped bit is a difference, not an
error. The brokers should be stopped (or quiet) while this reads.
"""

from __future__ import annotations

from pathlib import Path

from mq.chaos.history import ReplicaImages
from mq.records.batch import HEADER_SIZE, LOG_OVERHEAD, parse_header

MAX_REPLICA_BYTES = 1 << 30
"""Bytes read from one replica at most: a chaos run writes megabytes; more is a
runaway, and reading it into memory three times would not end well."""


def read_batches(directory: Path, high_watermark: int) -> bytes:
    """The batches of one replica whose base offset is below ``high_watermark``, back
    to back (stops at padding, a partial batch or a nonsensical length)."""
    out = bytearray()
    for segment in sorted(directory.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + HEADER_SIZE <= len(data):
            header = parse_header(data, pos)
            size = header.batch_length + LOG_OVERHEAD
            if header.batch_length <= 0 or pos + size > len(data):
                break  # padding of a preallocated segment, or a cut batch
            if header.base_offset >= high_watermark:
                return bytes(out)
            out += data[pos : pos + size]
            if len(out) > MAX_REPLICA_BYTES:
                raise ValueError(f"{directory}: more than {MAX_REPLICA_BYTES} bytes of batches")
            pos += size
    return bytes(out)


def collect(
    node_dirs: dict[int, Path], high_watermarks: dict[tuple[str, int], int]
) -> ReplicaImages:
    """The images of the given partitions on every node, each up to that partition's
    high watermark: the workload topics have a replica on every node (RF 3 on 3
    brokers), so a node without the directory is an empty, diverged replica."""
    images = ReplicaImages(high_watermarks=dict(high_watermarks))
    for (topic, partition), hw in sorted(high_watermarks.items()):
        per_node: dict[int, bytes] = {}
        for node, base in sorted(node_dirs.items()):
            directory = base / f"{topic}-{partition}"
            per_node[node] = read_batches(directory, hw) if directory.is_dir() else b""
        images.images[(topic, partition)] = per_node
    return images
