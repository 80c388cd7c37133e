"""The API's token: required beyond loopback (and on loopback with --api-require-token);
401 for the API without it, /login for pages; the status and bout pages work after login."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

from huddle.api.guard import presented_token, safe_next, token_required

# ------------------------------------------------------------------ the rules, as data


def test_token_is_required_beyond_loopback_only() -> None:
    for host in ("0.0.0.0", "192.168.1.20", "10.0.0.5", "::", "fe80::1", "venue-laptop.local"):
        assert token_required(host, forced=False), host
    for host in ("127.0.0.1", "127.3.4.5", "::1", "localhost"):
        assert not token_required(host, forced=False), host
        assert token_required(host, forced=True), host


def test_presented_token_bearer_first_then_cookie() -> None:
    assert presented_token("Bearer abc", None) == "abc"
    assert presented_token("bearer  abc ", "c") == "abc"
    assert presented_token("Basic abc", "c") == "c"
    assert presented_token("Bearer ", "c") == "c"
    assert presented_token(None, "c") == "c"
    assert presented_token(None, "") is None
    assert presented_token(None, None) is None


def test_login_goes_on_only_to_this_api() -> None:
    assert safe_next("/bout") == "/bout"
    assert safe_next("/?x=1") == "/?x=1"
    for bad in (None, "", "https://evil.example/", "//evil.example/", "/\\evil.example", "bout"):
        assert safe_next(bad) == "/"


# Whatever a browser could read into a Location: tabs, line breaks, backslashes, controls, escapes, non-ASCII.
_NEXT_PARTS = ["/", "//", "\\", "\t", "\n", "\r", "\x00", "\x0b", "\x1f", "\x7f", " ", "%2f", "%2F", "%5c", "%09",
               "%0a", "@", ":", "?", "#", "evil.example", "http:", "https:", "javascript:", "é", "\u3002", "\uff0f",
               "\ud800", ".", "..", "bout"]


def _as_a_browser_reads(location: str) -> str:
    """The URL parser's loose reading: C0 controls and spaces off the ends, every tab and
    line break dropped, a backslash taken for a slash (WHATWG URL, special schemes)."""
    text = location.strip("".join(map(chr, range(0x21))))
    return re.sub("[\t\n\r]", "", text).replace("\\", "/")


def _same_origin_path(location: str) -> bool:
    joined = urllib.parse.urlsplit(urllib.parse.urljoin("http://node.example:8090/login", _as_a_browser_reads(location)))
    return (location.startswith("/") and location[1:2] not in ("/", "\\") and location.isascii()
            and location.isprintable() and " " not in location and "\\" not in location
            and (joined.scheme, joined.netloc) == ("http", "node.example:8090"))


def test_login_next_tricks_a_browser_would_follow_elsewhere_are_refused() -> None:
    for bad in ("/\t/evil.example", "/\n/evil.example", "/\r\n/evil.example", "/\\/evil.example", "/\x00/evil.example",
                "\t//evil.example", "/\t\\evil.example"):
        assert safe_next(bad) == "/", repr(bad)
    assert safe_next("/posts/ab cd?q=é") == "/posts/ab%20cd?q=%C3%A9"  # still this API's path, escaped
    assert safe_next("/%2F%2Fevil.example") == "/%2F%2Fevil.example"  # an escaped slash is a path's octet
    assert safe_next("/a?next=//evil.example") == "/a?next=//evil.example"  # in the query: harmless


@settings(max_examples=800, deadline=None)
@given(st.one_of(st.text(), st.lists(st.sampled_from(_NEXT_PARTS), max_size=8).map("".join)))
def test_login_next_is_always_a_path_of_this_api(target: str) -> None:
    got = safe_next(target)
    assert _same_origin_path(got), (target, got)


# ------------------------------------------------------------------ a real node


def request(url: str, headers: dict[str, str] | None = None, data: bytes | None = None,
            content_type: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request, redirects not followed: status, headers, body."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    req = urllib.request.Request(url, data=data, headers=headers or {})
    if content_type:
        req.add_header("Content-Type", content_type)
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.mark.processes
def test_api_refuses_requests_without_the_token(cluster: Cluster, tmp_path: Path) -> None:
    node = cluster.start("alice", "--api-require-token", beacon=False)
    token_file = tmp_path / "alice" / "api-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()

    status, headers, body = request(node.api + "/api/v1/node")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert "token" in json.loads(body)["error"]
    assert request(node.api + "/api/v1/node", {"Authorization": "Bearer " + token[:-1] + "x"})[0] == 401
    assert request(node.api + "/api/v1/events", {"Connection": "Upgrade", "Upgrade": "websocket",
                                                "Sec-WebSocket-Version": "13",
                                                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})[0] == 401
    status, _, body = request(node.api + "/api/v1/events", {"Authorization": "Bearer " + token},
                              json.dumps({"kind": "k", "body": 1}).encode(), "application/json")
    assert status == 201, body
    for page in ("/", "/bout", "/guest.js"):
        status, headers, _ = request(node.api + page)
        assert status == 303 and headers["Location"].startswith("/login?next="), (page, status)

    status, _, body = request(node.api + "/api/v1/node", {"Authorization": "Bearer " + token})
    info = json.loads(body)
    assert status == 200 and info["api"]["token_required"] is True
    assert info["stats"]["api"]["unauthorized"] == 6  # none, a wrong one, the event stream, three pages
    assert len(info["key"]) == 19 and info["security"]["mode"] == "group"  # secured by default

    # The login page: a wrong token is refused (401, counted), the right one sets the cookie.
    form = "application/x-www-form-urlencoded"
    assert request(node.api + "/login", data=b"token=nope&next=/bout", content_type=form)[0] == 401
    status, _, body = request(node.api + "/api/v1/node", {"Authorization": "Bearer " + token})
    assert json.loads(body)["stats"]["api"]["unauthorized"] == 7
    status, headers, _ = request(node.api + "/login", data=f"token={token}&next=/bout".encode(), content_type=form)
    assert status == 303 and headers["Location"] == "/bout"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert request(node.api + "/api/v1/peers", {"Cookie": cookie.split(";")[0]})[0] == 200


@pytest.mark.processes
def test_cli_sends_the_token(cluster: Cluster, tmp_path: Path) -> None:
    node = cluster.start("alice", "--api-require-token", beacon=False)
    token = (tmp_path / "alice" / "api-token").read_text().strip()
    cmd = [sys.executable, "-m", "huddle", "peers", "--api", node.api]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert refused.returncode == 1 and "401" in refused.stderr
    with_flag = subprocess.run([*cmd, "--token", token], capture_output=True, text=True, timeout=30)
    assert with_flag.returncode == 0 and "this node: alice" in with_flag.stdout
    from_env = subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                              env={**os.environ, "HUDDLE_TOKEN": token})
    assert from_env.returncode == 0, from_env.stderr


@pytest.mark.processes
def test_pages_work_in_chromium_after_login(cluster: Cluster, browser: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    # Open (--open): the page after login shows the open group's warning too.
    node = cluster.start("alice", "--api-require-token", beacon=False, secure=False)
    token = (tmp_path / "alice" / "api-token").read_text().strip()
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(node.api + "/")
    assert "/login" in page.url
    page.fill("#token", "not the token")
    page.click("button[type=submit]")
    expect(page.locator(".bad")).to_contain_text("not this node's API token")
    page.fill("#token", token)
    page.click("button[type=submit]")
    wait_for(lambda: page.url == node.api + "/", 10, "the status page after login")
    expect(page.locator("#conn")).to_have_text("live", timeout=10_000)  # the event stream (WebSocket) opened
    expect(page.locator("#key")).to_have_text(re.compile(r"^[0-9A-Z]{4}(-[0-9A-Z]{4}){3}$"))
    expect(page.locator("#open-group")).to_contain_text("open group: anyone on this network can join and read")
    expect(page.locator("#security")).to_have_text("open (chosen with --open)")
    page.goto(node.api + "/bout")
    expect(page.locator("#conn")).to_have_text("live", timeout=10_000)
    expect(page.locator("#jam")).to_have_text("Up next: Period 1 · Jam 1")
    assert not errors, errors


def test_a_new_token_never_starts_with_a_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A token is typed after --token: one starting with "-" is read by argparse as an option
    # ("--token: expected one argument"), which a drawn token did 1 time in 64.
    from huddle.security import token as token_module

    drawn = iter(["-" + "a" * 42, "-" + "b" * 42, "c" * 43])
    monkeypatch.setattr(token_module.secrets, "token_urlsafe", lambda n: next(drawn))
    made = token_module.load_or_create_token(tmp_path)
    assert made.value == "c" * 43
    assert (tmp_path / "api-token").read_text().strip() == "c" * 43
