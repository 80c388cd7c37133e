"""huddle: a brokerless peer-to-peer event mesh for small groups on one network.

The public facade; everything not listed in ``__all__`` may change.
"""

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
from .node import Node, run_node
from .protocol import Mesh, Timing
from .wire import PROTOCOL_VERSION, Message, decode, encode

__version__ = "0.1.0"

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
    "ProtocolError",
    "RemoteProtocolError",
    "Timing",
    "__version__",
    "decode",
    "encode",
    "load_config",
    "run_node",
]
