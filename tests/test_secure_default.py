"""Secure by default (docs/security.md): a node runs with its group's secret or, chosen with
``--open`` (TOML ``open = true``), as an open group that says so; a node with neither is refused
with the ways out, in-process (``Node``, the last line of defence) and as ``huddle node``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Cluster, get, group_key, wait_for

from huddle.cli.parse import build_parser
from huddle.config import NodeConfig, load_config
from huddle.errors import ConfigError
from huddle.node import Node
from huddle.security import OPEN_GROUP, GroupSecret, load_group_file

# Every refusal names each way out: a secret (two ways), founding or pairing, and open mode.
WAYS_OUT = ("--group-key FILE", "--join CODE", "huddle node --group", "--open")


def _config(tmp_path: Path, *flags: str) -> NodeConfig:
    """A node's config as `huddle node FLAGS` makes it (the one place these tests build one)."""
    argv = ["node", "--data-dir", str(tmp_path / "n"), "--interface", "lo", "--no-beacon", "--api", "127.0.0.1:0",
            *flags]
    return NodeConfig().with_flags(vars(build_parser().parse_args(argv)))


def _huddle_node(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "huddle", "node", "--data-dir", str(tmp_path / "n"), "--interface",
                           "lo", "--no-beacon", "--api", "127.0.0.1:0", *flags],
                          capture_output=True, text=True, timeout=60)


def test_a_node_without_a_secret_is_refused_with_the_ways_out(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as named:
        Node(_config(tmp_path, "--group", "derby"))
    text = str(named.value)
    assert "group 'derby' has no secret" in text and "huddle node --group derby" in text
    assert all(way in text for way in WAYS_OUT), text
    assert not (tmp_path / "n").exists(), "refused before the data directory is made"
    # No group either: a secured group needs a name, so the refusal asks for one.
    with pytest.raises(ConfigError, match="no group and no group secret") as unnamed:
        Node(_config(tmp_path))
    assert all(way in str(unnamed.value) for way in WAYS_OUT), unnamed.value


def test_a_secret_or_open_mode_lets_the_node_be_made(tmp_path: Path) -> None:
    assert Node(_config(tmp_path, "--group-key", str(group_key("derby")))).config.group == "derby"
    assert Node(_config(tmp_path, "--open", "--group", "derby")).config.open
    assert Node(_config(tmp_path, "--open")).config.group == "", "an open node may go without a group name"


def test_open_and_a_secret_exclude_each_other(tmp_path: Path) -> None:
    key = group_key("derby")
    code = load_group_file(key).code
    with pytest.raises(ConfigError, match=r"--open runs an open group.*cannot go with --join"):
        _config(tmp_path, "--open", "--group", "derby", "--join", code)
    with pytest.raises(ConfigError, match="cannot go with --group-key"):
        _config(tmp_path, "--open", "--group-key", str(key))
    with pytest.raises(ConfigError, match="exclude each other"):
        NodeConfig(group="derby", group_secret=GroupSecret.from_code("derby", code), open=True)
    # The file's secret and the flag's open mode meet in NodeConfig: refused there too.
    (tmp_path / "secured.toml").write_text(f'group-key = "{key}"\n')
    with pytest.raises(ConfigError, match="exclude each other"):
        load_config(tmp_path / "secured.toml").with_flags(vars(build_parser().parse_args(["node", "--open"])))
    (tmp_path / "both.toml").write_text(f'group-key = "{key}"\nopen = true\n')
    with pytest.raises(ConfigError, match=r"open runs an open group.*cannot go with group-key"):
        load_config(tmp_path / "both.toml")


def test_toml_open_true_chooses_open_mode(tmp_path: Path) -> None:
    (tmp_path / "open.toml").write_text('group = "lab"\nopen = true\n')
    config = load_config(tmp_path / "open.toml")
    assert config.open and config.group_secret is None
    assert Node(config).config.open
    (tmp_path / "typo.toml").write_text('open = "yes"\n')
    with pytest.raises(ConfigError, match="'open' has the wrong type: expected true or false"):
        load_config(tmp_path / "typo.toml")
    assert not load_config(None).open, "open mode is never the default"


@pytest.mark.processes
def test_huddle_node_without_a_secret_exits_with_the_message(tmp_path: Path) -> None:
    # With a group's name, huddle node pairs with its members or founds it (tests/test_pairing.py);
    # without one there is no group to secure.
    out = _huddle_node(tmp_path)
    assert out.returncode == 2 and "no group and no group secret" in out.stderr, out.stderr


@pytest.mark.processes
def test_huddle_node_open_with_a_join_code_is_refused(tmp_path: Path) -> None:
    code = load_group_file(group_key("derby")).code
    out = _huddle_node(tmp_path, "--open", "--group", "derby", "--join", code)
    assert out.returncode == 2, out
    assert "--open runs an open group, without a secret: it cannot go with --join" in out.stderr, out.stderr


@pytest.mark.processes
def test_open_runs_open_and_says_so_secured_is_the_default(cluster: Cluster) -> None:
    lab = cluster.start("lab", secure=False)  # this test is about open mode
    info = get(lab.api, "/api/v1/node")
    assert info["security"]["mode"] == "open" and info["security"]["warning"] == OPEN_GROUP
    assert "chosen with --open" in OPEN_GROUP
    wait_for(lambda: "open group: anyone on this network can join and read (chosen with --open" in
             lab.log_path.read_text(), 10, "the open group's warning in the log")
    out = subprocess.run([sys.executable, "-m", "huddle", "info", "--api", lab.api], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0 and "chosen with --open" in out.stdout, out
    # Without a word, a test's node is secured with its group's session secret.
    secured = cluster.start("secured")
    security = get(secured.api, "/api/v1/node")["security"]
    assert security["mode"] == "group" and security["key_id"] == load_group_file(group_key("test")).key_id
    assert "warning" not in security
