"""A small asynchronous client of a node's HTTP API (used by the CLI)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from types import TracebackType
from typing import Any, BinaryIO
from urllib.parse import quote, urlencode

import aiohttp

from .errors import HuddleError

__all__ = ["TRANSFER_TIMEOUT", "ApiClient", "ApiError"]

# A large upload or download may take long; only a silent connection is an error.
TRANSFER_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=120)
# Octets per block of a post's content as it is read from the node.
BLOCK = 1024 * 1024


class ApiError(HuddleError):
    """The API could not be reached or answered with an error."""


def _candidates(data: Any) -> str:
    """An ambiguous name's candidates (a 409's ``candidates``), a line each, for a person."""
    found = data.get("candidates") if isinstance(data, dict) else None
    if not isinstance(found, list):
        return ""
    lines = []
    for c in found[:50]:
        if isinstance(c, dict):
            ident, label = c.get("uuid") or c.get("id") or "", c.get("name") or c.get("subject") or ""
            lines.append(f"\n  {label} ({ident})" if label else f"\n  {ident}")
    return "".join(lines)


class ApiClient:
    def __init__(self, base_url: str, timeout: float = 10.0, token: str | None = None) -> None:
        """``token``: the API's token (sent as ``Authorization: Bearer``), needed when the
        node's API listens beyond loopback."""
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ApiClient:
        self._session = aiohttp.ClientSession(timeout=self._timeout, headers=self._headers)
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise ApiError("use 'async with ApiClient(...)'")
        return self._session

    @contextlib.asynccontextmanager
    async def _response(self, method: str, path: str, **kwargs: Any) -> AsyncIterator[aiohttp.ClientResponse]:
        """One request's response, once its status says it succeeded; ApiError with the API's reason
        otherwise, and for a node that does not answer or a connection that breaks while it is read."""
        url = self.base_url + path
        try:
            async with self.session.request(method, url, **kwargs) as resp:
                if resp.status >= 400:
                    text = await resp.text()
                    try:
                        data = json.loads(text)
                    except ValueError:
                        data = None
                    reason = data.get("error") if isinstance(data, dict) else text[:200]
                    raise ApiError(f"{resp.status} {reason}" + _candidates(data))
                yield resp
        except aiohttp.ClientConnectorError:
            raise ApiError(f"no huddle node answers at {self.base_url} (is it running? see --api)") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(f"request to {url} failed: {exc or type(exc).__name__}") from None

    async def _send(self, method: str, path: str, **kwargs: Any) -> str:
        """One request; the answer's text, or ApiError with the API's reason."""
        async with self._response(method, path, **kwargs) as resp:
            return await resp.text()

    async def _request(self, method: str, path: str, body: Any = None) -> Any:
        """A JSON request and answer."""
        text = await self._send(method, path, json=body)
        try:
            return json.loads(text) if text else None
        except ValueError:
            raise ApiError(f"{path} answered with something that is not JSON: {text[:80]!r}") from None

    async def _text(self, method: str, path: str, data: str | None = None, content_type: str = "") -> str:
        """A request whose body and answer are text (XML documents and operations)."""
        return await self._send(method, path, data=data, headers={"Content-Type": content_type} if content_type else {})

    async def doc_xml(self, eids: bool = False) -> str:
        return await self._text("GET", "/api/v1/doc" + ("?eids=1" if eids else ""))

    async def doc_json(self, eids: bool = False) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/doc?format=json" + ("&eids=1" if eids else ""))
        return result

    async def doc_apply(self, text: str, content_type: str, role: str | None = None) -> dict[str, Any]:
        path = "/api/v1/doc/ops" + ("" if role is None else f"?role={role}")  # a role is [a-z-]: no quoting
        result: dict[str, Any] = json.loads(await self._text("POST", path, text, content_type))
        return result

    async def bout_conflicts(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/bout/conflicts")
        return result

    async def doc_history(self, eid: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", f"/api/v1/doc/history?eid={eid}")
        return result

    async def jams(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/bout/jams")
        return result

    async def bout_summary(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/bout/summary")
        return result

    async def zre_peers(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/zre/peers")
        return result

    async def node(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/node")
        return result

    async def guests(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/guests")
        return result

    async def join(self) -> dict[str, Any] | None:
        """A secured group's join panel (``GET /api/v1/join``: join code, room key); None in an open group."""
        try:
            result: dict[str, Any] = await self._request("GET", "/api/v1/join")
        except ApiError as exc:
            if str(exc).startswith("404 "):
                return None
            raise
        return result

    async def guest_action(self, name: str, action: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("POST", f"/api/v1/guests/{quote(name, safe='')}/{action}", {})
        return result

    async def apps(self, node: str | None = None) -> dict[str, Any]:
        """The node's apps, or (``node``: a name or id prefix) another node's, as it answers."""
        query = "" if node is None else "?" + urlencode({"node": node})
        result: dict[str, Any] = await self._request("GET", f"/api/v1/apps{query}")
        return result

    async def app_order(self, name: str, order: str, node: str | None = None) -> dict[str, Any]:
        """``start``, ``stop`` or ``restart`` an app of the node (or of ``node``, the order carried
        there); its status after the order."""
        query = "" if node is None else "?" + urlencode({"node": node})
        result: dict[str, Any] = await self._request("POST", f"/api/v1/apps/{quote(name, safe='')}/{order}{query}")
        return result

    async def node_order(self, order: str, node: str | None) -> dict[str, Any]:
        """``stop``, ``shutdown`` or ``reboot`` ``node`` (None: every node); the result(s)."""
        body: dict[str, Any] = {"all": True} if node is None else {"node": node}
        result: dict[str, Any] = await self._request("POST", f"/api/v1/control/{order}", body)
        return result

    async def app_logs(self, name: str, after: int | None = None, node: str | None = None) -> dict[str, Any]:
        """An app's output: the log file's tail, or what came after offset ``after`` (and ``next``);
        of ``node``'s app (a name or id prefix), a chunk at a time (``more``: ask again at once)."""
        params = ([] if after is None else [("after", str(after))]) + ([] if node is None else [("node", node)])
        query = "?" + urlencode(params) if params else ""
        result: dict[str, Any] = await self._request("GET", f"/api/v1/apps/{quote(name, safe='')}/logs{query}")
        return result

    async def system(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/system")
        return result

    async def peers(self, tags: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The peers; ``tags`` (``KEY=VALUE`` or ``KEY``): only those whose tags match them all."""
        query = "?" + urlencode([("tag", t) for t in tags]) if tags else ""
        result: list[dict[str, Any]] = await self._request("GET", "/api/v1/peers" + query)
        return result

    async def names(self) -> dict[str, str]:
        """The names of the nodes the node knows (itself, its peers, the system picture's
        members), by id and by key fingerprint: for showing names beside ids."""
        me = await self.node()
        found = [me, *(await self.peers()), *(await self.system()).get("members", ())]
        out: dict[str, str] = {}
        for n in found:
            name = n.get("name")
            if isinstance(name, str) and name:
                for ident in (n.get("uuid"), n.get("key")):
                    if isinstance(ident, str) and ident:
                        out.setdefault(ident, name)
        return out

    async def chat(self, text: str, to: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"text": text}
        if to:
            body["to"] = to
        result: dict[str, Any] = await self._request("POST", "/api/v1/chat", body)
        return result

    async def send(self, to: str, texts: list[str], wait: float = 10.0) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("POST", "/api/v1/messages",
                                                     {"to": to, "texts": texts, "wait": wait})
        return result

    async def exclude(self, uuid: str, reason: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("POST", f"/api/v1/peers/{quote(uuid, safe='')}/exclude", {"reason": reason})
        return result

    async def join_peer(self, address: str, timeout: float) -> dict[str, Any]:
        """Have the node dial ``address`` (HOST:PORT) and wait up to ``timeout`` seconds for the peer
        there to be admitted (docs/protocol.md 5.1, "Seeds added at runtime")."""
        text = await self._send("POST", "/api/v1/peers/join", json={"address": address, "timeout": timeout},
                                timeout=aiohttp.ClientTimeout(total=timeout + (self._timeout.total or 10.0)))
        result: dict[str, Any] = json.loads(text)
        return result

    async def forget(self, node: str) -> dict[str, Any]:
        """Forget a failed or left member group-wide (``POST /api/v1/forget``): 409 if it is neither."""
        result: dict[str, Any] = await self._request("POST", "/api/v1/forget", {"node": node})
        return result

    async def trusted(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/trust")
        return result

    async def trust(self, key: str, name: str = "") -> dict[str, Any]:
        result: dict[str, Any] = await self._request("POST", "/api/v1/trust", {"key": key, "name": name})
        return result

    async def distrust(self, key: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("DELETE", f"/api/v1/trust/{quote(key, safe='')}")
        return result

    async def pairing(self) -> dict[str, Any]:
        """The devices asking to join, and this node's pairing door (docs/security.md, "Pairing")."""
        result: dict[str, Any] = await self._request("GET", "/api/v1/pair")
        return result

    async def pair_answer(self, action: str, fingerprint: str) -> dict[str, Any]:
        """Accept or refuse (``action``) the device whose key has ``fingerprint``."""
        result: dict[str, Any] = await self._request("POST", f"/api/v1/pair/{action}", {"fingerprint": fingerprint})
        return result

    async def group_keys(self) -> dict[str, Any]:
        """The group secret's keys: the one in use, those held, the retired (docs/security.md)."""
        result: dict[str, Any] = await self._request("GET", "/api/v1/group/keys")
        return result

    async def group_install(self, file_text: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("POST", "/api/v1/group/keys", {"file": file_text})
        return result

    async def group_switch(self, key_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("POST", "/api/v1/group/switch", {"key_id": key_id})
        return result

    async def group_retire(self, key_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("POST", "/api/v1/group/retire", {"key_id": key_id})
        return result

    async def emit(self, kind: str, body: Any) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("POST", "/api/v1/events", {"kind": kind, "body": body})
        return result

    async def log(self, source: str | None = None, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        query = f"?limit={limit}"
        if source:  # a name or id prefix too: quoted
            query += f"&source={quote(source, safe='')}&after={after}"
        result: dict[str, Any] = await self._request("GET", "/api/v1/log" + query)
        events: list[dict[str, Any]] = result["events"]
        return events

    async def log_summary(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/log/summary")
        return result

    async def posts(self, limit: int = 100) -> list[dict[str, Any]]:
        """The posts the node holds, newest first."""
        result: list[dict[str, Any]] = await self._request("GET", f"/api/v1/posts?limit={limit}")
        return result

    async def post(self, post_id: str) -> dict[str, Any]:
        """One post's metadata (its digest among them)."""
        result: dict[str, Any] = await self._request("GET", f"/api/v1/posts/{quote(post_id, safe='')}")
        return result

    async def add_post(self, content: BinaryIO, size: int, subject: str, mime: str,
                       parent: str | None = None) -> dict[str, Any]:
        """A new post of ``size`` octets read from ``content`` as they are sent (any size)."""
        params = {"subject": subject, "mime": mime} | ({"parent": parent} if parent else {})
        text = await self._send("POST", "/api/v1/posts", params=params, data=content, timeout=TRANSFER_TIMEOUT,
                                headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"})
        try:
            result: dict[str, Any] = json.loads(text)
        except ValueError:
            raise ApiError(f"/api/v1/posts answered with something that is not JSON: {text[:80]!r}") from None
        return result

    async def post_content(self, post_id: str) -> AsyncIterator[bytes]:
        """A post's content in blocks, as it arrives (the node checked its digest before sending)."""
        path = f"/api/v1/posts/{quote(post_id, safe='')}/content"
        async with self._response("GET", path, timeout=TRANSFER_TIMEOUT) as resp:  # maps a break while reading too
            async for block in resp.content.iter_chunked(BLOCK):
                yield block

    async def _texts(self, path: str, what: str) -> AsyncGenerator[str, None]:
        """The text messages of the WebSocket at ``path`` (``what`` it streams, for the errors)."""
        url = self.base_url + path
        try:
            async with self.session.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=5.0),
                                               receive_timeout=None) as ws:
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    yield str(msg.data)
        except aiohttp.WSServerHandshakeError as exc:
            raise ApiError(f"{url} refused the {what}: {exc.status} {exc.message}") from None
        except aiohttp.ClientConnectorError:
            raise ApiError(f"no huddle node answers at {self.base_url} (is it running? see --api)") from None
        except aiohttp.ClientError as exc:
            raise ApiError(f"{what} from {url} failed: {exc}") from None

    async def monitor(self, level: str = "info") -> AsyncIterator[str]:
        """The node's own log lines, the recent ones first, then each as it is written."""
        async with contextlib.aclosing(self._texts(f"/api/v1/monitor?level={quote(level, safe='')}",
                                                   "log stream")) as lines:
            async for line in lines:
                yield line

    async def events(self, count: int | None = None) -> AsyncIterator[dict[str, Any]]:
        seen = 0
        async with contextlib.aclosing(self._texts("/api/v1/events", "event stream")) as texts:  # closed at return
            async for text in texts:
                yield json.loads(text)
                seen += 1
                if count is not None and seen >= count:
                    return
