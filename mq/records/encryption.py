"""Encryption at rest: one AES-256-GCM seal per record batch (layout: :mod:`mq.records.batch`).

A leader seals each batch it appends, after validation and before the bytes
reach the segment; consumer fetches, queue receives and the broker's own
loaders open it on the way out; followers copy the sealed bytes as they are.
An encrypted batch keeps its 61-byte header in clear (offsets, timestamps,
producer id/epoch/sequence, record count: indexes, retention, idempotence,
fencing and leader epochs work without a key) with :data:`ENCRYPTED_BIT` set in
its attributes, and its records section becomes::

    61  keyId       uint32   which key of the keyring sealed it
    65  nonce       12 B     the GCM nonce
    77  ciphertext           as long as the plain records section (compressed or not)
    -16 tag         16 B     GCM authentication tag

batchLength grows by :data:`OVERHEAD` (32 bytes) and the CRC is that of the
stored bytes, so that recovery, ``mq storage verify`` and the scrubber check
encrypted segments with no key. The associated data binds the ciphertext to
where it belongs: the partition's name, the baseOffset and the clear header
from the attributes to the key id (bytes [21, 65)). A batch copied into another
partition or position, or a header field changed (timestamps, counts,
producer fields), fails authentication. partitionLeaderEpoch and the CRC are
left out: a leader writes the first after sealing, the second covers the seal.

Opening restores the plain batch byte for byte as the producer's (or the
cleaner's) batch was, header included, with its CRC computed again: one AEAD
call and one CRC per batch, never anything per record.

Nonces: each :class:`Keyring` draws a random 96-bit start and counts up from it,
one nonce per seal (thread-safe: the cleaner seals in a worker thread). Within a
process no nonce repeats; two processes collide only if their ranges overlap
(probability about n/2^96 for n seals), far below GCM's bound for random nonces.

Thread safety: a :class:`Keyring` may be used from any thread; :meth:`Keyring.replace`
swaps the keys atomically (a reload).
"""

from __future__ import annotations

import itertools
import os
import struct
import threading
from collections.abc import Iterator, Mapping

from crc32c import crc32c
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mq.errors import DecryptionFailedError, EncryptionKeyNotFoundError
from mq.records.batch import (
    ATTRIBUTES_AT,
    CRC_AT,
    ENCRYPTED_BIT,
    HEADER_SIZE,
    HEADER_STRUCT,
    LENGTH_AT,
    LOG_OVERHEAD,
    RECORDS_AT,
    BatchHeader,
    Buffer,
    parse_header,
)

KEY_BYTES = 32
"""AES-256."""
KEY_ID_BYTES = 4
NONCE_BYTES = 12
TAG_BYTES = 16
OVERHEAD = KEY_ID_BYTES + NONCE_BYTES + TAG_BYTES
"""Bytes an encrypted batch has more than its plain form."""
MAX_KEY_ID = 2**32 - 1
SEALED_AT = RECORDS_AT + KEY_ID_BYTES + NONCE_BYTES
"""Where the ciphertext starts."""
_AAD_CLEAR_END = RECORDS_AT + KEY_ID_BYTES
_NONCE_SPACE = 1 << (8 * NONCE_BYTES)
_KEY_ID = struct.Struct(">I")
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_AAD_MAGIC = b"mq-batch-aead-v1\x00"


class Keyring:
    """Keys by id: the highest id seals, every id opens."""

    def __init__(self, keys: Mapping[int, bytes], source: str = "the keyring") -> None:
        self.source = source
        """Where the keys come from (named in errors)."""
        self._lock = threading.Lock()
        self._ciphers: dict[int, AESGCM] = {}
        self._newest: tuple[int, AESGCM] | None = None
        self.replace(keys)
        self._nonce_start = int.from_bytes(os.urandom(NONCE_BYTES), "big")
        self._nonces = itertools.count()

    def replace(self, keys: Mapping[int, bytes]) -> None:
        """Take a new set of keys (a reload); at least one, each 32 bytes."""
        if not keys:
            raise ValueError(f"{self.source} holds no key")
        ciphers = {}
        for key_id, key in keys.items():
            if not 0 <= key_id <= MAX_KEY_ID:
                raise ValueError(f"{self.source}: key id {key_id} is outside 0..{MAX_KEY_ID}")
            if len(key) != KEY_BYTES:
                raise ValueError(
                    f"{self.source}: key {key_id} has {len(key)} bytes, AES-256 needs {KEY_BYTES}"
                )
            ciphers[key_id] = AESGCM(key)
        newest = max(ciphers)
        with self._lock:  # two reloads at once: one wins whole
            self._ciphers = ciphers
            self._newest = (newest, ciphers[newest])

    @property
    def newest(self) -> int:
        """The id that encrypts."""
        assert self._newest is not None
        return self._newest[0]

    @property
    def ids(self) -> list[int]:
        return sorted(self._ciphers)

    def nonce(self) -> bytes:
        """A nonce never handed out before by this keyring."""
        n = (self._nonce_start + next(self._nonces)) % _NONCE_SPACE
        return n.to_bytes(NONCE_BYTES, "big")

    def cipher(self, key_id: int, where: str) -> AESGCM:
        found = self._ciphers.get(key_id)
        if found is None:
            raise EncryptionKeyNotFoundError(
                f"{where} is encrypted with key id {key_id}, which {self.source} does not hold "
                f"(it holds {self.ids}): add that key to the key file of every broker"
            )
        return found

    def newest_cipher(self) -> tuple[int, AESGCM]:
        """The id and cipher that encrypt (one read: a reload swaps the pair whole)."""
        newest = self._newest
        assert newest is not None
        return newest


def _aad(partition: bytes, stored: Buffer, pos: int) -> bytes:
    view = memoryview(stored)
    return b"".join(
        (
            _AAD_MAGIC,
            partition,
            b"\x00",
            view[pos : pos + 8],
            view[pos + ATTRIBUTES_AT : pos + _AAD_CLEAR_END],
        )
    )


def seal_batch(
    keyring: Keyring,
    partition: bytes,
    batch: Buffer,
    pos: int,
    header: BatchHeader,
    base_offset: int,
) -> tuple[bytearray, BatchHeader]:
    """The encrypted form of the plain batch at ``batch[pos:]`` (``header`` its parsed header),
    stored at ``base_offset`` of ``partition``; and its new header."""
    out = bytearray(header.size + OVERHEAD)
    return out, _seal_into(keyring, partition, memoryview(batch), pos, header, base_offset, out)


def _seal_into(
    keyring: Keyring,
    partition: bytes,
    view: memoryview,
    pos: int,
    header: BatchHeader,
    base_offset: int,
    out: bytearray | memoryview,
) -> BatchHeader:
    """Write the encrypted form of the batch at ``view[pos:]`` over ``out`` (exactly its size)."""
    key_id, cipher = keyring.newest_cipher()
    nonce = keyring.nonce()
    stored = header._replace(
        base_offset=base_offset,
        batch_length=header.batch_length + OVERHEAD,
        attributes=header.attributes | ENCRYPTED_BIT,
    )
    target = memoryview(out)
    HEADER_STRUCT.pack_into(target, 0, *stored)
    _KEY_ID.pack_into(target, RECORDS_AT, key_id)
    target[RECORDS_AT + KEY_ID_BYTES : SEALED_AT] = nonce
    cipher.encrypt_into(
        nonce,
        view[pos + RECORDS_AT : pos + header.size],
        _aad(partition, target, 0),
        target[SEALED_AT:],
    )
    crc = crc32c(target[ATTRIBUTES_AT:])
    _CRC.pack_into(target, CRC_AT, crc)
    return stored._replace(crc=crc)


def open_batch(
    keyring: Keyring | None, partition: bytes, stored: Buffer, pos: int, header: BatchHeader
) -> bytearray:
    """The plain batch (with its own CRC) of the encrypted batch at ``stored[pos:]``.

    Raises :class:`EncryptionKeyNotFoundError` naming the key id when it is not in
    ``keyring`` (or there is no keyring), :class:`DecryptionFailedError` when the
    ciphertext does not authenticate (altered bytes, or another key under that id).
    """
    if header.size < HEADER_SIZE + OVERHEAD:
        where = f"the batch at offset {header.base_offset} of {partition.decode(errors='replace')}"
        raise DecryptionFailedError(f"{where} is too short to be an encrypted batch")
    out = bytearray(header.size - OVERHEAD)
    _open_into(keyring, partition, memoryview(stored), pos, header, out)
    return out


def _open_into(
    keyring: Keyring | None,
    partition: bytes,
    view: memoryview,
    pos: int,
    header: BatchHeader,
    out: bytearray | memoryview,
) -> None:
    """Write the plain form of the encrypted batch at ``view[pos:]`` over ``out`` (its size)."""
    key_id = _KEY_ID.unpack_from(view, pos + RECORDS_AT)[0]
    if keyring is None:
        raise EncryptionKeyNotFoundError(
            f"{_where(header, partition)} is encrypted with key id {key_id}, and this broker "
            "has no encryption key file (--encryption-key-file)"
        )
    cipher = keyring.cipher(key_id, _where(header, partition))
    target = memoryview(out)
    nonce = view[pos + RECORDS_AT + KEY_ID_BYTES : pos + SEALED_AT]
    try:
        cipher.decrypt_into(
            nonce,
            view[pos + SEALED_AT : pos + header.size],
            _aad(partition, view, pos),
            target[RECORDS_AT:],
        )
    except InvalidTag:
        raise DecryptionFailedError(
            f"{_where(header, partition)} does not authenticate under key id {key_id}: its "
            "bytes were altered, or that id names another key than the one that encrypted it"
        ) from None
    target[:RECORDS_AT] = view[pos : pos + RECORDS_AT]
    _LENGTH.pack_into(target, LENGTH_AT, header.batch_length - OVERHEAD)
    target[ATTRIBUTES_AT + 1] &= ~ENCRYPTED_BIT & 0xFF
    _CRC.pack_into(target, CRC_AT, crc32c(target[ATTRIBUTES_AT:]))


def _where(header: BatchHeader, partition: bytes) -> str:
    return f"the batch at offset {header.base_offset} of {partition.decode(errors='replace')}"


def _headers(data: Buffer) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of the batches laid back to back in ``data`` (already checked)."""
    pos, end = 0, len(data)
    while pos + LOG_OVERHEAD <= end:
        header = parse_header(data, pos)
        yield pos, header
        pos += header.size


def seal_all(
    keyring: Keyring, partition: bytes, data: Buffer, headers: list[BatchHeader], first_offset: int
) -> tuple[bytearray, list[BatchHeader]]:
    """Seal a producer's checked batches (``headers``, laid back to back in ``data``)
    that a leader stores from ``first_offset`` on, into one buffer."""
    out = bytearray(len(data) + OVERHEAD * len(headers))
    target, view = memoryview(out), memoryview(data)
    stored: list[BatchHeader] = []
    pos, at, offset = 0, 0, first_offset
    for header in headers:
        size = header.size + OVERHEAD
        stored.append(
            _seal_into(keyring, partition, view, pos, header, offset, target[at : at + size])
        )
        pos += header.size
        at += size
        offset += header.last_offset_delta + 1
    return out, stored


def open_all(
    keyring: Keyring | None, partition: bytes, data: Buffer
) -> tuple[bytearray, int | None]:
    """The batches of ``data`` (checked, laid back to back) with every encrypted one opened,
    in one buffer; and None, or the offset where they stop short.

    A batch that cannot be opened fails the call when it is the first; after the
    first, the batches before it are returned with the offset it starts at, so a
    reader gets everything up to it and meets the error (naming that batch) next.
    """
    view = memoryview(data)
    batches = list(_headers(data))
    sealed = sum(1 for _, h in batches if h.attributes & ENCRYPTED_BIT)
    out = bytearray(len(data) - OVERHEAD * sealed)
    target = memoryview(out)
    at = 0
    for n, (pos, header) in enumerate(batches):
        if header.attributes & ENCRYPTED_BIT:
            size = header.size - OVERHEAD
            try:
                if size < RECORDS_AT:
                    raise DecryptionFailedError(
                        f"{_where(header, partition)} is too short to be an encrypted batch"
                    )
                _open_into(keyring, partition, view, pos, header, target[at : at + size])
            except (EncryptionKeyNotFoundError, DecryptionFailedError):
                if n == 0:
                    raise
                return out[:at], header.base_offset  # a copy: views of ``out`` are alive
        else:
            size = header.size
            target[at : at + size] = view[pos : pos + size]
        at += size
    return out, None


def stored_key_id(batch: Buffer, pos: int = 0) -> int | None:
    """The key id of the batch at ``batch[pos:]`` if it is encrypted, else None."""
    header = parse_header(batch, pos)
    if not header.attributes & ENCRYPTED_BIT or header.size < HEADER_SIZE + KEY_ID_BYTES:
        return None
    return int(_KEY_ID.unpack_from(batch, pos + RECORDS_AT)[0])
