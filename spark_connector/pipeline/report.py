"""The per-window stats as a text table, for the terminal. Pure."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from spark_connector.pipeline.events import WindowStats

SORTS: Final[dict[str, Callable[[WindowStats], tuple[object, ...]]]] = {
    "window": lambda s: (s.window_start, s.path),
    "error_rate": lambda s: (-s.error_rate, -s.errors, s.window_start, s.path),
    "errors": lambda s: (-s.errors, s.window_start, s.path),
    "requests": lambda s: (-s.requests, s.window_start, s.path),
    "latency": lambda s: (-s.avg_latency_ms, s.window_start, s.path),
}
"""Orders for :func:`table`: by window, or worst first."""
_HEADER: Final = (
    "window (UTC)",
    "path",
    "requests",
    "4xx",
    "5xx",
    "5xx rate",
    "bytes",
    "avg ms",
    "max ms",
)


def table(stats: Sequence[WindowStats], sort: str = "window", limit: int | None = None) -> str:
    """``stats`` as aligned columns, sorted by ``sort`` (a key of SORTS), at most ``limit``."""
    ordered = sorted(stats, key=SORTS[sort])
    shown = ordered if limit is None else ordered[:limit]
    rows = [_HEADER] + [
        (
            f"{s.window_start:%Y-%m-%d %H:%M}-{s.window_end:%H:%M}",
            s.path,
            f"{s.requests:,}",
            f"{s.client_errors:,}",
            f"{s.errors:,}",
            f"{s.error_rate:.1%}",
            _size(s.bytes),
            f"{s.avg_latency_ms:.1f}",
            f"{s.max_latency_ms:,}",
        )
        for s in shown
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = [
        "  ".join(
            cell.ljust(width) if i < 2 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    if len(shown) < len(ordered):
        lines.append(f"... and {len(ordered) - len(shown)} more")
    return "\n".join(lines)


def _size(count: int) -> str:
    """1536 as ``1.5 KB``: readable at a glance (the exact count is in the data)."""
    if count < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KB", "MB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"
