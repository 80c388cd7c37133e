"""Hydra on its own wire (docs/hydra.md): a node started with ``--zre`` serves its posts to
Hydra nodes (edgenet/hydra) the way Hydra's own server does, on a ROUTER it advertises as the
ZRE header ``X-HYDRA``.

``wire`` (the messages as bytes) and ``server`` (a session's machine) are pure; ``feature``
is the I/O and plugs it into the node.  Posts among huddle nodes keep the mesh's own path
(docs/protocol.md 15).
"""
