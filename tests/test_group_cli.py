"""`huddle group new|show`, and a node given a group secret (--group-key, --join, TOML
group-key): parsed and checked, and the node then runs secured (CurveZMQ: tests/test_curve.py)."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from huddle.cli import main
from huddle.config import NodeConfig, load_config
from huddle.errors import ConfigError
from huddle.procs import NodeProcess
from huddle.security import GroupSecret, load_group_file


def test_group_new_writes_a_private_file_and_prints_the_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "derby.key"
    assert main(["group", "new", "derby", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    secret = load_group_file(out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert secret.group == "derby" and secret.code in printed and secret.key_id in printed
    assert secret.secret.hex() not in printed
    assert main(["group", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"join code: {secret.code}" in shown and "group: derby" in shown
    assert main(["group", "new", "derby", "--out", str(out)]) == 2  # never overwritten
    assert "never overwritten" in capsys.readouterr().err


def test_toml_group_key_loads_the_secret_and_sets_the_group(tmp_path: Path) -> None:
    secret = GroupSecret.new("derby")
    secret.save(tmp_path / "derby.key")
    (tmp_path / "node.toml").write_text('group-key = "derby.key"\n')
    config = load_config(tmp_path / "node.toml")
    assert config.group == "derby" and config.group_secret == secret
    (tmp_path / "other.toml").write_text('group-key = "derby.key"\ngroup = "other"\n')
    with pytest.raises(ConfigError, match="not 'other'"):
        load_config(tmp_path / "other.toml")
    (tmp_path / "inline.toml").write_text('group-secret = "00"\n')
    with pytest.raises(ConfigError, match="group-key"):
        load_config(tmp_path / "inline.toml")
    with pytest.raises(ConfigError, match="one group only"):
        NodeConfig(group="x", group_secret=secret)


def _node(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "huddle", "node", "--data-dir", str(tmp_path / "n"), "--interface",
                           "lo", "--no-beacon", "--api", "127.0.0.1:0", *flags],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.processes
def test_a_node_given_a_group_secret_runs_secured(tmp_path: Path) -> None:
    secret = GroupSecret.new("derby")
    secret.save(tmp_path / "derby.key")
    for n, flags in enumerate((("--group-key", str(tmp_path / "derby.key")),
                               ("--group", "derby", "--join", secret.code.lower()))):
        node = NodeProcess(f"n{n}", tmp_path / f"n{n}", "--no-beacon", *flags, group="derby")
        try:
            node.wait_api()
            with urllib.request.urlopen(node.api + "/api/v1/node", timeout=10) as resp:
                info = json.loads(resp.read())
            assert info["group"] == "derby"
            assert info["security"] == {"mode": "group", "key_id": secret.key_id, "refused_handshakes": 0}
        finally:
            node.signal(signal.SIGTERM)
            node.wait(20)
        assert "mesh secured (CurveZMQ): group mode, group key " + secret.key_id in node.log_path.read_text()


def test_toml_allow_list_needs_a_secret(tmp_path: Path) -> None:
    GroupSecret.new("derby").save(tmp_path / "derby.key")
    (tmp_path / "strict.toml").write_text('group-key = "derby.key"\nallow-list = true\n')
    assert load_config(tmp_path / "strict.toml").allow_list
    (tmp_path / "bare.toml").write_text('group = "derby"\nallow-list = true\n')
    with pytest.raises(ConfigError, match="allow-list mode needs a group secret"):
        load_config(tmp_path / "bare.toml")


def test_join_flags_are_checked(tmp_path: Path) -> None:
    code = GroupSecret.new("derby").code
    assert "--join needs --group" in _node(tmp_path, "--join", code).stderr
    typo = code[:-1] + ("0" if code[-1] != "0" else "1")
    assert "does not check out" in _node(tmp_path, "--group", "derby", "--join", typo).stderr
    GroupSecret.new("derby").save(tmp_path / "derby.key")
    wrong = _node(tmp_path, "--group", "other", "--group-key", str(tmp_path / "derby.key"))
    assert wrong.returncode == 2 and "not of --group 'other'" in wrong.stderr
