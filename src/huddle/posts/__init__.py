"""Hydra posts: content-addressed files shared between the nodes of a group.

``model`` (the vocabulary: the post and its id, the fetch policy, the
errors), ``codec`` (the sync messages' bytes), ``sync`` (client and server
state machines, sans-I/O), ``store`` (the on-disk store), ``peer`` (the
peer service the mesh hosts: BULKs, Hydra's addressed messages, peers up and
down), ``ports`` (what the service needs of its node) and ``service`` (the
asyncio driver inside a node, fed by ``peer``'s events).
"""

from .model import Post, PostError, post_id

__all__ = ["Post", "PostError", "post_id"]
