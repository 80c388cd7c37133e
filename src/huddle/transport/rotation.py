"""Rotating the group secret while the group runs (docs/security.md, "Rotating the group secret").

The keyring's three steps (security/keyring.py), carried out on the mesh's sockets:

- **install** a new secret: ZAP admits its client key too (group mode), DEALERs may dial
  with it (a peer's handshake refused with one key is tried with the other:
  :meth:`ZmqTransport._handshake_failed`), and the ROUTER also listens as the new secret's
  server, on a second port (a listener keeps the server key it was bound with);
- **switch** to it: DEALERs dial with it first, the ROUTER binds with it from now on, the
  node advertises the new secret's port as its endpoint (HELO to every peer, as after an
  address change, then the beacon, mDNS and the naming brokers), and closes the old
  secret's listener: its peers follow the HELO to the new port, and a node that holds both
  secrets must not be reachable at two endpoints (a stale list naming the old one would
  have a peer open a second connection under its id, which the ROUTER does not read);
- **retire** the old one: ZAP no longer admits its client key, messages of connections that
  authenticated with it are dropped (its User-Id revoked), and this node's own connections
  dialled with it are re-opened with the secret in use.  A node holding only the retired
  secret is refused.

The keyring is saved in the data directory after each step, so a restart keeps it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ConfigError
from ..security import GroupSecret, Keyring, KeyringError, parse_group_file
from .zap import MeshSecurity
from .zmq_transport import ZmqTransport

__all__ = ["KeyRotation", "RotationStats"]

log = logging.getLogger("huddle.transport")


@dataclass(slots=True)
class RotationStats:
    """The rotation steps a node took since it started (``GET /api/v1/group/keys`` → ``stats``)."""

    installed: int = 0
    switched: int = 0
    retired: int = 0
    redialled: int = 0  # own connections re-opened with another key (a refused handshake, a retired key)


class KeyRotation:
    """The rotation of one node's group secret.  ``advertise(port)`` makes the ROUTER's port
    ``port`` this node's endpoint (the mesh, the naming client, the beacon and mDNS);
    ``changed(keyring)`` is told after each step (the naming keys, the guests' room key);
    ``host()`` is the address the ROUTER listens on now (it follows the interface)."""

    def __init__(self, security: MeshSecurity, transport: ZmqTransport, *, host: Callable[[], str], port: int,
                 port_range: tuple[int, int], data_dir: Path, advertise: Callable[[int], Awaitable[None]],
                 changed: Callable[[Keyring], None] = lambda keyring: None) -> None:
        assert security.keyring is not None and transport.guard is not None
        self.keyring: Keyring = security.keyring
        self.security = security
        self.transport = transport
        self.host, self.port_range = host, port_range
        self.data_dir = data_dir
        self.advertise = advertise
        self.changed = changed
        self.ports: dict[str, int] = {self.keyring.key_id: port}  # key id -> the port listening with it
        self.stats = RotationStats()
        held = [s.key_id for s in self.keyring.held]  # in the order installed
        for secret in self.keyring.secrets()[1:]:  # restarted after an install, before the switch: both
            if held.index(secret.key_id) > held.index(self.keyring.key_id):
                self.ports[secret.key_id] = transport.listen(secret.curve_server(), host(), port_range)

    def describe(self) -> dict[str, object]:
        """The group, the key in use, each key held with its state and port, the retired key ids."""
        keys = [k | {"port": self.ports.get(k["key_id"], 0)} for k in self.keyring.describe()]
        self.stats.redialled = self.transport.key_redials
        return {"group": self.keyring.group, "key_id": self.keyring.key_id, "keys": keys,
                "retired": list(self.keyring.retired), "stats": asdict(self.stats)}

    async def install(self, text: str) -> dict[str, object]:
        """Install the group file ``text`` beside the secret in use (nothing if held already)."""
        try:  # scrypt (32 MiB, ~0.1 s): not on the event loop
            secret = await asyncio.to_thread(parse_group_file, text, "given")
        except ConfigError as exc:
            raise KeyringError(400, str(exc)) from None
        if self.keyring.install(secret):
            guard = self.transport.guard
            assert guard is not None
            self.ports[secret.key_id] = self.transport.listen(secret.curve_server(), self.host(), self.port_range)
            admission = self.security.admission(secret)
            if admission is not None:
                guard.admit(*admission)
            guard.add_dial(self.security.dial_key(secret))
            self.keyring.save(self.data_dir)
            self.stats.installed += 1
            self.changed(self.keyring)
            log.warning("group key %s installed beside %s (listening with it on port %d): switch to it on every "
                        "member, then retire %s", secret.key_id, self.keyring.key_id, self.ports[secret.key_id],
                        self.keyring.key_id)
        return self.describe()

    async def switch(self, key_id: str) -> dict[str, object]:
        """Use the held key ``key_id``: dial with it first, advertise its port."""
        if self.keyring.switch(key_id):
            secret = self.keyring.current
            guard = self.transport.guard
            assert guard is not None
            guard.add_dial(self.security.dial_key(secret), first=True)
            self.transport.use_server(secret.curve_server())
            self.keyring.save(self.data_dir)
            self.stats.switched += 1
            self.changed(self.keyring)
            if key_id not in self.ports:  # back to a key whose listener a switch closed
                self.ports[key_id] = self.transport.listen(secret.curve_server(), self.host(), self.port_range)
            port = self.ports[key_id]
            log.warning("switched to group key %s: now at port %d", key_id, port)
            for old in [k for k in self.ports if k != key_id]:  # one endpoint: the new one
                self.transport.unbind(self.host(), self.ports.pop(old))
            await self.advertise(port)
        return self.describe()

    def retire(self, key_id: str) -> dict[str, object]:
        """Drop the held key ``key_id`` (not the one in use): its holders are cut off."""
        secret: GroupSecret | None = self.keyring.retire(key_id)
        if secret is not None:
            guard = self.transport.guard
            assert guard is not None
            port = self.ports.pop(key_id, 0)
            if port:  # retired before this node switched away from it (it was installed, never used)
                self.transport.unbind(self.host(), port)
            admission = self.security.admission(secret)
            if admission is not None:
                guard.revoke(admission[0])  # refused at its next handshake, its messages dropped now
            guard.drop_dial(key_id)
            redialled = self.transport.redial_key(key_id)
            self.keyring.save(self.data_dir)
            self.stats.retired += 1
            self.changed(self.keyring)
            log.warning("group key %s retired: its holders are refused; %d own connections "
                        "re-opened with %s", key_id, redialled, self.keyring.key_id)
        return self.describe()
