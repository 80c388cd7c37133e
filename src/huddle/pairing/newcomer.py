"""A device without the group's secret, before its node starts: load it, pair for it, or found
the group (docs/security.md, "Pairing").

``huddle node --group NAME`` with no secret and not ``--open`` calls :func:`prepare`:

1. ``DATA_DIR/group.key`` exists: the node runs with it (a paired or founding device restarted);
2. else it listens ``pairing.listen`` seconds for beacons of its group that carry a door
   (docs/protocol.md 9), and takes the doors of ``--pair-with``.  Doors found: it says once,
   at INFO and on stdout, who it is and its key fingerprint, then asks every door every
   :data:`ASK_EVERY` seconds (one DEALER each, a CurveZMQ client with its node key's X25519 form,
   to the door's key that the group's name gives) until one answers ACCEPTED with the group file
   (its group checked; saved 0600) or every door answered REFUSED (a ConfigError: the node does
   not start).  Beacons heard meanwhile add doors;
3. no door found, and no ``--seed``: it founds the group: a new secret in ``DATA_DIR/group.key``,
   its join code said on stdout.  With ``--seed`` and no door it stops with a message naming
   ``--pair-with`` and ``--join``: the group exists, and a second secret would split it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import zmq
import zmq.asyncio

from ..config import NodeConfig
from ..errors import ConfigError, DecodeError, HuddleError
from ..security import GROUP_FILE, GroupSecret, NodeIdentity, load_group_file, load_or_create_identity, parse_group_file
from ..wire.beacon import group_hash, unpack
from .codec import MAX_MESSAGE, Accepted, Pair, Pending, Refused, decode, encode
from .door import door_keypair

__all__ = ["ASK_EVERY", "ask_doors", "prepare", "prompt"]

log = logging.getLogger("huddle.pairing")

ASK_EVERY = 2.0  # seconds between two PAIRs to one door
_SILENT = 3 * ASK_EVERY  # a door silent this long is dialled afresh (a refused handshake is not retried)


def prompt(name: str, group: str, fp: str) -> str:
    """What the device says, once, while it waits (the same fingerprint a member sees)."""
    return (f"This device ({name}) asks to join group {group}. Its fingerprint: {fp}. "
            f"On a member: huddle pair accept {fp}, or Accept on its status page.")


def prepare(config: NodeConfig, say: Callable[[str], None] | None = None) -> NodeConfig:
    """The config to start the node with: ``config`` with the group's secret (the module docstring)."""
    if config.group_secret is not None or config.open or not config.group:
        return config  # a secret given, open mode chosen, or no group: the node decides (require_secured)
    path = config.data_dir / GROUP_FILE
    if path.exists() or path.is_symlink():
        secret = load_group_file(path)
        if secret.group != config.group:
            raise ConfigError(f"{path} is the secret of group {secret.group!r}, not of {config.group!r}: give "
                              "this group its own --data-dir")
        log.info("group %s: its secret from %s", secret.group, path)
        return replace(config, group_secret=secret)
    if say is None:
        def say(text: str) -> None:
            print(text, flush=True)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    identity = load_or_create_identity(config.data_dir)
    secret = asyncio.run(_pair_or_found(config, identity, say))
    secret.save(path)
    return replace(config, group_secret=secret)


async def _pair_or_found(config: NodeConfig, identity: NodeIdentity, say: Callable[[str], None]) -> GroupSecret:
    doors: set[str] = set(config.pairing.pair_with)
    heard: asyncio.Queue[str] = asyncio.Queue()
    async with contextlib.AsyncExitStack() as stack:
        if config.discovery.beacon:
            stack.enter_context(_listen_beacons(config, heard))
            await asyncio.sleep(config.pairing.listen)
        while not heard.empty():
            doors.add(heard.get_nowait())
        if not doors:
            if config.discovery.seeds:
                raise ConfigError(f"group {config.group!r}: no member's pairing door was found (the seeds are its "
                                  "mesh endpoints, not doors). Ask a member for its door ('huddle info') and give "
                                  "--pair-with HOST:PORT, or join with --join CODE")
            return _found(config, say)
        text = prompt(config.name, config.group, identity.fingerprint)
        log.info("%s", text)
        say(text)
        secret, by = await ask_doors(config.group, config.name, identity, doors, heard)
    log.info("accepted by the member at %s: the group's secret is saved in %s", by, config.data_dir / GROUP_FILE)
    say(f"accepted by the member at {by}: joining group {config.group}")
    return secret


def _found(config: NodeConfig, say: Callable[[str], None]) -> GroupSecret:
    secret = GroupSecret.new(config.group)
    path = config.data_dir / GROUP_FILE
    log.info("no member of group %s found: founded it (its secret in %s, key id %s)", config.group, path,
             secret.key_id)
    say(f"founded group {config.group}: its secret is in {path} (mode 0600).\n"
        f"Others join by starting 'huddle node --group {config.group}' and being accepted here (huddle pair), "
        f"or with the join code (give it to members only):\n  {secret.code}")
    return secret


@contextlib.contextmanager
def _listen_beacons(config: NodeConfig, heard: asyncio.Queue[str]) -> Iterator[None]:
    """Put ``HOST:PORT`` of each door a beacon of the group names into ``heard`` while open."""
    want = group_hash(config.group)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setblocking(False)
    try:
        sock.bind(("", config.discovery.beacon_port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen for beacons on port {config.discovery.beacon_port}: {exc.strerror}") from None
    seen: set[str] = set()

    def readable() -> None:
        while True:
            try:
                data, (host, _) = sock.recvfrom(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                beacon = unpack(data)
            except DecodeError:
                continue
            door = f"{host}:{beacon.door}"
            if beacon.group_hash == want and beacon.door and door not in seen:
                seen.add(door)
                heard.put_nowait(door)

    loop.add_reader(sock.fileno(), readable)
    try:
        yield
    finally:
        loop.remove_reader(sock.fileno())
        sock.close()


def _dealer(ctx: zmq.asyncio.Context, door: str, group: str, identity: NodeIdentity) -> zmq.asyncio.Socket:
    host, _, port = door.rpartition(":")
    host = host.strip("[]")
    keys = identity.curve()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.CURVE_SERVERKEY, door_keypair(group).public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    sock.setsockopt(zmq.SNDHWM, 2)
    sock.setsockopt(zmq.IMMEDIATE, 1)  # a PAIR waits for a connection, not in a queue
    sock.connect(f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}")
    return sock


async def ask_doors(group: str, name: str, identity: NodeIdentity, doors: set[str],
                    heard: asyncio.Queue[str] | None = None) -> tuple[GroupSecret, str]:
    """Ask every door (and those ``heard`` adds) until one gives the group file: the secret, and that door.
    ConfigError once every door refused."""
    request = encode(Pair(identity.public_key, name, identity.node_id.hex(), group))
    ctx = zmq.asyncio.Context()
    dealers: dict[str, zmq.asyncio.Socket] = {}
    refused: set[str] = set()
    answered: dict[str, float] = {}  # door -> when it last answered (or its socket was made)
    try:
        while True:
            while heard is not None and not heard.empty():
                doors.add(heard.get_nowait())
            now = time.monotonic()
            for door in [d for d in dealers if d not in refused and now - answered[d] > _SILENT]:
                dealers.pop(door).close(linger=0)  # its handshake was refused (libzmq does not dial again)
            for door in doors - dealers.keys():
                dealers[door] = _dealer(ctx, door, group, identity)
                answered[door] = now
            for door, sock in dealers.items():
                if door not in refused:
                    with contextlib.suppress(zmq.Again):
                        await sock.send(request, zmq.NOBLOCK)
            until = time.monotonic() + ASK_EVERY
            while (left := until - time.monotonic()) > 0:
                poller = zmq.asyncio.Poller()
                for sock in dealers.values():
                    poller.register(sock, zmq.POLLIN)
                for sock, _ in await poller.poll(left * 1000):
                    door = next(d for d, s in dealers.items() if s is sock)
                    answer = _read(await sock.recv())
                    answered[door] = time.monotonic()
                    if isinstance(answer, Accepted):
                        secret = _secret(answer, group)
                        if secret is not None:
                            return secret, door
                    elif isinstance(answer, Refused):
                        log.warning("pairing: the member at %s refused: %s", door, answer.reason)
                        refused.add(door)
                if refused >= dealers.keys():
                    raise ConfigError(f"every member asked ({', '.join(sorted(refused))}) refused this device: it "
                                      "did not join. Ask a member to accept it (huddle pair), or join with --join CODE")
    finally:
        for sock in dealers.values():
            sock.close(linger=0)
        ctx.term()


def _read(data: bytes) -> Pending | Refused | Accepted | None:
    try:
        message = decode(data)
    except DecodeError as exc:
        log.warning("pairing: an answer that does not parse: %s", exc)
        return None
    return None if isinstance(message, Pair) else message


def _secret(answer: Accepted, group: str) -> GroupSecret | None:
    try:
        secret = parse_group_file(answer.group_file, "a member sent")
    except HuddleError as exc:
        log.warning("pairing: %s", exc)
        return None
    if secret.group != group:
        log.warning("pairing: a member sent the secret of group %r, not of %r: ignored", secret.group, group)
        return None
    return secret
