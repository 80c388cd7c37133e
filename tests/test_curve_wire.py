"""What an outsider on the wire sees (docs/security.md): two nodes in a network namespace of the
test's own, every frame on its loopback captured (AF_PACKET, tests/wire_capture.py), an
event, a chat line, an addressed message and a post sent with distinctive plaintexts.
With a group secret the capture contains none of them; in open mode (the control, so the
test can fail) it contains them all."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from huddle.security import GroupSecret

pytestmark = pytest.mark.processes

HERE = Path(__file__).resolve().parent


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"hdcap{os.getpid() % 100000}{secrets.randbelow(100)}"
    try:
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=20)
    except (subprocess.CalledProcessError, FileNotFoundError, PermissionError) as exc:
        err = (getattr(exc, "stderr", b"") or b"").decode().strip()
        pytest.skip(f"network namespaces cannot be made here (needs root and iproute2): {err or exc}")
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, capture_output=True, timeout=20)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)


def _capture(namespace: str, out: Path, token: str, *extra: str) -> dict[str, bool]:
    out.mkdir()
    done = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, str(HERE / "wire_capture.py"), str(out),
                           token, *extra], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["octets"] > 0
    found: dict[str, bool] = result["found"]
    return found


def test_the_wire_carries_no_plaintext_with_a_group_secret_and_all_of_it_without(namespace: str,
                                                                                  tmp_path: Path) -> None:
    token = f"plaintext-{secrets.token_hex(8)}"
    open_found = _capture(namespace, tmp_path / "open", token, "--open")  # open mode, chosen: the control
    assert open_found == {"event": True, "chat": True, "message": True, "post": True}  # the control
    key = tmp_path / "test.key"
    GroupSecret.new("test").save(key)
    secured_found = _capture(namespace, tmp_path / "secured", token, "--group-key", str(key))
    assert secured_found == {"event": False, "chat": False, "message": False, "post": False}
