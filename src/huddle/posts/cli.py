"""``huddle post add|get`` and ``huddle posts``: their parsers, and their calls through
:class:`~huddle.client.ApiClient` (which streams the content both ways)."""

from __future__ import annotations

import argparse
import hashlib
import mimetypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import HuddleError
from ..render import posts_text, size_text, with_names

if TYPE_CHECKING:  # the client imports aiohttp, which `huddle --help` need not load
    from ..client import ApiClient

__all__ = ["add_parsers", "run"]


def add_parsers(sub: Any, client_options: Callable[[argparse.ArgumentParser], None], epilog: str) -> None:
    post = sub.add_parser(
        "post", help="share a file with the group (Hydra posts), or save one",
        description="Posts are files with a subject, shared with every node the node meets: content-addressed "
        "(an id computed from the metadata and the content's SHA1), fetched newest first in chunks.",
        epilog=epilog)
    post_sub = post.add_subparsers(dest="post_command", metavar="ACTION", required=True)
    def action(name: str, summary: str, description: str, example: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = post_sub.add_parser(
            name, help=summary, description=description, epilog=f"example: {example}\n\n{epilog}",
            formatter_class=argparse.RawDescriptionHelpFormatter)
        return parser

    add = action("add", "add a file as a new post (streamed to the node)",
                 "Add FILE to the node's store as a new post; every node it meets fetches it.\n"
                 "Its id is the SHA1 of its subject, creation time (now), parent, MIME type and content digest.",
                 "huddle post add photo.jpg --subject 'jam 3, the lead'")
    add.add_argument("file", type=Path, metavar="FILE", help="the file to share (sent in blocks: any size)")
    add.add_argument("--subject", required=True, help="the post's subject line")
    add.add_argument("--parent", metavar="ID", help="the post this one answers (must be in the node's store)")
    add.add_argument("--mime", metavar="TYPE", help="MIME type (default: guessed from the name, else "
                     "application/octet-stream)")
    client_options(add)
    get = action("get", "save a post's content to a file (its digest checked)",
                 "Save the content of post ID (from 'huddle posts') to FILE.  The node checks its\n"
                 "digest before sending it, and this command checks it again.",
                 "huddle post get 3f2a...e1 -o photo.jpg")
    get.add_argument("id", metavar="ID", help="the post's id (40 hex digits) or a unique prefix of it, as 'posts' shows")
    get.add_argument("-o", "--out", type=Path, required=True, metavar="FILE", help="where to write it")
    client_options(get)
    posts = sub.add_parser("posts", help="list the posts a node holds, newest first",
                           description="List the posts in the node's store, newest first (by creation "
                           "time): id, size, subject, the post it answers.", epilog=epilog)
    posts.add_argument("--limit", type=int, default=100, metavar="N", help="at most N (default 100)")
    client_options(posts)


async def run(api: ApiClient, args: argparse.Namespace) -> tuple[Any, str]:
    """``huddle posts`` and ``huddle post add|get``: what the node answered, and the text for a person."""
    if args.command == "posts":
        posts = await api.posts(args.limit)
        names = await api.names()  # --json: the authors' names beside their keys
        return [with_names(p, names) for p in posts], posts_text(posts, names)
    if args.post_command == "add":
        path: Path = args.file
        try:
            f = path.open("rb")
            size = os.fstat(f.fileno()).st_size
        except OSError as exc:
            raise HuddleError(f"cannot read {path}: {exc.strerror}") from None
        mime = args.mime or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        with f:
            post = await api.add_post(f, size, args.subject, mime, args.parent)
        return post, f"{'added' if post['new'] else 'already held'} post {post['id']} ({size_text(post['size'])})"
    meta = await api.post(args.id)  # get
    out: Path = args.out
    tmp = out.with_name(out.name + ".part")
    h = hashlib.sha1(usedforsecurity=False)
    h256 = hashlib.sha256()  # a sealed post's (docs/protocol.md 15.7)
    try:
        with tmp.open("wb") as w:
            async for block in api.post_content(meta["id"]):  # the whole id the prefix named
                h.update(block)
                h256.update(block)
                w.write(block)
        if h.hexdigest() != meta["digest"]:
            raise HuddleError(f"the content received does not match the post's digest {meta['digest']}")
        if meta.get("sha256") and h256.hexdigest() != meta["sha256"]:
            raise HuddleError(f"the content received does not match the post's sealed SHA-256 {meta['sha256']}")
        tmp.replace(out)
    except OSError as exc:
        raise HuddleError(f"cannot write {out}: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return meta | {"out": str(out)}, f"saved post {meta['id'][:12]} ({size_text(meta['size'])}) to {out}"
