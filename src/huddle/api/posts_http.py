"""HTTP routes of post sharing (Hydra posts), added to the node's API app by the posts feature.

    POST /api/v1/posts?subject=S[&parent=ID][&mime=TYPE]   body: the content (streamed to disk)
    GET  /api/v1/posts[?limit=N]                             newest first
    GET  /api/v1/posts/stats                                 sync counters
    GET  /api/v1/posts/{id}                                  metadata
    GET  /api/v1/posts/{id}/content                          the content; Range requests work

A post's ``{id}`` is its 40 hex digits or any unique prefix of them (at least 4: api/resolve.py).

A post's content comes from anyone in the group: it is served as a download
(``Content-Disposition: attachment``), never sniffed, and sandboxed by its
``Content-Security-Policy``, so a ``text/html`` post cannot run script with the
API's origin.  An upload's body must arrive with no pause longer than
api.body-timeout between blocks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import Protocol

from aiohttp import web

from ..errors import CutOffReadOnly
from ..posts.model import MAX_MIME, CorruptContent, PostError, UnknownPost, is_post_id, now_timestamp
from ..posts.service import PostService
from .common import NODE_KEY, STATE_KEY, file_response
from .common import error_response as _error
from .resolve import path_text, post_id

__all__ = ["POSTS_KEY", "PostsPort", "add_post_routes"]

log = logging.getLogger("huddle.posts")

UPLOAD_BLOCK = 256 * 1024
_ID = "{pid}"  # the whole id or a unique prefix (_pid)
# What a post's content is served with: a download, of the type it says, that runs nothing.
CONTENT_HEADERS = {
    "Content-Disposition": "attachment",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "sandbox; default-src 'none'",
}


class PostsPort(Protocol):
    """What these routes read of the posts feature (posts/feature.py): its running service."""

    @property
    def service(self) -> PostService: ...


POSTS_KEY: web.AppKey[PostsPort] = web.AppKey("posts")


def _service(request: web.Request) -> PostService:
    return request.app[POSTS_KEY].service


def _posts_known(request: web.Request) -> Iterator[tuple[str, str]]:
    """The posts held, as (id, subject): read only when a prefix is given, not a whole id."""
    for post in _service(request).store.newest_first():
        yield post.id, post.subject


def _pid(request: web.Request) -> str:
    """The post the path names: its whole id, or the one post whose id starts so."""
    return post_id(request, path_text(request, "pid"), _posts_known(request))


def _cannot_store(exc: OSError) -> web.Response:
    log.error("cannot store an uploaded post: %s", exc)
    return _error(507, f"cannot store the content on this node: {exc.strerror or exc}; no post was added")


def _too_large(service: PostService, size: int) -> web.Response:
    service.refused.uploads_refused += 1
    service.warn("upload", "refusing an upload of %d octets or more: posts.max-size is %d", size,
                 service.limits.max_size)
    return _error(413, f"the content is over this node's posts.max-size ({service.limits.max_size} octets); "
                       "no post was added")


async def _post_post(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    state = request.app[STATE_KEY]
    if node.read_only:  # as for events: a read-only node type that is cut off records nothing
        raise CutOffReadOnly(f"this {node.node_type.name} node is cut off from the group and read-only until "
                             "a peer is back; no post was added")
    service = _service(request)
    q = request.query
    unknown = set(q) - {"subject", "parent", "mime"}
    if unknown:
        return _error(400, f"unknown parameter(s): {', '.join(sorted(unknown))}; expected subject, parent, mime")
    subject = q.get("subject")
    if subject is None:
        return _error(400, "give the post's subject: ?subject=...")
    parent = q.get("parent", "")
    if parent:  # its whole id or a unique prefix
        parent = post_id(request, parent, _posts_known(request))
    if parent and not is_post_id(parent):
        return _error(400, f"parent {parent!r} is not a post id (40 lowercase hex digits)")
    if parent and not service.store.holds(parent):
        return _error(404, f"parent post {parent} is not in this node's store")
    mime = q.get("mime") or request.headers.get("Content-Type") or "application/octet-stream"
    if len(mime) > MAX_MIME:
        return _error(400, "MIME type too long")
    max_size = service.limits.max_size
    if request.content_length is not None and request.content_length > max_size:
        return _too_large(service, request.content_length)
    try:
        upload = service.store.upload()
    except OSError as exc:
        return _cannot_store(exc)
    try:
        while True:
            async with asyncio.timeout(state.limits.body_timeout):
                block = await request.content.read(UPLOAD_BLOCK)
            if not block:
                break
            if upload.size + len(block) > max_size:  # no Content-Length, or it was not the truth
                upload.abort()
                return _too_large(service, upload.size + len(block))
            upload.write(block)
    except TimeoutError:
        upload.abort()
        state.counters.body_timeouts += 1
        state.refused("upload", "API: an upload paused longer than %s s; nothing was added", state.limits.body_timeout)
        return _error(408, f"the upload paused longer than {state.limits.body_timeout} s (api.body-timeout); "
                      "no post was added")
    except OSError as exc:  # the disk is full or failing
        upload.abort()
        return _cannot_store(exc)
    except BaseException:
        upload.abort()
        raise
    try:
        post, new = upload.finish(subject, now_timestamp(time.time()), parent, mime)
    except PostError as exc:
        return _error(400, str(exc))
    except OSError as exc:
        upload.abort()
        return _cannot_store(exc)
    if new:
        service.added(post)
    return web.json_response(post.to_json() | {"new": new}, status=201 if new else 200)


async def _get_posts(request: web.Request) -> web.Response:
    service = _service(request)
    raw = request.query.get("limit", "1000")
    if not raw.isdigit() or not 1 <= int(raw) <= 100_000:
        return _error(400, "'limit' must be 1..100000")
    return web.json_response([p.to_json() for p in service.store.newest_first(int(raw))])


async def _get_stats(request: web.Request) -> web.Response:
    return web.json_response(_service(request).describe())


async def _get_post(request: web.Request) -> web.Response:
    pid = _pid(request)
    post = _service(request).store.get(pid)
    if post is None:
        return _error(404, f"no post {pid} in this node's store")
    return web.json_response(post.to_json())


async def _get_content(request: web.Request) -> web.StreamResponse:
    store = _service(request).store
    pid = _pid(request)
    post = store.get(pid)
    if post is None:
        return _error(404, f"no post {pid} in this node's store")
    try:
        path = store.verify(pid)  # the digest is checked before anything is served
    except UnknownPost:
        return _error(404, f"no post {pid} in this node's store")
    except CorruptContent as exc:
        return _error(410, f"{exc}; it will be fetched again from a peer")
    # Range requests: 206, or 416 for a bad one (file_response); streamed from disk.
    return file_response(request, path, {"Content-Type": post.mime_type, "X-Post-Digest": post.digest,
                                        **CONTENT_HEADERS})


def add_post_routes(app: web.Application, posts: PostsPort) -> None:
    app[POSTS_KEY] = posts
    app.router.add_post("/api/v1/posts", _post_post)
    app.router.add_get("/api/v1/posts", _get_posts)
    app.router.add_get("/api/v1/posts/stats", _get_stats)
    app.router.add_get(f"/api/v1/posts/{_ID}", _get_post)
    app.router.add_get(f"/api/v1/posts/{_ID}/content", _get_content)
