"""Node keys, the group secret and its join code (huddle.security): files, formats, derivations."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from huddle.errors import ConfigError
from huddle.security import (
    KEY_FILE,
    BadCode,
    GroupSecret,
    load_group_file,
    load_or_create_identity,
    load_or_create_token,
    new_join_code,
    node_id_for,
    parse_join_code,
    token_matches,
    verify,
)
from huddle.security.codes import ALPHABET, fingerprint


def test_node_key_is_created_private_and_kept(tmp_path: Path) -> None:
    first = load_or_create_identity(tmp_path)
    path = tmp_path / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_or_create_identity(tmp_path)
    assert again.public_key == first.public_key
    assert again.fingerprint == first.fingerprint
    sig = first.sign(b"hello")
    assert verify(first.public_key, b"hello", sig)
    assert not verify(first.public_key, b"hellO", sig)
    assert not verify(first.public_key, b"hello", bytes(64))


def test_node_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    load_or_create_identity(tmp_path)
    os.chmod(tmp_path / KEY_FILE, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_or_create_identity(tmp_path)


def test_damaged_node_key_is_refused(tmp_path: Path) -> None:
    load_or_create_identity(tmp_path)
    path = tmp_path / KEY_FILE
    path.write_text(path.read_text()[:-10] + "\n")
    with pytest.raises(ConfigError, match="damaged"):
        load_or_create_identity(tmp_path)


def test_curve_form_and_node_id(tmp_path: Path) -> None:
    ident = load_or_create_identity(tmp_path)
    curve = ident.curve()
    assert len(curve.public) == len(curve.secret) == 32
    assert curve.secret.hex() not in repr(curve)
    node_id = node_id_for(ident.public_key)
    assert node_id == ident.node_id
    assert node_id[6] >> 4 == 8 and node_id[8] >> 6 == 0b10  # an RFC 9562 version-8 UUID
    (tmp_path / "other").mkdir()
    other = load_or_create_identity(tmp_path / "other")
    assert other.node_id != node_id and other.fingerprint != ident.fingerprint
    assert len(ident.fingerprint) == 19 and ident.fingerprint.count("-") == 3


def test_join_code_shape_and_check() -> None:
    code = new_join_code()
    groups = code.split("-")
    assert len(groups) == 6 and all(len(g) == 4 and set(g) <= set(ALPHABET) for g in groups)
    assert parse_join_code(code.lower().replace("-", " ")) == code
    # the letters people mistake for digits are read as those digits
    assert parse_join_code(code.replace("0", "O").replace("1", "I")) == code
    wrong = ("A" if code[0] != "A" else "B") + code[1:]
    with pytest.raises(BadCode, match="check"):
        parse_join_code(wrong)
    swapped = code[1] + code[0] + code[2:]
    if swapped != code:
        with pytest.raises(BadCode):
            parse_join_code(swapped)
    with pytest.raises(BadCode, match="6 groups"):
        parse_join_code(code[:-1])
    with pytest.raises(BadCode, match="not in a join code"):
        parse_join_code("U" + code[1:])


def test_every_single_typo_is_caught() -> None:
    code = new_join_code().replace("-", "")
    for i in range(len(code)):
        for c in ALPHABET:
            if c != code[i]:
                with pytest.raises(BadCode):
                    parse_join_code(code[:i] + c + code[i + 1:])


def test_the_code_alone_gives_the_secret_and_the_group_name_binds_it() -> None:
    made = GroupSecret.new("derby")
    joined = GroupSecret.from_code("derby", made.code.lower())
    assert joined == made and joined.key_id == made.key_id
    assert GroupSecret.from_code("derby2", made.code).secret != made.secret
    assert made.code not in repr(made) and made.secret.hex() not in repr(made)
    with pytest.raises(ConfigError, match="join code"):
        GroupSecret.from_code("derby", "AAAA-AAAA")
    with pytest.raises(ConfigError, match="name"):
        GroupSecret.new("")


def test_derived_keys_are_distinct_and_stable() -> None:
    g = GroupSecret.new("derby")
    keys = [g.curve_server().secret, g.curve_client().secret, g.naming_key(), g.room_key()]
    assert len(set(keys)) == 4 and g.secret not in keys
    same = GroupSecret.from_code("derby", g.code)
    assert same.curve_server() == g.curve_server() and same.naming_key() == g.naming_key()
    assert GroupSecret.new("derby").curve_client() != g.curve_client()


def test_group_file_round_trip_private_and_checked(tmp_path: Path) -> None:
    g = GroupSecret.new('the "derby" \u00e9')
    path = tmp_path / "derby.key"
    g.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_group_file(path) == g
    with pytest.raises(ConfigError, match="never overwritten"):
        g.save(path)
    text = path.read_text()
    path.write_text(text.replace(g.secret.hex(), GroupSecret.new("x").secret.hex()))
    with pytest.raises(ConfigError, match="damaged"):
        load_group_file(path)
    path.write_text("group = 3\n")
    with pytest.raises(ConfigError, match="damaged"):
        load_group_file(path)
    os.chmod(path, 0o640)
    with pytest.raises(ConfigError, match="other users"):
        load_group_file(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_group_file(tmp_path / "nothing")


def test_api_token_file(tmp_path: Path) -> None:
    first = load_or_create_token(tmp_path)
    assert first.created and stat.S_IMODE(first.path.stat().st_mode) == 0o600
    again = load_or_create_token(tmp_path)
    assert not again.created and again.value == first.value
    assert first.value not in repr(first)
    assert token_matches(first.value, first.value)
    assert not token_matches(None, first.value)
    assert not token_matches(first.value[:-1], first.value)
    assert not token_matches("\udcff", first.value)
    first.path.write_text("short\n")
    with pytest.raises(ConfigError, match="damaged"):
        load_or_create_token(tmp_path)


def test_a_key_is_fingerprinted_once_not_on_every_peers_request() -> None:
    # GET /api/v1/peers names every peer's key: at 64 nodes, hashing 63 keys made up two thirds
    # of Mesh.peers (537 us a call; 181 us with the fingerprints kept).
    fingerprint.cache_clear()
    key = bytes(range(32))
    first = fingerprint(key)
    assert fingerprint(bytes(range(32))) == first
    assert fingerprint.cache_info().hits == 1
