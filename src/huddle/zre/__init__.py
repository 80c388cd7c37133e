"""ZRE, as Zyre and pyre speak it (docs/zre.md): a node with ``--zre`` joins their network as
one of their own and bridges its group's SHOUTs into the group's log.

``codec`` (the beacons and messages as bytes) and ``peer`` (a peer's machine) are pure;
``driver`` is the I/O; ``feature`` plugs it into the node; ``section`` is ``[zre]``.  A node
started without ``--zre`` loads ``feature`` and ``section`` alone.
"""
