"""The key file of encryption at rest: read it, check who may read it, add a key to it.

Format: TOML, one line per key, ``<key id> = "<base64 of 32 random bytes>"``::

    # mq encryption keys: the highest id encrypts new batches, every id decrypts
    1 = "mG0Zr3Y0bq3nHw0QG0rKc3eZ2Fy0wVd3m8yQ7sU2x1A="
    2 = "x0ZsD1c7G3kq9bq7Ew4R2m0n1o8p5T6u7V8w9X0y1Z8="

Key ids are 0 to 2^32-1 (stored in every encrypted batch); the highest one
encrypts. Rotating is adding a key (``mq storage keygen FILE``) and restarting
the brokers (or sending them SIGHUP): old batches keep their key id and stay
readable as long as their key stays in the file. Every broker of a cluster needs
the same file: followers store what the leader encrypted and decrypt it once
they lead.

The file must not be readable by other users: a key file that anyone but its
owner (and its group, for secret mounts) may read is refused, as ssh refuses a
private key.

Thread safety: pure functions (file I/O only).
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import stat
import tomllib
from pathlib import Path

from mq.errors import InvalidConfigError
from mq.records.encryption import KEY_BYTES, MAX_KEY_ID, Keyring

log = logging.getLogger(__name__)

MAX_KEY_FILE_BYTES = 1 << 20
"""A key file is a few lines; anything bigger is not one (read before parsing)."""
MAX_KEYS = 10_000
"""Keys one file may hold: each costs an AES context in every broker."""
_HEADER = "# mq encryption keys: the highest id encrypts new batches, every id decrypts\n"


def read_keys(path: Path) -> dict[int, bytes]:
    """The keys of ``path`` by id; InvalidConfigError saying what is wrong with the file."""
    try:
        info = path.stat()
    except OSError as exc:
        raise InvalidConfigError(f"encryption key file {path}: {exc}") from exc
    if info.st_mode & (stat.S_IROTH | stat.S_IWOTH):
        raise InvalidConfigError(
            f"encryption key file {path} is readable or writable by other users "
            f"(mode {stat.filemode(info.st_mode)}): chmod 600 it"
        )
    if info.st_mode & stat.S_IRGRP:
        log.warning(
            "encryption key file %s is readable by its group (mode %s)",
            path,
            stat.filemode(info.st_mode),
        )
    if info.st_size > MAX_KEY_FILE_BYTES:
        raise InvalidConfigError(
            f"encryption key file {path} has {info.st_size} bytes, more than "
            f"{MAX_KEY_FILE_BYTES}: not a key file"
        )
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidConfigError(f"encryption key file {path}: {exc}") from exc
    if len(raw) > MAX_KEYS:
        raise InvalidConfigError(f"encryption key file {path} holds more than {MAX_KEYS} keys")
    keys: dict[int, bytes] = {}
    for name, value in raw.items():
        if not name.isdigit() or not 0 <= int(name) <= MAX_KEY_ID:
            raise InvalidConfigError(
                f"encryption key file {path}: {name!r} is not a key id (0 to {MAX_KEY_ID})"
            )
        if not isinstance(value, str):
            raise InvalidConfigError(f"encryption key file {path}: key {name} is not a string")
        try:
            key = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidConfigError(
                f"encryption key file {path}: key {name} is not base64 ({exc})"
            ) from exc
        if len(key) != KEY_BYTES:
            raise InvalidConfigError(
                f"encryption key file {path}: key {name} has {len(key)} bytes, "
                f"AES-256 needs {KEY_BYTES}"
            )
        keys[int(name)] = key
    if not keys:
        raise InvalidConfigError(
            f"encryption key file {path} holds no key: make one with `mq storage keygen {path}`"
        )
    return keys


def load_keyring(path: Path) -> Keyring:
    """A keyring of the keys in ``path`` (see :func:`read_keys`)."""
    return Keyring(read_keys(path), source=f"the key file {path}")


def add_key(path: Path) -> int:
    """Add a new random key to ``path`` (created 0600 if missing) with the next id; its id.

    The file is rewritten whole through a temporary file and a rename, so a
    crash leaves the old file or the new one.
    """
    keys = read_keys(path) if path.exists() else {}
    key_id = max(keys, default=0) + 1
    if key_id > MAX_KEY_ID:
        raise InvalidConfigError(f"encryption key file {path}: no key id left after {MAX_KEY_ID}")
    keys[key_id] = os.urandom(KEY_BYTES)
    text = _HEADER + "".join(
        f'{n} = "{base64.b64encode(k).decode()}"\n' for n, k in sorted(keys.items())
    )
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return key_id
