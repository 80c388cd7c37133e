"""The node following its interface (discovery/follow.py), driven with made-up looks
at the machine's interfaces and fake followers: no sockets, no processes.  The rules
of what a change is are in test_network_watch.py; the real thing in
test_network_changes.py."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable

from huddle.discovery.follow import Announce, Followers, NetworkFollower
from huddle.discovery.interfaces import Interface
from huddle.transport.stats import DriverStats

OLD, NEW = Interface("wlan0", "10.0.0.5", ipaddress.IPv4Network("10.0.0.0/24")), \
    Interface("wlan0", "10.0.7.9", ipaddress.IPv4Network("10.0.7.0/24"))


class Router:
    def __init__(self, taken: frozenset[tuple[str, int]] = frozenset()) -> None:
        self.taken = taken
        self.calls: list[tuple[str, str, int]] = []

    def bind(self, host: str, port: int, port_range: tuple[int, int]) -> int:
        self.calls.append(("bind", host, port))
        if (host, port) in self.taken:
            raise OSError("address in use")
        return port or port_range[0]

    def unbind(self, host: str, port: int) -> None:
        self.calls.append(("unbind", host, port))


class Follow:
    """A follower of OLD at port 5000, recording what it is told, in order."""

    def __init__(self, router: Router, announce_fails: int = 0) -> None:
        self.heard: list[str] = []
        self.failures: list[Exception] = []
        self.announce_fails = announce_fails
        self.stats = DriverStats()
        followers = Followers(router, (6000, 6999), endpoint=[self._told("mesh"), self._told("naming")],
                              announce=[self._announce("beacon"), self._announce("mdns")])
        self.follower = NetworkFollower("wlan0", OLD, 5000, followers, counts=self.stats,
                                        failed=self.failures.append)

    def _told(self, who: str) -> Callable[[str], None]:
        return lambda endpoint: self.heard.append(f"{who} {endpoint}")

    def _announce(self, who: str) -> Announce:
        async def announce(iface: Interface, port: int) -> None:
            if who == "mdns" and self.announce_fails:
                self.announce_fails -= 1
                raise OSError("no socket yet")
            self.heard.append(f"{who} {iface.ip}:{port}")
        return announce

    def look(self, *interfaces: Interface) -> None:
        asyncio.run(self.follower.look(list(interfaces)))


def test_a_move_rebinds_on_the_old_port_tells_the_endpoint_then_announces_in_order() -> None:
    router = Router()
    f = Follow(router)
    f.look(OLD)
    assert f.heard == [] and router.calls == []
    f.look(NEW)
    assert router.calls == [("bind", "10.0.7.9", 5000), ("unbind", "10.0.0.5", 5000)]
    assert f.heard == ["mesh tcp://10.0.7.9:5000", "naming tcp://10.0.7.9:5000",
                       "beacon 10.0.7.9:5000", "mdns 10.0.7.9:5000"]
    assert (f.follower.interface, f.follower.port, f.stats.address_changes) == (NEW, 5000, 1)


def test_a_port_taken_on_the_new_address_gives_another_one() -> None:
    router = Router(taken=frozenset({("10.0.7.9", 5000)}))
    f = Follow(router)
    f.look(NEW)
    assert router.calls == [("bind", "10.0.7.9", 5000), ("bind", "10.0.7.9", 0), ("unbind", "10.0.0.5", 5000)]
    assert f.follower.port == 6000 and f.heard[0] == "mesh tcp://10.0.7.9:6000"


def test_lost_then_back_is_counted_and_announces_again_without_rebinding() -> None:
    router = Router()
    f = Follow(router)
    f.look()
    f.look()
    assert (f.stats.interface_lost, f.heard) == (1, [])
    f.look(OLD)
    assert f.stats.interface_back == 1 and router.calls == []
    assert f.heard == ["beacon 10.0.0.5:5000", "mdns 10.0.0.5:5000"]


def test_an_announcement_that_fails_is_handed_over_and_tried_again_at_the_next_look() -> None:
    f = Follow(Router(), announce_fails=1)
    f.look()
    f.look(OLD)  # back: the mDNS socket cannot be opened yet
    assert len(f.failures) == 1 and f.heard == ["beacon 10.0.0.5:5000"]
    f.look(OLD)  # nothing changed, but the announcement is due
    assert f.failures[1:] == [] and f.heard[1:] == ["beacon 10.0.0.5:5000", "mdns 10.0.0.5:5000"]
    f.look(OLD)
    assert len(f.heard) == 3  # done: not again
