"""The API's door as data: who may use it, what a request body may be, and how
many connections it holds for how long.  Nothing here does I/O; time is passed in.

Rules (README, "The API"; docs/limits.md, "API"):

- ``Host`` must name the address the connection came in on, ``localhost``, or a
  name in ``api.allowed-hosts``: a page whose DNS name was re-pointed at this
  node (DNS rebinding) sends its own name and is refused.
- A request carrying an ``Origin`` that is not the API's own (the same
  ``host[:port]`` as its ``Host``) is refused: another web page cannot write
  through the user's browser, nor open the event stream.  No ``Origin`` (a
  script, the CLI) is allowed.
- A write never has a content type a browser sends cross-origin without asking
  first (``text/plain``, form encodings); JSON endpoints take ``application/json``.
- JSON bodies are strict: UTF-8, no ``NaN`` / ``Infinity`` (nor numbers too large
  for a double), nesting at most ``api.max-json-depth``, and no text that cannot
  be encoded as UTF-8 (a lone surrogate escape such as ``"\\ud800"``).
- Listening beyond loopback (or with ``--api-require-token``), every request but the
  login page's carries the API's token: ``Authorization: Bearer TOKEN`` or the cookie
  the login page sets.  Without it: 401 (the API) or a redirect to ``/login`` (pages).
- At most ``api.max-connections`` connections, and ``api.max-connections-per-address``
  from one IP; one waiting for a request's head longer than ``api.idle-timeout``
  (from its opening or the end of its last answer), or whose answer makes no
  progress for as long, is closed.  Where the token is required, a connection
  counts against no one else's share until a request on it has shown the token:
  when the API is full, the oldest idle connection that has not is closed to make
  room, and only when there is none is the newcomer refused.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlsplit

from ..counters import Counters
from ..limits import ApiLimits

__all__ = [
    "SIMPLE_TYPES", "TOKEN_COOKIE", "ApiCounters", "BadInput", "ConnectionGuard", "bad_text",
    "host_allowed", "hostname_of", "is_loopback", "origin_allowed", "parse_json", "presented_token", "safe_next",
    "token_required",
]

# The content types a page may POST cross-origin without a CORS preflight (Fetch standard).
SIMPLE_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})

_SURROGATE = re.compile("[\ud800-\udfff]")

TOKEN_COOKIE = "huddle_token"  # noqa: S105 - the cookie's name; set by POST /login: HttpOnly, SameSite=Strict


@dataclass(slots=True)
class ApiCounters(Counters):
    """What the API refused or cut off (``GET /api/v1/node`` -> ``stats.api``)."""

    connections_refused: int = 0  # over api.max-connections: closed at once
    address_refused: int = 0  # over api.max-connections-per-address from one IP: closed at once
    unproven_closed: int = 0  # idle, never showed the token: closed to make room for a newcomer
    idle_closed: int = 0  # no complete request head within api.idle-timeout
    stalled_closed: int = 0  # an answer not read for api.idle-timeout
    bad_host: int = 0  # Host not the API's own address nor an allowed name (403)
    cross_origin: int = 0  # an Origin that is not the API's own (403)
    bad_content_type: int = 0  # a cross-origin-safe or wrong content type on a write (415)
    bad_input: int = 0  # a body that is not strict JSON, too deep, or has un-encodable text (400)
    too_large: int = 0  # a body over the size cap (413)
    body_timeouts: int = 0  # a body that did not arrive within api.body-timeout (408)
    subscribers_refused: int = 0  # over api.max-subscribers (503)
    subscribers_dropped: int = 0  # a subscriber over api.subscriber-buffer-bytes (closed, code 1013)
    unauthorized: int = 0  # no token, or a wrong one, where the API requires it (401, or /login for pages)
    bad_range: int = 0  # a Range header malformed or past the end of a file (416)


class BadInput(ValueError):
    """A request body the API refuses (a 400); the message says why."""


# ------------------------------------------------------------------ bodies


def _no_constant(name: str) -> Any:
    raise BadInput(f"{name} is not JSON: numbers must be finite")


def parse_json(raw: bytes, max_depth: int) -> Any:
    """``raw`` as strict JSON, or :class:`BadInput`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("request body is not UTF-8") from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except BadInput:
        raise
    except RecursionError:
        raise BadInput(f"request body is nested deeper than {max_depth}") from None
    except ValueError:
        raise BadInput("request body is not valid JSON") from None
    _check(value, max_depth)
    return value


def _check(value: Any, max_depth: int) -> None:
    """Depth, finite numbers and encodable text, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise BadInput("text with a lone surrogate (e.g. \\ud800) cannot be encoded as UTF-8")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise BadInput("numbers must be finite (no NaN, no Infinity, nothing beyond a double)")
        elif isinstance(item, (list, dict)):
            if depth >= max_depth:
                raise BadInput(f"request body is nested deeper than {max_depth}")
            if isinstance(item, dict):
                for k, v in item.items():
                    stack.append((k, depth + 1))
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in item)


def bad_text(text: str) -> bool:
    """True if ``text`` cannot be encoded as UTF-8 (it holds a surrogate)."""
    return _SURROGATE.search(text) is not None


# ------------------------------------------------------------------ the web door


def hostname_of(host: str) -> str:
    """``host[:port]`` / ``[v6]:port`` -> the host name or address, lowercase, no trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        name = host[1:end] if end > 0 else host[1:]
    elif host.count(":") == 1:
        name = host.partition(":")[0]
    else:
        name = host  # a bare name, or an IPv6 address without brackets
    return name.rstrip(".")


def is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_allowed(host: str, local_address: str | None, allowed: tuple[str, ...]) -> bool:
    """Is ``host`` (a ``Host`` header) the address the connection came in on, a loopback
    name or address when it came in on loopback, or one of the ``allowed`` names?"""
    name = hostname_of(host)
    if not name:
        return False
    if name in {a.lower().rstrip(".") for a in allowed}:
        return True
    if local_address is None:
        return False
    local = local_address.lower().partition("%")[0]
    if local.startswith("::ffff:"):
        local = local.removeprefix("::ffff:")
    if name == local:
        return True
    return is_loopback(local) and is_loopback(name)


def origin_allowed(origin: str, host: str) -> bool:
    """Is ``origin`` (an ``Origin`` header) the API's own: http(s) and the same ``host[:port]``?"""
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc) and parts.netloc.lower() == host.strip().lower()


# ------------------------------------------------------------------ the token


def token_required(host: str, forced: bool) -> bool:
    """Does an API bound to ``host`` require its token?  Always beyond loopback (a wildcard
    address included); on loopback only when ``forced`` (``--api-require-token``)."""
    return forced or not is_loopback(host)


def presented_token(authorization: str | None, cookie: str | None) -> str | None:
    """The token a request presents: an ``Authorization: Bearer`` header first, else the
    login cookie's value; None if neither."""
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return cookie or None


# What a path of this API may hold as it is written into the login page's redirect: RFC 3986's
# unreserved and sub-delims, ":", "@", "/" and "%" (an escape passes as it came); "?" and "=" in the query.
_PATH_SAFE = "/%-._~!$&'()*+,;=:@"
_QUERY_SAFE = _PATH_SAFE + "?"


def safe_next(target: str | None) -> str:
    """Where the login page sends the browser after: a path of this API, never another site.

    A browser reads a ``Location`` loosely: it drops tabs and line breaks anywhere
    (``/<TAB>/evil.example`` is ``//evil.example``, another host), takes ``\\`` for ``/``,
    and strips control characters and spaces at the ends.  So whatever ``target`` is, the
    answer is one ``/`` followed by anything but ``/`` or ``\\``, with every octet outside
    a path's printable ASCII percent-encoded (control characters, spaces, backslashes and
    non-ASCII text included): no browser can read a host into it.  A target that would
    need changing to get there (it does not start with exactly one ``/``, or holds a
    backslash or a control character) is refused whole: ``/``."""
    if not target or not target.startswith("/"):
        return "/"
    if any(c == "\\" or ord(c) < 0x20 or ord(c) == 0x7F for c in target) or target[1:2] == "/":
        return "/"
    path, mark, query = target.partition("?")
    path = quote(path, safe=_PATH_SAFE, errors="strict") if not bad_text(path) else "/"
    query = quote(query, safe=_QUERY_SAFE) if mark and not bad_text(query) else ""
    return path + ("?" + query if query else "")


# ------------------------------------------------------------------ connections

K = TypeVar("K", bound=Hashable)


@dataclass(slots=True)
class _Conn:
    since: float  # opened, or its last request finished
    address: str = ""
    proven: bool = True  # the API needs no token, or a request on it showed it
    busy: int = 0  # requests being handled
    buffered: int = 0  # octets of answer waiting at the last look
    progress: float = 0.0  # when the answer last moved


class ConnectionGuard(Generic[K]):
    """The API's connections: a cap, and deadlines for a connection that is idle
    (no request head within ``idle_timeout`` of opening or of its last answer) or
    whose answer is not being read (the same time without progress)."""

    def __init__(self, limits: ApiLimits, counters: ApiCounters) -> None:
        self.limits = limits
        self.counters = counters
        self._conns: dict[K, _Conn] = {}
        self._per_address: dict[str, int] = {}
        self.evicted: list[K] = []  # closed by open() to make room: the caller closes them (and empties this)

    def __len__(self) -> int:
        return len(self._conns)

    def open(self, key: K, now: float, address: str = "", *, proven: bool = True) -> bool:
        """A connection was accepted from ``address``; False (counted) if it is one too
        many, from that address or in all: close it.  ``proven``: the API needs no token
        (else the connection is unproven until :meth:`proved`).  When the API is full, the
        oldest idle unproven connection makes room (put in ``evicted``, counted)."""
        lim = self.limits
        if self._per_address.get(address, 0) >= lim.max_connections_per_address:
            self.counters.address_refused += 1
            return False
        if len(self._conns) >= lim.max_connections:
            idle = [(c.since, k) for k, c in self._conns.items() if not c.proven and not c.busy]
            if not idle:
                self.counters.connections_refused += 1
                return False
            oldest = min(idle, key=lambda item: item[0])[1]
            self.close(oldest)
            self.evicted.append(oldest)
            self.counters.unproven_closed += 1
        self._conns[key] = _Conn(since=now, address=address, proven=proven)
        self._per_address[address] = self._per_address.get(address, 0) + 1
        return True

    def proved(self, key: K) -> None:
        """A request on this connection showed the API's token."""
        conn = self._conns.get(key)
        if conn is not None:
            conn.proven = True

    def close(self, key: K) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            self._forget(conn)

    def _forget(self, conn: _Conn) -> None:
        left = self._per_address[conn.address] - 1
        if left:
            self._per_address[conn.address] = left
        else:
            del self._per_address[conn.address]

    def started(self, key: K, now: float) -> None:
        """A request's head arrived and its handler runs."""
        conn = self._conns.get(key)
        if conn is not None:
            conn.busy += 1
            conn.progress = now

    def finished(self, key: K, now: float) -> None:
        """A request's answer is written: the connection waits for the next one."""
        conn = self._conns.get(key)
        if conn is not None:
            conn.busy = max(0, conn.busy - 1)
            conn.since = now

    def sweep(self, now: float, buffered: Callable[[K], int]) -> list[K]:
        """The connections to close now (forgotten here and counted); ``buffered(key)``
        is how many octets of answer wait to be sent on it."""
        timeout = self.limits.idle_timeout
        out: list[K] = []
        for key, conn in self._conns.items():
            if not conn.busy:
                if now - conn.since >= timeout:
                    self.counters.idle_closed += 1
                    out.append(key)
                continue
            waiting = buffered(key)
            if waiting == 0 or waiting != conn.buffered:
                conn.buffered, conn.progress = waiting, now
            elif now - conn.progress >= timeout:
                self.counters.stalled_closed += 1
                out.append(key)
        for key in out:
            self._forget(self._conns.pop(key))
        return out
