"""Hydra posts: content-addressed files shared between the nodes of a group.

``model`` (the post and its id), ``codec`` (the sync messages' bytes),
``sync`` (client and server state machines, sans-I/O), ``store`` (the
on-disk store) and ``service`` (the asyncio driver inside a node).
"""

from .model import Post, PostError, content_digest, post_id

__all__ = ["Post", "PostError", "content_digest", "post_id"]
