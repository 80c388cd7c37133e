"""The configuration by section: one name per setting (flag = TOML key), the older flat
files, every mesh timer settable, and mistakes that name the file, the key and the
closest known key (docs/configuration.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from conftest import group_key

from huddle.cli.parse import build_parser
from huddle.config import SECTIONS, SETTINGS, NodeConfig, Setting, TimingSection, load_config
from huddle.config.sections import TIMING_RANGES, MeshSection
from huddle.errors import ConfigError
from huddle.guests.section import GuestsSection
from huddle.node import Node
from huddle.posts.section import PostsSection
from huddle.protocol import Timing
from huddle.security import GroupSecret

ROOT = Path(__file__).resolve().parent.parent

# A value other than the default for every setting, all valid together: the one table a new
# setting must join (test_every_setting_has_a_sample).
SAMPLES: dict[str, Any] = {
    "name": "judge", "group": "derby", "data-dir": "/tmp/huddle-judge", "type": "console", "log-level": "debug",
    "allow-list": True, "group-key": "derby.key", "limit": ["api.max-connections=512"],
    "tag": ["role=scoreboard", "rack=3"],
    "port": 50001, "port-range": "50000-50100", "mtu": 30000, "max-message": 1_000_000, "send-buffer": 2_000_000,
    "seed": ["127.0.0.1:50000", "127.0.0.1:50002"], "beacon": False, "beacon-address": "127.255.255.255",
    "beacon-port": 6000, "beacon-interval": 0.5, "interface": "lo", "mdns": True,
    "mdns-type": "_nsode_derbyos_com._tcp", "naming": ["tcp://10.0.0.5:5680"], "naming-interval": 0.0,
    "naming-timeout": 2.5, "api": "127.0.0.1:0", "api-require-token": True,
    "heartbeat-interval": 0.25, "suspect-after": 0.75, "gone-after": 1.5, "handshake-timeout": 2.0,
    "seed-retry": 0.5, "rtt-probe-interval": 3.0, "gone-retention": 30.0, "membership-interval": 1.5,
    "seed-reopen-after": 10.0, "exclude-after-errors": 5, "exclude-slow-after": 0.0,
    "posts-policy": "newest:5", "posts-chunk": 65536, "posts-interval": 1.0,
    "pair-port": 40001, "pair-request-ttl": 60.0, "pair-listen": 1.0, "pair-with": ["127.0.0.1:40002"],
    "guests": True, "guest-marco-port": 1031, "guest-port": 40000, "guest-ws-port": 0, "guest-max-message": 1000,
    "guest-keyless": True,
    "zre": True, "zre-port": 5671, "zre-interface": "lo", "zre-plain": True,
    "control-shutdown-command": ["sudo", "poweroff"], "control-reboot-command": ["sudo", "reboot"],
    "crg-ws-writable": True,
}
NO_KEY = {"config"}  # the flag that names the file itself
# join gives the group secret as group-key does, and not with it; open runs without a secret
# (not with group-key, nor allow-list): their own tests (tests/test_secure_default.py for open).
SAMPLED = tuple(s for s in SETTINGS if s.flag not in ("join", "open"))


def node_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser: argparse.ArgumentParser = sub.choices["node"]
    return parser


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _argv(s: Setting, value: Any) -> list[str]:
    if isinstance(value, bool):
        return [f"--{s.flag}" if value else f"--no-{s.flag}"]
    if isinstance(value, list):
        return [a for v in value for a in (f"--{s.flag}", str(v))]
    return [f"--{s.flag}", str(value)]


def _read(config: NodeConfig, s: Setting) -> Any:
    return getattr(getattr(config, s.table) if s.table else config, s.field)


def _expected(s: Setting, value: Any) -> Any:
    if s.kind == "tuple[int, int]":
        lo, hi = value.split("-")
        return int(lo), int(hi)
    if s.kind == "Path":
        return Path(value)
    if isinstance(value, list):
        return tuple(value)
    if s.kind.startswith("float"):
        return float(value)
    return value


# ------------------------------------------------------------------ one name everywhere

def test_every_flag_is_a_key_and_every_key_a_flag() -> None:
    flags: dict[str, str] = {}  # option name -> its dest
    for action in node_parser()._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for option in action.option_strings:
            flags[option.removeprefix("--")] = action.dest
    by_flag = {s.flag: s for s in SETTINGS}
    for option, dest in flags.items():
        if option in NO_KEY:
            continue
        negated = option.removeprefix("no-")
        if negated != option and negated in by_flag and by_flag[negated].kind == "bool":
            assert dest == by_flag[negated].dest, f"--{option} must set {by_flag[negated].dest}, sets {dest}"
            continue
        assert option in by_flag, f"the flag --{option} has no TOML key: add the setting to a section (huddle.config)"
        assert dest == by_flag[option].dest, f"--{option}'s dest is {dest!r}; NodeConfig.with_flags reads " \
            f"{by_flag[option].dest!r}"
    missing = sorted(f"--{s.flag} ({s.where})" for s in SETTINGS if s.flag not in flags)
    assert not missing, f"settings without a flag of `huddle node`: {missing}"
    assert len(by_flag) == len(SETTINGS), "two settings share a flag"


def test_the_key_is_the_flag_without_the_sections_prefix() -> None:
    for s in SETTINGS:
        if not s.table:
            assert s.key == s.flag, s
            continue
        prefix = SECTIONS[s.table].FLAG_PREFIX
        main = s.flag == s.table  # --guests, --api: a flag named as its section sets the section's main key
        assert main or s.flag == prefix + s.key, f"{s.where}'s flag is --{s.flag}, not --{prefix}{s.key}"


def test_every_setting_has_a_sample() -> None:
    assert set(SAMPLES) == {s.flag for s in SAMPLED}


def _sectioned(samples: dict[str, Any]) -> str:
    top = [f"{s.key} = {_toml(samples[s.flag])}" for s in SAMPLED if not s.table]
    tables = [f"\n[{t}]\n" + "\n".join(f"{s.key} = {_toml(samples[s.flag])}" for s in SAMPLED if s.table == t)
              for t in SECTIONS]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


def _flat(samples: dict[str, Any]) -> str:
    return "".join(f"{s.flag} = {_toml(samples[s.flag])}\n" for s in SAMPLED)


def test_a_setting_is_the_same_as_a_section_key_a_flat_key_and_a_flag(tmp_path: Path) -> None:
    GroupSecret.new("derby").save(tmp_path / "derby.key")
    (tmp_path / "sections.toml").write_text(_sectioned(SAMPLES))
    (tmp_path / "flat.toml").write_text(_flat(SAMPLES))
    (tmp_path / "node.toml").write_text("[node]\n" + _flat(SAMPLES))
    argv = ["node", *(a for s in SAMPLED for a in _argv(s, SAMPLES[s.flag]))]
    argv[argv.index("--group-key") + 1] = str(tmp_path / "derby.key")
    by_flags = NodeConfig().with_flags(vars(build_parser().parse_args(argv)))
    configs = [load_config(tmp_path / f) for f in ("sections.toml", "flat.toml", "node.toml")]
    for s in SAMPLED:
        if s.field:
            for config in (*configs, by_flags):
                assert _read(config, s) == _expected(s, SAMPLES[s.flag]), s.where
    assert configs[0] == configs[1] == configs[2] == by_flags
    assert by_flags.limits.api.max_connections == 512
    assert by_flags.tags == {"role": "scoreboard", "rack": "3"}
    assert by_flags.group_secret is not None and by_flags.group_secret.group == "derby"
    assert by_flags != NodeConfig(), "the samples must not be the defaults"


def test_older_spellings_still_load(tmp_path: Path) -> None:
    path = tmp_path / "old.toml"
    path.write_text('seeds = ["127.0.0.1:50000"]\nnode-type = "server"\nguest_ws_port = 0\n')
    config = load_config(path)
    assert (config.discovery.seeds, config.node_type, config.guests.ws_port) == (("127.0.0.1:50000",), "server", 0)
    path.write_text('[discovery]\nseeds = ["127.0.0.1:50000"]\n')
    assert load_config(path).discovery.seeds == ("127.0.0.1:50000",)
    assert NodeConfig().with_overrides(seeds=("127.0.0.1:1",), node_type="server").discovery.seeds == ("127.0.0.1:1",)


def test_docs_list_every_setting_in_its_section() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    rows: list[tuple[str, str, str]] = []
    table = ""
    for line in text.splitlines():
        if m := re.match(r"^### (?:\[(\w+)\]|\(top level\))", line):
            table = m[1] or ""
        elif m := re.match(r"^\| `([\w-]+)` \| `--([\w-]+)` \|", line):
            rows.append((table, m[1], m[2]))
    assert sorted(rows) == sorted((s.table, s.key, s.flag) for s in SETTINGS)


def test_the_example_files_of_the_docs_load(tmp_path: Path) -> None:
    blocks = [(doc.name, block) for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
              for block in re.findall(r"```toml\n(.*?)```", doc.read_text(), re.DOTALL)]
    assert len(blocks) >= 4, blocks
    for i, (name, block) in enumerate(blocks):
        path = tmp_path / f"{i}.toml"
        path.write_text(block)
        try:
            load_config(path)
        except ConfigError as exc:
            raise AssertionError(f"a ```toml block of {name} does not load: {exc}\n{block}") from None


# ------------------------------------------------------------------ the mesh's timers

def test_every_timing_field_can_be_set(tmp_path: Path) -> None:
    assert {f.name for f in fields(Timing)} == {f.name for f in fields(TimingSection)} == set(TIMING_RANGES)
    path = tmp_path / "node.toml"
    path.write_text(_sectioned(SAMPLES))
    GroupSecret.new("derby").save(tmp_path / "derby.key")
    timing = load_config(path).mesh_timing()
    for f in fields(Timing):
        assert getattr(timing, f.name) == SAMPLES[f.name.replace("_", "-")], f.name
    assert NodeConfig().mesh_timing() == Timing(), "unset, the standard type's timers are the protocol's defaults"


@pytest.mark.parametrize("key", sorted(TIMING_RANGES))
def test_a_timer_out_of_its_range_is_refused_with_the_range(tmp_path: Path, key: str) -> None:
    lo, hi, _ = TIMING_RANGES[key]
    path = tmp_path / "node.toml"
    for bad in (lo - 0.001 if lo else -1, hi * 2):
        value = int(bad) if key == "exclude_after_errors" else bad
        path.write_text(f"[timing]\n{key.replace('_', '-')} = {value!r}\n")
        with pytest.raises(ConfigError, match=rf"^in {re.escape(str(path))}: timing: {key.replace('_', '-')} must "
                           rf"be [\d.]+\.\.[\d.]+ "):
            load_config(path)


def test_the_liveness_timers_keep_their_relations() -> None:
    with pytest.raises(ConfigError, match="suspect_after must be positive and not above gone_after"):
        NodeConfig(timing=TimingSection(suspect_after=4, gone_after=3))
    with pytest.raises(ConfigError, match="gone_after must exceed the heartbeat interval"):
        NodeConfig(timing=TimingSection(heartbeat_interval=2, gone_after=1))


# ------------------------------------------------------------------ mistakes, explained

@pytest.mark.parametrize(("text", "complaint"), [
    ("[posts]\nposts-polcy = 'all'\n", "unknown config key 'posts-polcy' in [posts]; did you mean 'policy'?"),
    ("[posts]\npolcy = 'all'\n", "unknown config key 'polcy' in [posts]; did you mean 'policy'?"),
    ("posts-polcy = 'all'\n", "unknown config key 'posts-polcy'; did you mean 'posts-policy'?"),
    ("[guests]\nws_prt = 0\n", "unknown config key 'ws_prt' in [guests]; did you mean 'ws-port'?"),
    ("[timng]\ngone-after = 3\n", "unknown table [timng]; did you mean 'timing'?"),
    ("posts = 'newest:5'\n", "posts is a section: a table [posts] with its keys below it"),
    ("[posts]\nchunk = 'big'\n", "'chunk' in [posts] has the wrong type: expected an integer, got str 'big'"),
    ("posts-chunk = 'big'\n", "'posts-chunk' ([posts] chunk) has the wrong type: expected an integer, got str 'big'"),
    ("[discovery]\nseed = '127.0.0.1:1'\n", "'seed' in [discovery] has the wrong type: expected a list of strings"),
    ("[guests]\nenabled = 1\n", "'enabled' in [guests] has the wrong type: expected true or false, got int 1"),
    ("[mesh]\nport-range = [1]\n", "'port-range' in [mesh] has the wrong type: expected \"LOW-HIGH\" or [LOW, HIGH]"),
    ("name = 3\n", "'name' has the wrong type: expected a string, got int 3"),
    ("[discovery]\nbeacon-port = 6000\n\n[node]\nbeacon-port = 6001\n", "[discovery] beacon-port is given twice"),
    ("seeds = []\nseed = []\n", "[discovery] seed is given twice (as seeds and as seed): keep one"),
    ("[posts]\ninterval = 0\n", "posts interval must be positive"),
    ("join = 'ABCD'\n", "join needs group NAME"),
    ("join = 'ABCD'\ngroup-key = 'x.key'\n", "give group-key or join, not both"),
])
def test_mistakes_name_the_file_and_the_key(tmp_path: Path, text: str, complaint: str) -> None:
    path = tmp_path / "node.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"in {path}: "), caught.value
    assert complaint in str(caught.value)


def test_join_in_the_file_gives_the_secret_of_the_group(tmp_path: Path) -> None:
    secret = GroupSecret.new("derby")
    path = tmp_path / "node.toml"
    path.write_text(f'group = "derby"\njoin = "{secret.code}"\n')
    assert load_config(path).group_secret == secret


def test_each_section_checks_itself() -> None:
    for bad, complaint in (
        (lambda: MeshSection(mtu=2000, send_buffer=1000), "send buffer must hold at least one frame"),
        (lambda: MeshSection(port_range=(2, 1)), "port range must be LOW-HIGH"),
        (lambda: GuestsSection(marco_port=0), "guest marco port must be 1..65535"),
        (lambda: GuestsSection(max_message=1), "guest max message must be 2..999999"),
        (lambda: PostsSection(policy="newest:0"), "N >= 1"),
        (lambda: TimingSection(seed_retry=0), "timing: seed-retry must be 0.01..600 seconds, got 0"),
    ):
        with pytest.raises(ConfigError, match=re.escape(complaint)):
            bad()


def test_overrides_name_real_settings() -> None:
    with pytest.raises(TypeError, match="no field or setting 'posts_polcy'"):
        NodeConfig().with_overrides(posts_polcy="all")
    config = NodeConfig().with_overrides(guests=True, api="127.0.0.1:0", posts_policy="newest:2", beacon=None)
    assert (config.guests.enabled, config.api.address, config.posts.policy) == (True, "127.0.0.1:0", "newest:2")
    assert config.discovery.beacon, "None leaves a setting as it is"


def test_a_node_runs_with_the_sections_and_timers_of_its_file(tmp_path: Path) -> None:
    """The mesh a node starts gets [timing]'s timers, and the API [api]'s address (loopback only)."""
    path = tmp_path / "node.toml"
    path.write_text(f'name = "t"\ngroup = "g"\ndata-dir = "{tmp_path / "d"}"\nlog-level = "warning"\n'
                    f'group-key = "{group_key("g")}"\n'
                    '[discovery]\nbeacon = false\ninterface = "lo"\n[api]\naddress = "127.0.0.1:0"\n'
                    '[timing]\nhandshake-timeout = 2.5\nmembership-interval = 1.25\nexclude-after-errors = 7\n')
    config = load_config(path)
    seen: dict[str, Any] = {}

    def ready(node: Node) -> None:
        seen.update(timing=node.mesh.timing, api=node.api_url)
        node.stop()

    asyncio.run(asyncio.wait_for(Node(config).run(ready), 30))
    assert seen["timing"] == config.mesh_timing()
    assert (seen["timing"].handshake_timeout, seen["timing"].membership_interval,
            seen["timing"].exclude_after_errors) == (2.5, 1.25, 7)
    assert seen["api"].startswith("http://127.0.0.1:")
