"""Encryption at rest: the per-batch AES-256-GCM codec, the key file, and a log that seals."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mq.errors import (
    DecryptionFailedError,
    EncryptionKeyNotFoundError,
    InvalidConfigError,
    InvalidRecordError,
)
from mq.records.batch import (
    ATTRIBUTES_AT,
    CRC_AT,
    ENCRYPTED_BIT,
    check_batch,
    compute_crc,
    parse_header,
    validate_produced,
)
from mq.records.compression import CODEC_GZIP
from mq.records.encryption import (
    NONCE_BYTES,
    OVERHEAD,
    RECORDS_AT,
    Keyring,
    open_all,
    open_batch,
    seal_all,
    seal_batch,
    stored_key_id,
)
from mq.records.records import build_batch, decode_records
from mq.storage.config import LogConfig
from mq.storage.keyfile import add_key, load_keyring, read_keys
from mq.storage.log import Log

SECRET = b"top-secret-value-0123456789"
KEY1, KEY2 = bytes(range(32)), bytes(range(1, 33))
PART = b"orders-0"


def plain_batch(n: int = 3, codec: int = 0) -> bytes:
    return build_batch(
        [
            (b"key-%d" % i, SECRET + b"-%d" % i, [("hdr", b"header-secret")], 1_700_000_000_000 + i)
            for i in range(n)
        ],
        codec=codec,
    )


def sealed(keyring: Keyring, batch: bytes, offset: int = 0, part: bytes = PART) -> bytes:
    data, _ = seal_batch(keyring, part, batch, 0, parse_header(batch), offset)
    return data


@pytest.mark.parametrize("codec", [0, CODEC_GZIP])
def test_seal_then_open_gives_the_plain_batch_back_byte_for_byte(codec: int) -> None:
    ring = Keyring({1: KEY1})
    batch = plain_batch(codec=codec)
    stored = sealed(ring, batch)
    header = check_batch(stored, 0, len(stored))  # the CRC holds over what is stored
    assert header.attributes & ENCRYPTED_BIT
    assert header.size == len(batch) + OVERHEAD
    assert stored_key_id(stored) == 1
    assert SECRET not in stored
    assert b"key-1" not in stored
    assert b"header-secret" not in stored
    # the header stays in clear, but for its length, attributes and CRC
    assert stored[ATTRIBUTES_AT + 2 : RECORDS_AT] == batch[ATTRIBUTES_AT + 2 : RECORDS_AT]
    assert open_batch(ring, PART, stored, 0, header) == batch
    assert [r.value for r in decode_records(open_batch(ring, PART, stored, 0, header))] == [
        SECRET + b"-%d" % i for i in range(3)
    ]


def test_an_encrypted_batch_is_not_decoded_as_records() -> None:
    stored = sealed(Keyring({1: KEY1}), plain_batch())
    with pytest.raises(Exception, match="encrypted at rest"):
        decode_records(stored)


def test_a_flipped_ciphertext_byte_with_a_fixed_crc_fails_authentication() -> None:
    ring = Keyring({1: KEY1})
    stored = bytearray(sealed(ring, plain_batch()))
    stored[RECORDS_AT + 20] ^= 0x01
    with pytest.raises(Exception, match="CRC"):
        check_batch(stored, 0, len(stored))  # the CRC catches it first
    stored[CRC_AT : CRC_AT + 4] = compute_crc(stored).to_bytes(4, "big")  # a forger fixes it
    header = check_batch(stored, 0, len(stored))
    with pytest.raises(DecryptionFailedError, match="key id 1"):
        open_batch(ring, PART, stored, 0, header)


@pytest.mark.parametrize(
    ("where", "why"),
    [(ATTRIBUTES_AT + 8, "a timestamp"), (ATTRIBUTES_AT + 39, "the record count")],
)
def test_header_fields_are_bound_to_the_ciphertext(where: int, why: str) -> None:
    ring = Keyring({1: KEY1})
    stored = bytearray(sealed(ring, plain_batch()))
    stored[where] ^= 0x01
    stored[CRC_AT : CRC_AT + 4] = compute_crc(stored).to_bytes(4, "big")
    with pytest.raises(DecryptionFailedError):
        open_batch(ring, PART, stored, 0, parse_header(stored))


def test_a_batch_moved_to_another_partition_or_offset_fails_authentication() -> None:
    ring = Keyring({1: KEY1})
    stored = bytearray(sealed(ring, plain_batch(), offset=100))
    with pytest.raises(DecryptionFailedError):
        open_batch(ring, b"orders-1", stored, 0, parse_header(stored))
    stored[0:8] = (200).to_bytes(8, "big")  # baseOffset is outside the CRC
    with pytest.raises(DecryptionFailedError):
        open_batch(ring, PART, stored, 0, parse_header(stored))


def test_the_leader_epoch_may_change_after_sealing() -> None:
    ring = Keyring({1: KEY1})
    batch = plain_batch()
    stored = bytearray(sealed(ring, batch))
    stored[12:16] = (7).to_bytes(4, "big")  # what a leader's append writes
    opened = open_batch(ring, PART, stored, 0, parse_header(stored))
    assert parse_header(opened).leader_epoch == 7


def test_a_missing_key_names_its_id() -> None:
    stored = sealed(Keyring({5: KEY1}), plain_batch(), offset=42)
    header = parse_header(stored)
    with pytest.raises(EncryptionKeyNotFoundError, match=r"offset 42 of orders-0.*key id 5"):
        open_batch(Keyring({1: KEY2}), PART, stored, 0, header)
    with pytest.raises(EncryptionKeyNotFoundError, match=r"key id 5.*no encryption key file"):
        open_batch(None, PART, stored, 0, header)
    assert not EncryptionKeyNotFoundError.retriable


def test_another_key_under_the_same_id_fails_authentication() -> None:
    stored = sealed(Keyring({1: KEY1}), plain_batch())
    with pytest.raises(DecryptionFailedError, match="key id 1"):
        open_batch(Keyring({1: KEY2}), PART, stored, 0, parse_header(stored))


def test_the_newest_key_seals_and_every_key_opens() -> None:
    old = sealed(Keyring({1: KEY1}), plain_batch())
    ring = Keyring({1: KEY1, 2: KEY2})
    new = sealed(ring, plain_batch(), offset=3)
    assert stored_key_id(old) == 1
    assert stored_key_id(new) == 2
    opened, stop = open_all(ring, PART, old + new)
    assert stop is None
    assert opened[: len(old) - OVERHEAD] == plain_batch()
    assert parse_header(opened, len(old) - OVERHEAD).base_offset == 3


def test_nonces_never_repeat_and_count_from_a_random_start() -> None:
    ring = Keyring({1: KEY1})
    nonces = [ring.nonce() for _ in range(10_000)]
    assert len(set(nonces)) == len(nonces)
    assert all(len(n) == NONCE_BYTES for n in nonces)
    first = int.from_bytes(nonces[0], "big")
    assert [int.from_bytes(n, "big") for n in nonces[:3]] == [first, first + 1, first + 2]
    assert Keyring({1: KEY1}).nonce() != Keyring({1: KEY1}).nonce()  # random starts
    a, b = sealed(ring, plain_batch()), sealed(ring, plain_batch())
    assert a[RECORDS_AT + 4 : RECORDS_AT + 16] != b[RECORDS_AT + 4 : RECORDS_AT + 16]


def test_seal_all_assigns_the_offsets_a_leader_stores_at() -> None:
    ring = Keyring({1: KEY1})
    data = plain_batch(2) + plain_batch(3)
    headers = validate_produced(data, max_batch_bytes=1 << 20)
    stored, out = seal_all(ring, PART, data, headers, 10)
    assert [h.base_offset for h in out] == [10, 12]
    assert sum(h.size for h in out) == len(stored) == len(data) + 2 * OVERHEAD
    opened, _ = open_all(ring, PART, stored)
    assert [
        h.base_offset for h in (parse_header(opened), parse_header(opened, headers[0].size))
    ] == [10, 12]


def test_producers_may_not_set_the_encrypted_bit() -> None:
    stored = sealed(Keyring({1: KEY1}), plain_batch())
    with pytest.raises(InvalidRecordError, match="bit 7"):
        validate_produced(stored, max_batch_bytes=1 << 20)


def test_keyring_refuses_bad_keys() -> None:
    with pytest.raises(ValueError, match="no key"):
        Keyring({})
    with pytest.raises(ValueError, match="32"):
        Keyring({1: b"short"})


# -- the key file ------------------------------------------------------------------------


def test_keygen_makes_a_private_file_and_adds_keys_with_rising_ids(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    assert add_key(path) == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = read_keys(path)
    assert add_key(path) == 2
    keys = read_keys(path)
    assert keys[1] == first[1]
    assert len(keys[2]) == 32
    assert keys[1] != keys[2]
    assert load_keyring(path).newest == 2


def test_a_world_readable_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    add_key(path)
    os.chmod(path, 0o644)
    with pytest.raises(InvalidConfigError, match="chmod 600"):
        read_keys(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "holds no key"),
        ('x = "AAAA"\n', "not a key id"),
        ('1 = "not base64!"\n', "not base64"),
        ('1 = "AAAA"\n', "3 bytes"),
        ("1 = 5\n", "not a string"),
        ("1 = [\n", "keys.toml"),
    ],
)
def test_a_bad_key_file_says_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    os.chmod(path, 0o600)
    with pytest.raises(InvalidConfigError, match=message):
        read_keys(path)


# -- a log that encrypts -------------------------------------------------------------------


def _files_hold(directory: Path, needle: bytes) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_a_log_stores_ciphertext_and_reads_plaintext(tmp_path: Path) -> None:
    ring = Keyring({1: KEY1})
    log = Log.open(tmp_path / "orders-0", LogConfig(), keyring=ring)
    log.append(plain_batch(), leader_epoch=3)
    log.append(plain_batch(2))
    found = log.read(0, 1 << 20)
    assert found is not None
    assert found.encrypted
    plain = log.read_plain(0, 1 << 20)
    assert plain is not None
    assert not plain.encrypted
    assert plain.next_offset == 5
    records = decode_records(plain.data[: parse_header(plain.data).size])
    assert [r.offset for r in records] == [0, 1, 2]
    assert parse_header(plain.data).leader_epoch == 3
    log.close()
    assert _files_hold(tmp_path, SECRET) == []
    assert _files_hold(tmp_path, b"header-secret") == []
    # reopened: recovery checks the stored CRCs with no key; a keyless log cannot read
    keyless = Log.open(tmp_path / "orders-0", LogConfig())
    assert keyless.next_offset == 5
    with pytest.raises(EncryptionKeyNotFoundError, match="key id 1"):
        keyless.read_plain(0, 1 << 20)
    keyless.close()


def test_rotation_keeps_old_batches_readable(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "orders-0", LogConfig(), keyring=Keyring({1: KEY1}))
    log.append(plain_batch())
    log.close()
    log = Log.open(tmp_path / "orders-0", LogConfig(), keyring=Keyring({1: KEY1, 2: KEY2}))
    log.append(plain_batch())
    found = log.read(0, 1 << 20)
    assert found is not None
    assert stored_key_id(found.data) == 1
    assert stored_key_id(found.data, parse_header(found.data).size) == 2
    plain = log.read_plain(0, 1 << 20)
    assert plain is not None
    assert plain.next_offset == 6
    log.close()
    # key 1 gone: its batches fail naming it, key 2's still open
    log = Log.open(tmp_path / "orders-0", LogConfig(), keyring=Keyring({2: KEY2}))
    with pytest.raises(EncryptionKeyNotFoundError, match="key id 1"):
        log.read_plain(0, 1)
    assert log.read_plain(3, 1) is not None
    log.close()
    # key 2 gone: a read from 0 serves the batch under key 1 and stops before key 2's
    log = Log.open(tmp_path / "orders-0", LogConfig(), keyring=Keyring({1: KEY1}))
    plain = log.read_plain(0, 1 << 20)
    assert plain is not None
    assert plain.next_offset == 3
    assert [r.offset for r in decode_records(plain.data)] == [0, 1, 2]
    with pytest.raises(EncryptionKeyNotFoundError, match=r"offset 3 of orders-0.*key id 2"):
        log.read_plain(3, 1 << 20)
    log.close()


def test_the_stored_layout_byte_for_byte() -> None:
    """The layout of mq.records.encryption's docstring, built here independently: the
    clear header (bit 7 set, batchLength + 32, CRC of the stored bytes), key id, nonce,
    AES-256-GCM of the records section with the documented associated data, tag."""
    ring = Keyring({7: KEY1})
    ring._nonce_start, ring._nonces = 0x0102030405060708090A0B0C, iter([0])  # type: ignore[assignment]
    batch = plain_batch()
    stored = sealed(ring, batch, offset=0x1122334455)
    nonce = bytes(range(1, 13))
    length = struct.unpack_from(">i", batch, 8)[0] + 32
    attributes = struct.unpack_from(">h", batch, 21)[0] | 0x80
    clear = (
        struct.pack(">h", attributes) + batch[23:61] + struct.pack(">I", 7)
    )  # attributes .. recordsCount, key id
    aad = b"mq-batch-aead-v1\x00" + PART + b"\x00" + struct.pack(">q", 0x1122334455) + clear
    body = clear + nonce + AESGCM(KEY1).encrypt(nonce, batch[61:], aad)
    expected = (
        struct.pack(">qiib", 0x1122334455, length, struct.unpack_from(">i", batch, 12)[0], 2)
        + struct.pack(">I", crc32c(body))
        + body
    )
    assert bytes(stored) == expected
