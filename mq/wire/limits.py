"""Every bound of the native protocol, each with the reason for its value.

A receiver checks these before it allocates or loops: the frame length before
buffering a frame, msgpack's container and string lengths while unpacking, the
schemas' list and string bounds while validating a body. A request that
breaks one is rejected with a clear error; none can make a broker allocate
without limit.
"""

from __future__ import annotations

import re

from mq.errors import InvalidTopicError

MiB = 1 << 20

# -- frames ---------------------------------------------------------------------

FRAME_HEADER_BYTES = 4
"""The big-endian unsigned length prefix in front of every msgpack payload."""

MAX_FRAME_BYTES = 100 * MiB
"""Default bound on one frame's payload: Kafka's ``socket.request.max.bytes``
(104857600). It caps a produce request (all of its batches) and a fetch
response; a broker or client may configure a lower bound per connection."""

MAX_DECODED_ITEMS = 1_000_000
"""Bound on the array elements plus map entries of one decoded payload.

msgpack turns one or two payload bytes into a Python object of 30-60 bytes
(a short string, a small map), so a payload of nothing but tiny items would
decode to some 20 times its size. Counting items while unpacking keeps one
frame's decoded size near 60 MB whatever its length. A million items is a
metadata response for about 70,000 partitions (14 items each); bins count as
one item whatever their size, so record data is not limited by this."""

# -- numbers --------------------------------------------------------------------

I8_MIN, I8_MAX = -(1 << 7), (1 << 7) - 1
I16_MIN, I16_MAX = -(1 << 15), (1 << 15) - 1
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
"""Kafka's integer widths: ids, counts and offsets keep Kafka's ranges so a
Kafka-protocol listener can serve the same values."""

# -- strings --------------------------------------------------------------------

MAX_STRING_LEN = 32_767
"""Longest string in any body, in characters (config values, free text):
Kafka's STRING has an int16 length."""

MAX_STRING_BYTES = 4 * MAX_STRING_LEN
"""msgpack's ``max_str_len`` while unpacking: UTF-8 takes up to 4 bytes per
character, so every string the schemas accept gets through to them, and the
schema names the field of one that is too long."""

MAX_TOPIC_NAME_LEN = 249
"""Kafka's limit: a partition directory is ``<topic>-<partition>`` and must fit
in a 255-byte file name with room for the partition number."""

MAX_NAME_LEN = 255
"""Client ids, group ids, member ids, instance ids, config names, host names,
assignor and mechanism names: identifiers that end up in log lines, metric
labels and record keys of internal topics, so they stay short."""

MAX_MESSAGE_LEN = 4_096
"""Error messages in responses: one line of explanation, not a dump."""

MAX_OFFSET_METADATA_LEN = 4_096
"""Kafka's ``offset.metadata.max.bytes`` default: the free-form string a
consumer commits with an offset."""

MAX_AUTH_BYTES = 65_536
"""One SASL message (a SCRAM client-first or client-final message is a few
hundred bytes; the bound leaves room for tokens of other mechanisms)."""

# -- lists ----------------------------------------------------------------------

MAX_TOPICS = 100_000
"""Topics in one request or response: a metadata response of a whole cluster.
Kafka clusters run tens of thousands of topics; a Python broker fewer."""

MAX_PARTITIONS = 100_000
"""Partitions of one topic in one request or response (partition ids are
int32 in Kafka; no cluster mq aims at has more than this per topic)."""

MAX_BROKERS = 10_000
"""Brokers in a metadata response, and replicas of one partition (a replica
list never names more brokers than the cluster has)."""

MAX_CONFIGS = 1_000
"""Config entries of one topic (Kafka defines a few dozen topic configs)."""

MAX_GROUPS = 100_000
"""Groups in a list_groups response or a describe_groups request."""

MAX_GROUP_MEMBERS = 10_000
"""Members of one group in a describe_groups response: the largest group
size a broker accepts (Kafka's ``group.max.size`` is unbounded by default,
practical groups are hundreds of members)."""

MAX_APIS = 1_000
"""Entries of an api_versions response (Kafka defines under a hundred)."""

MAX_LIST_LEN = max(
    MAX_TOPICS, MAX_PARTITIONS, MAX_BROKERS, MAX_CONFIGS, MAX_GROUPS, MAX_GROUP_MEMBERS
)
"""msgpack's ``max_array_len``/``max_map_len`` while unpacking: no schema list
is longer, so a longer array is refused before its elements are read."""

# -- names ----------------------------------------------------------------------

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
TOPIC_NAME_RULE = (
    f"a topic name is 1 to {MAX_TOPIC_NAME_LEN} characters from ASCII letters, digits, "
    "'.', '_' and '-', and not '.' or '..'"
)


def validate_topic_name(name: str) -> None:
    """Raise InvalidTopicError unless ``name`` follows Kafka's topic name rules.

    1 to 249 characters from ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``: the
    name becomes a directory name (``<topic>-<partition>``) and a metric label,
    so it must be a safe, portable file name. Body schemas only bound topic
    names' length (a reader of an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION
    for it); create_topics calls this for each new name, and the clients call it
    before asking (so a name too long for the schema gets this error too).
    The message states the rule (:data:`TOPIC_NAME_RULE`).
    """
    if not name:
        raise InvalidTopicError(f"a topic name cannot be empty ({TOPIC_NAME_RULE})")
    if len(name) > MAX_TOPIC_NAME_LEN:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long, more than {MAX_TOPIC_NAME_LEN} "
            f"({TOPIC_NAME_RULE})"
        )
    if name in {".", ".."}:
        raise InvalidTopicError(f"topic name cannot be {name!r} ({TOPIC_NAME_RULE})")
    if _LEGAL_TOPIC.fullmatch(name) is None:
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
            f" ({TOPIC_NAME_RULE})"
        )
