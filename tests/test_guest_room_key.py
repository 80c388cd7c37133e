"""A secured group's room is keyed (docs/security.md): a guest's ``register`` must carry the room key in
its options (``"room_key"``), else the guest gets an ``error``, its connection is closed and
nothing of it is recorded (``room_key_refused``).  An open group's room takes any guest."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, free_port, get, wait_for

from huddle.guests.codec import Register
from huddle.guests.room import Changed, Close, Room, room_key_for, room_key_matches
from huddle.security import GroupSecret

GROUP = "derby"
SECRET = GroupSecret.new(GROUP)
KEY = room_key_for(SECRET)


def register(room: Room, options: dict[str, object], conn: int = 1) -> list[object]:
    room.opened(conn, "127.0.0.1", 0.0)
    return list(room.received(conn, Register("g", 0, ("t",), (), "py", "1", options=options), 0.0))


def test_the_room_key_is_derived_from_the_group_secret_and_read_loosely() -> None:
    assert room_key_for(GroupSecret.from_code(GROUP, SECRET.code)) == KEY  # every member derives the same
    assert room_key_for(GroupSecret.new(GROUP)) != KEY
    assert len(KEY) == 29 and KEY.count("-") == 5
    assert room_key_matches(KEY.lower().replace("-", " "), KEY)
    assert not room_key_matches(KEY[:-1] + ("A" if KEY[-1] != "A" else "B"), KEY)
    assert not room_key_matches(None, KEY) and not room_key_matches(["x"], KEY) and not room_key_matches("", KEY)


@pytest.mark.parametrize("options", [{}, {"room_key": "AAAA-AAAA-AAAA-AAAA-AAAA-AAAA"}, {"room_key": 5}])
def test_a_keyed_room_refuses_a_guest_without_its_key(options: dict[str, object]) -> None:
    room = Room(GROUP, room_key=KEY)
    actions = register(room, options)
    assert any(isinstance(a, Close) and a.error and "room key" in a.reason for a in actions), actions
    assert not any(isinstance(a, Changed) for a in actions)
    assert room.guests == {} and room.counters.room_key_refused == 1


def test_a_keyed_room_takes_a_guest_with_its_key() -> None:
    room = Room(GROUP, room_key=KEY)
    assert Changed("g", True) in register(room, {"room_key": KEY.lower(), "heartbeat": "2"})
    assert "g" in room.guests and room.counters.room_key_refused == 0


def test_an_open_room_takes_any_guest_as_before() -> None:
    room = Room(GROUP)
    assert Changed("g", True) in register(room, {})
    assert Changed("g2", True) in list(Room(GROUP).received(1, Register("g2", 0, (), (), "py", "1",
                                                                       options={"room_key": "anything"}), 0.0))


@pytest.mark.processes
def test_only_guests_with_the_room_key_join_a_secured_groups_room(cluster: Cluster) -> None:
    from huddle.guest_client import Guest, GuestError

    node = cluster.start("a", "--join", SECRET.code, "--guests", "--guest-port", "0", "--guest-ws-port", "0",
                         "--guest-marco-port", str(free_port(socket.SOCK_DGRAM)), group=GROUP, beacon=False)
    port = get(node.api, "/api/v1/node")["guests"]["tcp_port"]

    def log_events() -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = get(node.api, "/api/v1/log?limit=1000")["events"]
        return result

    def guests() -> dict[str, object]:
        result: dict[str, object] = get(node.api, "/api/v1/guests")
        return result

    async def run() -> None:
        common = {"host": ("127.0.0.1", port), "listen": "127.0.0.1", "reconnect": False}
        outsider = Guest("outsider", GROUP, speaks=["score"], room_key="", **common)  # type: ignore[arg-type]
        wrong = Guest("wrong", GROUP, speaks=["score"], room_key=room_key_for(GroupSecret.new(GROUP)),
                      **common)  # type: ignore[arg-type]
        member = Guest("member", GROUP, speaks=["score"], room_key=KEY, **common)  # type: ignore[arg-type]
        for g in (outsider, wrong):
            with pytest.raises(GuestError, match="room key"):
                await g.start(timeout=20)
        await member.start()
        try:
            await member.speak("score", {"home": 3})
            await asyncio.to_thread(wait_for, lambda: any(
                e["kind"] == "score" for e in log_events()), 10, "member's event")
        finally:
            for g in (outsider, wrong, member):
                await g.close()

    asyncio.run(run())
    info = guests()
    assert info["stats"]["room_key_refused"] == 2, info["stats"]  # type: ignore[index]
    events = log_events()
    guests_heard = {e["body"].get("noam_guest") for e in events if isinstance(e.get("body"), dict)}
    assert guests_heard == {"member"}, events


def test_group_show_prints_the_room_key(tmp_path: Path) -> None:
    SECRET.save(tmp_path / "derby.key")
    shown = subprocess.run([sys.executable, "-m", "huddle", "group", "show", str(tmp_path / "derby.key")],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"room key (guests give it in register's options: docs/guests.md): {KEY}" in shown


@pytest.mark.processes
def test_a_browser_guest_joins_a_keyed_room_with_its_key_only(cluster: Cluster, browser: Any) -> None:
    node = cluster.start("a", "--join", SECRET.code, "--guests", "--guest-port", "0", "--guest-ws-port", "0",
                         "--guest-marco-port", str(free_port(socket.SOCK_DGRAM)), group=GROUP, beacon=False)
    ws = f"ws://127.0.0.1:{get(node.api, '/api/v1/node')['guests']['ws_port']}/"
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(node.api + "/")
    page.add_script_tag(url=node.api + "/guest.js")
    page.evaluate("""([url, key]) => {
        window.stranger = new HuddleGuest({url, name: "stranger", speaks: ["score"], retry: 600});
        window.member = new HuddleGuest({url, name: "member", speaks: ["score"], roomKey: key});
        member.speak("score", {"from": "chromium"});
    }""", [ws, KEY])
    page.wait_for_function("window.stranger.errors.length > 0", timeout=10_000)
    assert "room key" in page.evaluate("window.stranger.errors[0]")
    wait_for(lambda: [g["name"] for g in get(node.api, "/api/v1/guests")["guests"]] == ["member"], 10,
             "the member (only) registered")
    wait_for(lambda: any(e["kind"] == "score" for e in get(node.api, "/api/v1/log?limit=1000")["events"]), 10,
             "the member's event recorded")
    assert get(node.api, "/api/v1/guests")["stats"]["room_key_refused"] >= 1
    page.evaluate("stranger.close(); member.close()")
    assert not errors, errors


def test_a_keyless_room_takes_a_guest_that_gives_no_key_and_marks_it() -> None:
    room = Room(GROUP, room_key=KEY, keyless=True)
    assert room.is_keyless
    assert Changed("g", True) in register(room, {"heartbeat": 3.003})  # the Arduino lemma's options: no key
    assert room.keyless_guest("g") and room.guests["g"].as_dict(0.0)["keyless"] is True
    assert room.counters.keyless_admitted == 1 and room.counters.room_key_refused == 0
    # Registering again on its own connection updates the guest, not the count.
    assert Changed("g", True) in list(room.received(1, Register("g", 0, ("t",), (), "py", "1"), 0.0))
    assert room.counters.keyless_admitted == 1
    # A guest that gives the key is a member as in a keyed room: not marked.
    room.opened(2, "127.0.0.1", 0.0)
    assert Changed("m", True) in list(room.received(2, Register("m", 0, (), (), "py", "1", options={"room_key": KEY}),
                                                    0.0))
    assert not room.keyless_guest("m") and room.counters.keyless_admitted == 1


def test_a_keyless_room_still_refuses_a_wrong_key() -> None:
    room = Room(GROUP, room_key=KEY, keyless=True)
    actions = register(room, {"room_key": "AAAA-AAAA-AAAA-AAAA-AAAA-AAAA"})
    assert any(isinstance(a, Close) and a.error and "room key" in a.reason for a in actions), actions
    assert room.guests == {} and room.counters.room_key_refused == 1 and room.counters.keyless_admitted == 0


def test_keyless_marks_nothing_in_an_open_room() -> None:
    room = Room(GROUP, keyless=True)  # an open group's room takes any guest: none is "keyless" there
    assert not room.is_keyless
    assert Changed("g", True) in register(room, {})
    assert not room.keyless_guest("g") and room.counters.keyless_admitted == 0
