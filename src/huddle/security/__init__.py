"""Keys and secrets (docs/security.md): the node's own keypair, the group secret and its join
code, the API token.  Pure where it can be: files are read and written here, nothing
else is done; the mesh, the log and the API use what this package gives them.

Cryptography is libsodium's (PyNaCl: Ed25519, X25519) and the standard library's
(scrypt, BLAKE2b keyed, ``secrets``, ``hmac.compare_digest``); nothing is home-made.
"""

from __future__ import annotations

from .codes import BadCode, fingerprint, new_join_code, parse_join_code
from .group import GROUP_FILE, OPEN_GROUP, GroupSecret, load_group_file, parse_group_file
from .identity import (
    KEY_FILE,
    CurveKeypair,
    NodeIdentity,
    key_derived,
    load_or_create_identity,
    node_id_for,
    own_id_refusal,
    renew_identity,
    verify,
)
from .keyring import KEYRING_FILE, Keyring, KeyringError, SecurityMode
from .token import TOKEN_FILE, ApiToken, load_or_create_token, token_matches
from .trust import TRUST_FILE, TrustList

__all__ = [
    "GROUP_FILE", "KEYRING_FILE", "KEY_FILE", "OPEN_GROUP", "TOKEN_FILE", "TRUST_FILE",
    "ApiToken", "BadCode", "CurveKeypair", "GroupSecret", "Keyring", "KeyringError", "NodeIdentity", "SecurityMode",
    "TrustList", "fingerprint", "key_derived", "load_group_file", "load_or_create_identity", "load_or_create_token",
    "new_join_code", "node_id_for", "own_id_refusal", "parse_group_file", "parse_join_code", "renew_identity",
    "token_matches", "verify",
]
