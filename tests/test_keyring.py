"""The keyring's rotation steps (security/keyring.py): install, switch, retire, in order or refused
with a clear error and the API's status; kept in the data directory for a restart."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from huddle.errors import ConfigError
from huddle.ids import NodeId
from huddle.limits import NamingLimits
from huddle.security import KEYRING_FILE, GroupSecret, Keyring, KeyringError
from huddle.transport.naming import NamingState, announcement_body, announcement_topic

OLD, NEW, THIRD = GroupSecret.new("derby"), GroupSecret.new("derby"), GroupSecret.new("derby")


def _refused(status: int, text: str, step: object, *args: object) -> None:
    with pytest.raises(KeyringError) as caught:
        step(*args)  # type: ignore[operator]
    assert caught.value.status == status and text in str(caught.value), str(caught.value)


def test_a_second_secret_of_a_group_has_another_key_id() -> None:
    assert OLD.group == NEW.group and OLD.key_id != NEW.key_id


def test_install_switch_retire_in_order() -> None:
    ring = Keyring(OLD)
    assert ring.describe() == [{"key_id": OLD.key_id, "state": "in-use"}]
    assert ring.install(NEW) is True
    assert ring.install(NEW) is False  # again: nothing to do (a CLI loop run twice)
    assert ring.key_id == OLD.key_id and [s.key_id for s in ring.secrets()] == [OLD.key_id, NEW.key_id]
    assert ring.switch(NEW.key_id) is True and ring.switch(NEW.key_id) is False
    assert ring.describe() == [{"key_id": NEW.key_id, "state": "in-use"}, {"key_id": OLD.key_id, "state": "installed"}]
    assert ring.retire(OLD.key_id) == OLD
    assert ring.retire(OLD.key_id) is None  # retired already
    assert ring.secrets() == (NEW,) and ring.retired == [OLD.key_id]


def test_steps_out_of_order_are_refused() -> None:
    ring = Keyring(OLD)
    _refused(404, "install it first", ring.switch, NEW.key_id)
    _refused(404, "install it first", ring.retire, NEW.key_id)
    _refused(409, "the one in use", ring.retire, OLD.key_id)
    _refused(400, "not of this node's group", ring.install, GroupSecret.new("another"))
    ring.install(NEW)
    _refused(409, "retire", ring.install, THIRD)  # one rotation at a time
    ring.switch(NEW.key_id)
    ring.retire(OLD.key_id)
    _refused(409, "retired", ring.install, OLD)  # a retired secret is never used again
    _refused(404, "retired", ring.switch, OLD.key_id)


def test_the_keyring_is_kept_for_a_restart(tmp_path: Path) -> None:
    assert Keyring.restore(tmp_path, None) is None
    assert Keyring.restore(tmp_path, OLD) == Keyring(OLD)  # never rotated: the secret given alone
    ring = Keyring(OLD)
    ring.install(NEW)
    ring.save(tmp_path)
    assert stat.S_IMODE((tmp_path / KEYRING_FILE).stat().st_mode) == 0o600
    assert (tmp_path / KEYRING_FILE).read_text().count(NEW.code) == 1 and NEW.secret.hex() not in (
        tmp_path / KEYRING_FILE).read_text()
    back = Keyring.restore(tmp_path, OLD)
    assert back is not None and back.key_id == OLD.key_id and [s.key_id for s in back.secrets()] == [
        OLD.key_id, NEW.key_id]
    ring.switch(NEW.key_id)
    ring.retire(OLD.key_id)
    ring.save(tmp_path)
    back = Keyring.restore(tmp_path, OLD)  # restarted with its old --group-key: the retired one is not used
    assert back is not None and back.secrets() == (NEW,) and back.retired == [OLD.key_id]
    fresh = Keyring.restore(tmp_path, THIRD)  # another secret given by hand (a restart with a new one)
    assert fresh is not None and fresh.secrets() == (THIRD,)
    other = GroupSecret.new("another")
    assert Keyring.restore(tmp_path, other) == Keyring(other)


def test_a_damaged_keyring_is_refused_at_start(tmp_path: Path) -> None:
    path = tmp_path / KEYRING_FILE
    path.write_text("{not json")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="damaged"):
        Keyring.restore(tmp_path, OLD)


def test_naming_accepts_the_other_held_key_during_a_rotation_only() -> None:
    topic = announcement_topic("derby")
    state = NamingState(NodeId(b"\x01" * 16), "derby", ("tcp://127.0.0.1:7001",), NamingLimits(), NEW.naming_key())
    peer, now = NodeId(b"\x02" * 16), 1_800_000_000.0

    def heard(key: bytes, t: float) -> bool:
        body = announcement_body(peer, "derby", "n", "tcp://127.0.0.1:6000", key=key, wall=now)
        return bool(state.receive([topic, body], t, now))

    assert not heard(OLD.naming_key(), 0.0) and state.stats.unauthenticated == 1
    state.also_accepted = (OLD.naming_key(),)  # installed or switched: both secrets held
    assert heard(OLD.naming_key(), 1.0) and heard(NEW.naming_key(), 2.0)
    state.also_accepted = ()  # retired
    assert not heard(OLD.naming_key(), 3.0) and state.stats.unauthenticated == 2
