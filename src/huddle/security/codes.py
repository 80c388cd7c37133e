"""Text forms of keys for people: fingerprints and join codes.

Both use Crockford's base32 alphabet (digits and upper-case letters without I, L, O
and U), in groups of four separated by dashes.  On input, case, spaces and dashes do
not matter, and the letters people confuse with digits are read as those digits
(O as 0, I and L as 1).
"""

from __future__ import annotations

import functools
import hashlib
import secrets

__all__ = ["ALPHABET", "JOIN_CODE_BITS", "BadCode", "fingerprint", "new_join_code", "parse_join_code"]

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_VALUE = {c: i for i, c in enumerate(ALPHABET)} | {"O": 0, "I": 1, "L": 1}

JOIN_CODE_BITS = 100  # 20 characters of secret; brute force is then hopeless even without scrypt
_CHECK_BITS = 20  # 4 characters: a mistyped code is caught, except once in a million
_CODE_CHARS = (JOIN_CODE_BITS + _CHECK_BITS) // 5


class BadCode(ValueError):
    """A join code that is not one: wrong length, a letter outside the alphabet, or a failed check."""


def _chars(value: int, count: int) -> str:
    return "".join(ALPHABET[(value >> (5 * (count - 1 - i))) & 31] for i in range(count))


def _grouped(text: str) -> str:
    return "-".join(text[i:i + 4] for i in range(0, len(text), 4))


@functools.lru_cache(maxsize=1024)
def fingerprint(public_key: bytes) -> str:
    """A short, stable name of a public key for people to compare: 80 bits of a hash,
    as ``XXXX-XXXX-XXXX-XXXX``.  Kept for the last 1 024 keys: ``GET /api/v1/peers``
    names every peer's key, and at 64 nodes the fingerprints were most of its time."""
    digest = hashlib.blake2b(public_key, digest_size=10, person=b"huddle-key-fp").digest()
    return _grouped(_chars(int.from_bytes(digest), 16))


def _check(secret: int) -> int:
    digest = hashlib.blake2b(secret.to_bytes(13), digest_size=8, person=b"huddle-joincode").digest()
    return int.from_bytes(digest) >> (64 - _CHECK_BITS)


def new_join_code() -> str:
    """A fresh random join code: 100 random bits and a 20-bit check, ``XXXX-XXXX-XXXX-XXXX-XXXX-XXXX``."""
    secret = secrets.randbits(JOIN_CODE_BITS)
    return _grouped(_chars((secret << _CHECK_BITS) | _check(secret), _CODE_CHARS))


def parse_join_code(text: str) -> str:
    """The canonical form of a join code as a person typed it; :class:`BadCode` if it is not one."""
    cleaned = "".join(text.split()).replace("-", "").upper()
    if len(cleaned) != _CODE_CHARS:
        raise BadCode(f"a join code has {_CODE_CHARS} letters and digits (6 groups of 4), got {len(cleaned)}")
    value = 0
    for c in cleaned:
        if c not in _VALUE:
            raise BadCode(f"{c!r} is not in a join code (letters and digits without U)")
        value = (value << 5) | _VALUE[c]
    secret, check = value >> _CHECK_BITS, value & ((1 << _CHECK_BITS) - 1)
    if _check(secret) != check:
        raise BadCode("this join code does not check out: a letter or digit is wrong or two are swapped")
    return _grouped(_chars(value, _CODE_CHARS))
