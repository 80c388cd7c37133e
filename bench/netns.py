"""Network namespaces for the benches and the tests: one bridge, one namespace per host.

A bridge in a namespace of its own (``<tag>br``, with ``br0``) and one
namespace per host (``<tag>h1`` .. ``<tag>hN``), each joined to the bridge by
a veth pair: ``eth0`` in the host, ``vb<i>`` on the bridge; host ``i`` has the
address ``10.<net>.X.i/24`` (X random per run, so runs side by side do not
meet).  Nothing leaves these namespaces: no route, no NAT (../shared/TESTING.md).

Faults, all on the bridge or inside a host, all undone by :meth:`Namespaces.down`:

- :meth:`Namespaces.link`: host ``i`` loses / gets back its network (``vb<i>`` down / up);
- :meth:`Namespaces.partition` / :meth:`Namespaces.heal`: two sides cut from each
  other (an nft bridge table; broadcasts included), then mended;
- :meth:`Namespaces.lose`: drop a share of every frame crossing the bridge (nft numgen);
- :meth:`Namespaces.readdress`: another address on the same /24 (a DHCP renewal);
- :meth:`Namespaces.host_nft`: nft rules inside one host (one-way links, resets).

Hosts are numbered from 1, as their ``vb<i>`` are.  Used by bench/soak.py,
bench/addressed_loss.py and tests/test_faults.py (which put bench/ on sys.path:
bench/ is not a package).  Needs root, ``ip`` (iproute2) and, for the nft
faults, ``nft``.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
import sys

__all__ = ["CLONE_NEWNET", "Namespaces", "enter_netns", "ip", "missing_tools"]

CLONE_NEWNET = 0x40000000  # setns(2): join a network namespace
CUT_TABLE = "huddle_cut"  # nft bridge table of a partition
LOSS_TABLE = "huddle_loss"  # nft bridge table of random loss


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


def missing_tools(*tools: str) -> str | None:
    """Why namespaces (and ``tools``, default ip and nft) cannot be used here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in tools or ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make test installs iproute2 and nftables as root: scripts/system-deps)"
    return None


def enter_netns(name: str) -> None:
    """Move the calling thread (only it) into network namespace ``name``: the
    sockets it opens from then on live there.  (Python 3.11 has no os.setns.)"""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({name}): {os.strerror(err)}")
    finally:
        os.close(fd)


class Namespaces:
    """A bridge in its own namespace and one namespace per host."""

    def __init__(self, hosts: int, *, prefix: str, net: int) -> None:
        """``prefix``: the start of every namespace's name (who made it); ``net``: the
        second octet of the hosts' 10.net.X.0/24 (one per user, so they never share one)."""
        tag = f"{prefix}{os.getpid() % 10000}{random.randrange(100)}"
        self.bridge = f"{tag}br"
        self.hosts = [f"{tag}h{i}" for i in range(1, hosts + 1)]
        self.subnet = f"10.{net}.{random.randrange(1, 250)}"
        self.ips = [f"{self.subnet}.{i}" for i in range(1, hosts + 1)]
        self.created: list[str] = []
        self.moves = [0] * hosts  # how often each host was given another address
        self._cut = False

    def host(self, index: int) -> str:
        return self.hosts[index - 1]

    def exec(self, index: int, *argv: str) -> list[str]:
        """The command line that runs ``argv`` inside host ``index``."""
        return ["ip", "netns", "exec", self.host(index), *argv]

    def python(self, index: int, *args: str) -> list[str]:
        """The command line that runs this Python, with ``args``, inside host ``index``."""
        return self.exec(index, sys.executable, *args)

    def up(self) -> None:
        ip("netns", "add", self.bridge)
        self.created.append(self.bridge)
        ip("-n", self.bridge, "link", "set", "lo", "up")
        ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        ip("-n", self.bridge, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts, 1):
            ip("netns", "add", host)
            self.created.append(host)
            ip("-n", host, "link", "set", "lo", "up")
            ip("-n", host, "link", "add", "eth0", "type", "veth", "peer", "name", f"vb{i}", "netns", self.bridge)
            ip("-n", self.bridge, "link", "set", f"vb{i}", "master", "br0")
            ip("-n", self.bridge, "link", "set", f"vb{i}", "up")
            ip("-n", host, "addr", "add", f"{self.ips[i - 1]}/24", "brd", "+", "dev", "eth0")
            ip("-n", host, "link", "set", "eth0", "up")

    def down(self) -> None:
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True, timeout=20)
        self.created.clear()

    def link(self, index: int, up: bool) -> None:
        """Host ``index`` loses / gets back its network (its own eth0 stays up)."""
        ip("-n", self.bridge, "link", "set", f"vb{index}", "up" if up else "down")

    def partition(self, side: list[int], other: list[int] | None = None) -> None:
        """Cut the hosts of ``side`` from those of ``other`` (every other host if None),
        broadcasts included; each still reaches the hosts of its own side."""
        rest = other if other is not None else [i for i in range(1, len(self.hosts) + 1) if i not in side]
        a = ", ".join(f'"vb{i}"' for i in side)
        b = ", ".join(f'"vb{i}"' for i in rest)
        self.bridge_nft(f"add table bridge {CUT_TABLE}\n"
                        f"add chain bridge {CUT_TABLE} cut {{ type filter hook forward priority 0; policy accept; }}\n"
                        f"add rule bridge {CUT_TABLE} cut iifname {{ {a} }} oifname {{ {b} }} drop\n"
                        f"add rule bridge {CUT_TABLE} cut iifname {{ {b} }} oifname {{ {a} }} drop\n")
        self._cut = True

    def heal(self) -> None:
        """Remove the partition, if there is one."""
        if self._cut:
            ip("netns", "exec", self.bridge, "nft", "delete", "table", "bridge", CUT_TABLE)
            self._cut = False

    def lose(self, percent: int) -> None:
        """Drop ``percent`` % of all frames crossing the bridge, at random (nft numgen);
        0: no loss.  Replaces the share set before."""
        subprocess.run(["ip", "netns", "exec", self.bridge, "nft", "delete", "table", "bridge", LOSS_TABLE],
                       check=False, capture_output=True, timeout=20)
        if percent:
            self.bridge_nft(f"add table bridge {LOSS_TABLE}\n"
                            f"add chain bridge {LOSS_TABLE} lossy "
                            "{ type filter hook forward priority 0; policy accept; }\n"
                            f"add rule bridge {LOSS_TABLE} lossy numgen random mod 100 < {percent} drop\n")

    def readdress(self, index: int) -> tuple[str, str]:
        """Give host ``index`` another address on the same /24 (a DHCP renewal); (old, new)."""
        old = self.ips[index - 1]
        self.moves[index - 1] = (self.moves[index - 1] + 1) % 20
        new = f"{self.subnet}.{index + 10 * self.moves[index - 1]}"
        ip("-n", self.host(index), "addr", "del", f"{old}/24", "dev", "eth0")
        ip("-n", self.host(index), "addr", "add", f"{new}/24", "brd", "+", "dev", "eth0")
        self.ips[index - 1] = new
        return old, new

    def bridge_nft(self, rules: str) -> None:
        """Load nft ``rules`` in the bridge's namespace."""
        subprocess.run(["ip", "netns", "exec", self.bridge, "nft", "-f", "-"], input=rules.encode(),
                       check=True, capture_output=True, timeout=20)

    def host_nft(self, index: int, rules: str) -> None:
        """Load nft ``rules`` inside host ``index``'s own namespace."""
        subprocess.run(self.exec(index, "nft", "-f", "-"), input=rules.encode(), check=True, capture_output=True,
                       timeout=20)

    def host_nft_delete(self, index: int, family: str, table: str) -> None:
        """Remove the nft table ``family table`` from host ``index``."""
        subprocess.run(self.exec(index, "nft", "delete", "table", family, table), check=True, capture_output=True,
                       timeout=20)
