"""Who the node is as it starts (docs/security.md): its keypair, its id, and the mesh's
security made from them, the group secret (a rotation's, when it switched before a
restart) and the trust list."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..config import NodeConfig
from ..errors import ConfigError
from ..ids import NodeId
from ..log.datadir import DataDir
from ..security import Keyring, NodeIdentity, TrustList, load_or_create_identity, node_id_for, own_id_refusal
from ..transport.zap import MeshSecurity

__all__ = ["Identity", "load_identity", "say_security"]

log = logging.getLogger("huddle.node")


@dataclass(frozen=True, slots=True)
class Identity:
    """What :func:`load_identity` found."""

    keys: NodeIdentity  # the node's keypair (DATA_DIR/node.key)
    uuid: NodeId
    config: NodeConfig  # with the group secret in use (a rotation may have switched it)
    security: MeshSecurity  # open, group or allow-list mode (transport/zap.py)
    new: bool  # made at this start (a new data directory, or one just taken): no peer holds records in its name


def load_identity(data_dir: DataDir, config: NodeConfig, *, renewed: bool) -> Identity:
    """The node's keypair and id (made on a first start), refused if it is a legacy id in a group
    with a secret; the group secret in use, and the mesh's security.  ``renewed``: the identity
    was just taken after a retirement."""
    new = renewed or not (data_dir.path / "node-id").exists()
    keys = load_or_create_identity(data_dir.path)
    uuid = data_dir.node_id(new=node_id_for(keys.public_key))
    if config.group_secret is not None and (why := own_id_refusal(uuid, keys, data_dir.path)):
        raise ConfigError(why)  # a legacy id: not admitted in a group with a secret
    keyring = Keyring.restore(data_dir.path, config.group_secret)  # a rotation's keys, if any
    if keyring is not None and keyring.current != config.group_secret:  # switched before a restart
        config = config.with_overrides(group_secret=keyring.current)
    security = MeshSecurity(config.group_secret, keys, allow_list=TrustList.load(data_dir.path)
                            if config.allow_list else None, keyring=keyring)
    return Identity(keys, uuid, config, security, new)


def say_security(security: MeshSecurity, keys: NodeIdentity) -> None:
    """Log how the mesh is secured, and this node's key (a warning in an open group)."""
    said = security.describe()
    if "warning" in said:
        log.warning("%s; this node's key: %s", said["warning"], keys.fingerprint)
    else:
        log.info("mesh secured (CurveZMQ): %s mode, group key %s; this node's key: %s", said["mode"],
                 said["key_id"], keys.fingerprint)
