"""huddle: a brokerless peer-to-peer event mesh for small groups on one network.

The public facade; everything not listed in ``__all__`` may change.
"""

from typing import TYPE_CHECKING, Any

from .config import NodeConfig, load_config
from .errors import (
    ConfigError,
    DataDirLocked,
    DecodeError,
    HuddleError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
)
from .ids import NodeId
from .protocol import Mesh, Timing
from .wire import PROTOCOL_VERSION, Message, decode, encode

if TYPE_CHECKING:
    from .embed.peer import Peer
    from .node import Node, run_node

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``Node`` and ``run_node`` are imported when first used: the driver needs
    pyzmq, aiohttp and zeroconf, and code that only reads huddle's data (the
    pipeline's Spark workers, the codec, the document) should not."""
    if name in ("Node", "run_node"):
        from . import node  # noqa: PLC0415 - the driver (pyzmq, aiohttp, zeroconf) on first use only

        return getattr(node, name)
    if name == "Peer":  # a Zyre-style peer in-process (docs/peer-api.md): its node, or ZRE's driver, on first use
        from .embed.peer import Peer  # noqa: PLC0415

        return Peer
    raise AttributeError(f"module 'huddle' has no attribute {name!r}")

__all__ = [
    "PROTOCOL_VERSION",
    "ConfigError",
    "DataDirLocked",
    "DecodeError",
    "HuddleError",
    "LocalProtocolError",
    "Mesh",
    "Message",
    "Node",
    "NodeConfig",
    "NodeId",
    "Peer",
    "ProtocolError",
    "RemoteProtocolError",
    "Timing",
    "__version__",
    "decode",
    "encode",
    "load_config",
    "run_node",
]
