"""Posts as a feature of the node (:class:`huddle.ports.Feature`): everything of Hydra
posts that plugs into a node, in one place.

* its peer service (:class:`~huddle.posts.peer.PostsPeer`: BULK, the ``AA A0`` payloads),
  added to the mesh, and taking those payloads from addressed delivery;
* its driver (:class:`~huddle.posts.service.PostService` over the on-disk store), started
  with the node's settings ``posts_*`` and fed the peer service's events alone;
* its event (:class:`~huddle.posts.model.PostAdded`, ``post_new`` in the stream);
* its routes (:mod:`huddle.api.posts_http`), its commands (:mod:`huddle.posts.cli`) and
  its facts (how many posts, how many octets).

The service sees the node through :class:`_Link` (its :class:`~huddle.posts.ports.PostsHost`),
made of the feature host and the peer service (a BULK is the peer service's to send).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from ..config import NodeConfig
from ..errors import LocalProtocolError
from ..ids import NodeId
from ..ports import ApiHandler, ClientOptions, FeatureBase, FeatureHost, Renderer, Spawn, Subscriber
from ..protocol.service import PayloadTaker, PeerService
from .model import PostAdded
from .peer import POSTS_INPUTS, PostsPeer

if TYPE_CHECKING:  # the driver and the routes load when a node runs, not with `huddle --help`
    from aiohttp import web

    from .service import PostService

__all__ = ["PostsFeature"]


class _Link:
    """The node as the post service sees it (posts/ports.py PostsHost): the feature host,
    with BULKs sent through the posts peer service."""

    def __init__(self, host: FeatureHost, peer: PostsPeer) -> None:
        self._host, self._peer = host, peer

    @property
    def uuid(self) -> NodeId | None:
        return self._host.uuid

    @property
    def config(self) -> NodeConfig:
        return self._host.config

    @property
    def mesh(self) -> _Link:  # LivePeers: the admitted peers
        return self

    def alive_peers(self) -> list[NodeId]:
        return self._host.mesh.alive_peers()

    def send_to(self, peer: NodeId, payload: bytes) -> int:
        return self._host.send_to(peer, payload)

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        return await self._host.send_to_wait(peer, payload, timeout)

    def send_bulk(self, peer: NodeId, head: bytes, data: bytes | memoryview) -> bool:
        """Send a BULK (``head``, then ``data`` as a frame of its own) to an admitted peer on
        its connection now, outside the addressed-message channel: not acknowledged, not
        re-sent.  False if the peer is not admitted (nothing sent)."""
        ok = self._peer.send_bulk(peer, head, data)
        self._host.execute()
        return ok

    def queued_bulk(self, peer: NodeId) -> int:
        return self._host.queued_bulk(peer)


class PostsFeature(FeatureBase):
    """Hydra posts (the module docstring)."""

    name: Final = "posts"
    event_renderers: Mapping[type, Renderer] = MappingProxyType({PostAdded: PostAdded.to_json})

    def __init__(self) -> None:
        self._peer: PostsPeer | None = None
        self._service: PostService | None = None

    @property
    def service(self) -> PostService:
        """The running post service (what the routes read)."""
        if self._service is None:
            raise LocalProtocolError("the node is not running")
        return self._service

    def peer_services(self, uuid: NodeId) -> Sequence[PeerService]:
        self._peer = PostsPeer(uuid)
        return [self._peer]

    def payload_takers(self) -> Sequence[PayloadTaker]:
        return [] if self._peer is None else [self._peer]  # Hydra's payloads (AA A0) go to posts

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        from .model import Policy  # noqa: PLC0415 - loaded as the node starts, not with the CLI
        from .service import PostService, PostSettings  # noqa: PLC0415
        from .store import PostStore  # noqa: PLC0415

        assert self._peer is not None, "peer_services() comes before start()"
        cfg = host.config  # the posts settings, read here alone
        settings = PostSettings(policy=Policy.parse(cfg.posts.policy), chunk_size=cfg.posts.chunk,
                                interval=cfg.posts.interval, require_seal=cfg.group_secret is not None)
        service = self._service = PostService(_Link(host, self._peer), PostStore(cfg.data_dir, host.identity),
                                              settings, host.publish, limits=cfg.limits.posts)
        stack.callback(service.close)
        spawn(service.run())

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        # The posts peer service's events (Hydra's messages, BULKs, its peers) go to the post
        # service alone, never to the event stream.
        return [(POSTS_INPUTS, self.service.handle)]

    def routes(self, app: web.Application) -> None:
        from ..api.posts_http import add_post_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_post_routes(app, self)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        from .cli import add_parsers, run  # noqa: PLC0415 - only the CLI adds commands

        add_parsers(sub, client_options, epilog)
        return {"post": run, "posts": run}

    def facts(self) -> dict[str, object] | None:
        service = self._service
        if service is None:
            return None
        return {"posts": len(service.store), "octets": service.store.used()}
