"""``huddle post add|get`` and ``huddle posts``: parsers and the calls to the node's API."""

from __future__ import annotations

import argparse
import hashlib
import json
import mimetypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:
    from ..client import ApiClient

__all__ = ["add_parsers", "run"]

# A large upload or download may take long; only a silent connection is an error.
TRANSFER_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=120)
BLOCK = 1024 * 1024


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
    get.add_argument("id", metavar="ID", help="the post's id: 40 hex digits")
    get.add_argument("-o", "--out", type=Path, required=True, metavar="FILE", help="where to write it")
    client_options(get)
    posts = sub.add_parser("posts", help="list the posts a node holds, newest first",
                           description="List the posts in the node's store, newest first (by creation "
                           "time): id, size, subject, the post it answers.", epilog=epilog)
    posts.add_argument("--limit", type=int, default=100, metavar="N", help="at most N (default 100)")
    client_options(posts)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def posts_text(posts: list[dict[str, Any]]) -> str:
    return "\n".join(f"{p['id'][:12]}  {p['timestamp']}  {_size(p['size']):>10}  {p['mime_type']:<24} {p['subject']}"
                     + (f"  (re {p['parent_id'][:12]})" if p.get("parent_id") else "") for p in posts) or "no posts"


async def _fail(resp: aiohttp.ClientResponse) -> None:
    from ..client import ApiError

    if resp.status >= 400:
        text = await resp.text()
        try:
            reason = json.loads(text).get("error", text[:200])
        except (ValueError, AttributeError):
            reason = text[:200]
        raise ApiError(f"{resp.status} {reason}")


async def run(api: ApiClient, args: argparse.Namespace, show: Callable[[Any, str], None]) -> None:
    from ..client import ApiError

    url = api.base_url + "/api/v1/posts"
    try:
        if args.command == "posts":
            async with api.session.get(url, params={"limit": str(args.limit)}) as resp:
                await _fail(resp)
                posts = await resp.json()
            show(posts, posts_text(posts))
        elif args.post_command == "add":
            path: Path = args.file
            try:
                f = path.open("rb")
                size = os.fstat(f.fileno()).st_size
            except OSError as exc:
                raise ApiError(f"cannot read {path}: {exc.strerror}") from None
            mime = args.mime or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            params = {"subject": args.subject, "mime": mime} | ({"parent": args.parent} if args.parent else {})
            with f:
                async with api.session.post(url, params=params, data=f, timeout=TRANSFER_TIMEOUT,
                                            headers={"Content-Length": str(size),
                                                     "Content-Type": "application/octet-stream"}) as resp:
                    await _fail(resp)
                    post = await resp.json()
            show(post, f"{'added' if post['new'] else 'already held'} post {post['id']} ({_size(post['size'])})")
        elif args.post_command == "get":
            async with api.session.get(f"{url}/{args.id}") as resp:
                await _fail(resp)
                meta = await resp.json()
            out: Path = args.out
            tmp = out.with_name(out.name + ".part")
            h = hashlib.sha1(usedforsecurity=False)
            try:
                with tmp.open("wb") as w:
                    async with api.session.get(f"{url}/{args.id}/content", timeout=TRANSFER_TIMEOUT) as resp:
                        await _fail(resp)
                        async for block in resp.content.iter_chunked(BLOCK):
                            h.update(block)
                            w.write(block)
                if h.hexdigest() != meta["digest"]:
                    raise ApiError(f"the content received does not match the post's digest {meta['digest']}")
                tmp.replace(out)
            except OSError as exc:
                raise ApiError(f"cannot write {out}: {exc.strerror}") from None
            finally:
                tmp.unlink(missing_ok=True)
            show(meta | {"out": str(out)}, f"saved post {meta['id'][:12]} ({_size(meta['size'])}) to {out}")
    except aiohttp.ClientConnectorError:
        raise ApiError(f"no huddle node answers at {api.base_url} (is it running? see --api)") from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ApiError(f"request to {url} failed: {exc or type(exc).__name__}") from None
