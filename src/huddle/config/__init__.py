"""Node configuration: defaults, a TOML file, then command-line flags (docs/configuration.md).

``sections`` holds the node's own sections (mesh, discovery, api, timing) and the
node types; a feature's section lives in its package (``posts.section``,
``guests.section``).  ``model`` composes them into :class:`NodeConfig` and lists
every setting; ``file`` reads the TOML file.
"""

from ..mdnstype import normalise_mdns_type
from .file import load_config
from .model import SECTIONS, SETTINGS, NodeConfig, Setting, setting_named
from .sections import (
    BUILTIN_TYPES,
    CUT_OFF_MODES,
    DEFAULT_API,
    DEFAULT_BEACON_PORT,
    ApiSection,
    DiscoverySection,
    MeshSection,
    NodeType,
    TimingSection,
    parse_hostport,
    parse_naming_endpoint,
    resolve_seed,
)

__all__ = [
    "BUILTIN_TYPES", "CUT_OFF_MODES", "DEFAULT_API", "DEFAULT_BEACON_PORT", "SECTIONS", "SETTINGS", "ApiSection",
    "DiscoverySection", "MeshSection", "NodeConfig", "NodeType", "Setting", "TimingSection", "load_config",
    "normalise_mdns_type", "parse_hostport", "parse_naming_endpoint", "resolve_seed", "setting_named",
]
