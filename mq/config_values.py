"""Strict parsing of numeric settings, shared by topic, queue and broker configs.

Config values arrive as strings (topic configs over the wire, Kafka-style) or as
TOML numbers (the broker's file). Python's ``int()`` is lenient where a config
must not be: it takes other scripts' digits (``"١٢"``), underscores and spaces,
and a ``"²"`` made it raise an error no handler expected (UNKNOWN_SERVER_ERROR).
Here only ASCII digits pass, each value is checked against its range, and the
error (INVALID_CONFIG) names the key and the range.
"""

from __future__ import annotations

import re

from mq.errors import InvalidConfigError

_INTEGER = re.compile(r"-?[0-9]{1,19}")
"""ASCII digits only: ``int()`` also takes ``"²"``-like characters' cousins (other
scripts' digits), underscores and spaces, none of which a config should hold."""
_DECIMAL = re.compile(r"[0-9]{1,19}(\.[0-9]{1,19})?")


def parse_int(key: str, value: object, low: int, high: int, *, unlimited: bool = False) -> int:
    """``value`` (an int, or a string of ASCII digits) as an int in ``[low, high]``
    (or -1 if ``unlimited``); InvalidConfigError naming the key and the range."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _INTEGER.fullmatch(value):
        number = int(value)
    else:
        number = None
    if number is None or not (low <= number <= high or (unlimited and number == -1)):
        extra = " (or -1: no limit)" if unlimited else ""
        raise InvalidConfigError(
            f"{key} must be an integer from {low} to {high}{extra}, got {value!r}"
        )
    return number


def parse_ratio(key: str, value: object) -> float:
    """``value`` as a number in [0, 1] (ASCII digits and one point)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number: float | None = float(value)
    elif isinstance(value, str) and _DECIMAL.fullmatch(value):
        number = float(value)
    else:
        number = None
    if number is None or not 0 <= number <= 1:
        raise InvalidConfigError(f"{key} must be a number from 0 to 1, got {value!r}")
    return number
