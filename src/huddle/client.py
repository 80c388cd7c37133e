"""A small asynchronous client of a node's HTTP API (used by the CLI)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import aiohttp

from .errors import HuddleError

__all__ = ["ApiClient", "ApiError"]


class ApiError(HuddleError):
    """The API could not be reached or answered with an error."""


class ApiClient:
    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ApiClient:
        self._session = aiohttp.ClientSession(timeout=self._timeout)
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

    async def _request(self, method: str, path: str, body: Any = None) -> Any:
        url = self.base_url + path
        try:
            async with self.session.request(method, url, json=body) as resp:
                text = await resp.text()
                try:
                    data = json.loads(text) if text else None
                except ValueError:
                    data = None
                if resp.status >= 400:
                    reason = data.get("error") if isinstance(data, dict) else text[:200]
                    raise ApiError(f"{resp.status} {reason}")
                return data
        except aiohttp.ClientConnectorError:
            raise ApiError(f"no huddle node answers at {self.base_url} (is it running? see --api)") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(f"request to {url} failed: {exc or type(exc).__name__}") from None

    async def node(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/node")
        return result

    async def peers(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._request("GET", "/api/v1/peers")
        return result

    async def chat(self, text: str, to: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"text": text}
        if to:
            body["to"] = to
        result: dict[str, Any] = await self._request("POST", "/api/v1/chat", body)
        return result

    async def emit(self, kind: str, body: Any) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("POST", "/api/v1/events", {"kind": kind, "body": body})
        return result

    async def log(self, source: str | None = None, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        query = f"?limit={limit}"
        if source:
            query += f"&source={source}&after={after}"
        result: dict[str, Any] = await self._request("GET", "/api/v1/log" + query)
        events: list[dict[str, Any]] = result["events"]
        return events

    async def log_summary(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._request("GET", "/api/v1/log/summary")
        return result

    async def events(self, count: int | None = None) -> AsyncIterator[dict[str, Any]]:
        url = self.base_url + "/api/v1/events"
        seen = 0
        try:
            async with self.session.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=5.0),
                                               receive_timeout=None) as ws:
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    yield json.loads(msg.data)
                    seen += 1
                    if count is not None and seen >= count:
                        return
        except aiohttp.ClientConnectorError:
            raise ApiError(f"no huddle node answers at {self.base_url} (is it running? see --api)") from None
        except aiohttp.ClientError as exc:
            raise ApiError(f"event stream from {url} failed: {exc}") from None
