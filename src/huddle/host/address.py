"""Who follows the node's address and its group key (docs/security.md, "Rotating the group
secret"; docs/guests.md, "Address changes").

:class:`Following` keeps the interface the node listens on and, in order, who follows a
move of its address (the ROUTER, the mesh's endpoint, the finders, then the features that
asked) and who is told each step of the group key's rotation (the naming client's MAC
keys, then the features that asked).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..discovery import Interface
from ..discovery.follow import FollowCounts, Followers, NetworkFollower, advertise
from ..discovery.interfaces import LOOPBACK
from ..errors import NotRunning
from ..security import GroupSecret, Keyring
from ..transport.rotation import KeyRotation
from ..transport.zap import MeshSecurity
from ..transport.zmq_transport import ZmqTransport

if TYPE_CHECKING:  # the node hands its finders in
    from ..finders import Finders

__all__ = ["Following"]

Moved = Callable[[str], Awaitable[None]]  # a feature told the new address after a move


class Following:
    """The node's address and group key, and who follows each (the module docstring)."""

    def __init__(self, finders: Finders, port_range: tuple[int, int], set_endpoint: Callable[[str], None]) -> None:
        """``set_endpoint``: the mesh told its new endpoint (``tcp://IP:PORT``) after a move."""
        self._finders, self._port_range, self._set_endpoint = finders, port_range, set_endpoint
        self.iface: Interface | None = None  # the interface it started on (the follower has it then)
        self.follower: NetworkFollower | None = None  # follows the interface's address (not on loopback)
        self.movers: list[Moved] = []  # features following an address move
        self.key_watchers: list[Callable[[GroupSecret], None]] = []  # features told of each rotation step

    @property
    def interface(self) -> Interface:
        iface = self.iface if self.follower is None else self.follower.interface
        if iface is None:
            raise NotRunning("the node is not running")
        return iface

    @property
    def address(self) -> str:
        """The address the node listens on now: its interface's, followed when it moves."""
        return self.interface.ip

    def followers(self, transport: ZmqTransport) -> Followers:
        """Who follows an address change, in order: the ROUTER, the mesh (HELO to the
        peers), the naming client; then the announcements (beacon, mDNS), then the
        features (the guest servers)."""
        follow = Followers(transport, self._port_range, endpoint=[self._set_endpoint])
        self._finders.follow(follow)
        follow.announce += [_moved_to(moved) for moved in self.movers]
        return follow

    def follow(self, name: str, port: int, transport: ZmqTransport, *, counts: FollowCounts,
               failed: Callable[[Exception], None]) -> None:
        """Follow the interface ``name`` from the one it started on (loopback never changes: not followed)."""
        iface = self.interface
        if iface != LOOPBACK:
            self.follower = NetworkFollower(name, iface, port, self.followers(transport), counts=counts, failed=failed)

    async def advertise(self, transport: ZmqTransport, port: int, delay: float) -> None:
        """The group key switched: the ROUTER's port of the new key is this node's endpoint now."""
        if self.follower is not None:
            self.follower.port = port
        await advertise(self.followers(transport), self.interface, port, delay=delay)

    def rotation(self, security: MeshSecurity, transport: ZmqTransport, port: int, data_dir: Path,
                 delay: float) -> KeyRotation | None:
        """The group secret's live rotation (None: an open group), on the ROUTER's ``port``:
        a switch advertises the new key's port ``delay`` seconds after the HELO
        (transport/rotation.py); restarted during a rotation, both keys are held."""
        if security.keyring is None:
            return None
        rotation = KeyRotation(security, transport, host=lambda: self.address, port=port,
                               port_range=self._port_range, data_dir=data_dir,
                               advertise=lambda p: self.advertise(transport, p, delay), changed=self.keys_changed)
        self.keys_changed(rotation.keyring)
        return rotation

    def keys_changed(self, keyring: Keyring) -> None:
        """A rotation step: naming announcements are MAC'd with the key in use and accepted with
        any key held; the features are told the secret in use (a guest registers with its room key)."""
        naming = self._finders.naming
        if naming is not None:
            keys = [s.naming_key() for s in keyring.secrets()]
            naming.key = naming.state.key = keys[0]
            naming.state.also_accepted = tuple(keys[1:])
        for changed in self.key_watchers:
            changed(keyring.current)


def _moved_to(moved: Moved) -> Callable[[Interface, int], Awaitable[None]]:
    """A feature following the address, as the followers announce a move (to the interface, on a port)."""
    return lambda iface, port: moved(iface.ip)
