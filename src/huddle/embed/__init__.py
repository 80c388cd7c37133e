"""A Zyre-style peer for people who embed huddle rather than run a daemon (docs/peer-api.md).

``peer`` is :class:`~huddle.embed.peer.Peer`, the one public class (``huddle.Peer``);
``events`` its events (pure); ``wire`` the mesh side's payloads (pure: ZRE's messages,
framed into one addressed message); ``mesh`` the feature it adds to an in-process node;
``zre`` its side on a ZRE network (the zre package's driver).
"""
