"""``[[apps]]`` in the node's TOML (huddle/control/section.py; docs/control.md): a type's apps
and a node's own merged by name, ordered by ``depends-on``, and every mistake refused with the
file, the app and what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from huddle.config import NodeConfig, load_config
from huddle.control.section import AppSpec, node_apps
from huddle.errors import ConfigError


def load(tmp_path: Path, text: str) -> NodeConfig:
    path = tmp_path / "node.toml"
    path.write_text(text)
    return load_config(path)


def test_a_types_apps_and_a_nodes_own_merge_by_name_in_dependency_order(tmp_path: Path) -> None:
    cfg = load(tmp_path, """
type = "display"
[types.display]
[[types.display.apps]]
name = "scoreboard"
command = ["python3", "board.py"]
depends-on = ["clock"]
[[types.display.apps]]
name = "clock"
command = ["clock-v1"]
[[types.server.apps]]
name = "recorder"
command = ["rec"]
[[apps]]
name = "clock"
command = ["clock-v2", "--fast"]
cwd = "clocks"
env = { MODE = "period" }
restart = "always"
exitcodes = [0, 2]
startsecs = 0.5
stop-signal = "INT"
stop-timeout = 3
""")
    apps = cfg.node_apps()
    assert [a.name for a in apps] == ["clock", "scoreboard"]  # the dependency first; no server app here
    clock = apps[0]
    assert clock.command == ("clock-v2", "--fast")  # the node's own replaced its type's, whole
    assert clock.cwd == tmp_path / "clocks" and clock.env == (("MODE", "period"),)
    assert (clock.restart, clock.exitcodes, clock.startsecs, clock.stop_signal, clock.stop_timeout) == (
        "always", (0, 2), 0.5, "INT", 3.0)
    assert apps[1].autostart and apps[1].restart == "on-failure" and apps[1].retries == 3  # the defaults
    assert cfg.type_spec().name == "display"
    assert load(tmp_path, "").node_apps() == ()


@pytest.mark.parametrize(("text", "message"), [
    ('[[apps]]\nname = "a"\ncommand = ["x"]\nrestrat = "always"', "unknown key 'restrat'; did you mean 'restart'?"),
    ('[[apps]]\nname = "a"\ncommand = "x y"', "command has the wrong type: expected a list of strings"),
    ('[[apps]]\nname = "a"', "an app needs command"),
    ('[[apps]]\nname = "A b"\ncommand = ["x"]', "app name 'A b' must be"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\nrestart = "sometimes"', "restart must be one of never, on-failure"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\nstop-signal = "STOP"', "stop-signal must be one of"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\nretries = -1', "retries must be 0..1000"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\nautostart = "yes"', "autostart has the wrong type"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\n[[apps]]\nname = "a"\ncommand = ["y"]', "app 'a' is given twice"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\ndepends-on = ["b"]', "app 'a' depends on 'b', which is not an app"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\ndepends-on = ["a"]', "app 'a' depends on itself"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\ndepends-on = ["b"]\n[[apps]]\nname = "b"\ncommand = ["x"]\n'
     'depends-on = ["c"]\n[[apps]]\nname = "c"\ncommand = ["x"]\ndepends-on = ["a"]',
     "apps depend on each other in a cycle: a -> b -> c -> a"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\ndepends-on = ["clock@Server"]', "must be an app's name, or NAME@TYPE"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\ndepends-on = ["@server"]', "must be an app's name, or NAME@TYPE"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\ndepends-on = ["clock@"]', "must be an app's name, or NAME@TYPE"),
    ('[[apps]]\nname = "a"\ncommand = ["x"]\nplacement = "anywhere"', "placement must be one of this-node, one-of-type"),
    ('apps = "a"', "[[apps]] is an array of tables"),
    ('[types.display]\napps = 3', "[[types.display.apps]] is an array of tables"),
])
def test_mistakes_are_refused_clearly(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert message in str(info.value)
    assert str(info.value).startswith(f"in {tmp_path / 'node.toml'}:")


def test_another_nodes_app_and_one_of_type_are_read(tmp_path: Path) -> None:
    """``NAME@TYPE`` needs no app of that name on this node and orders nothing here; ``one-of-type`` is kept."""
    cfg = load(tmp_path, '[[apps]]\nname = "board"\ncommand = ["x"]\ndepends-on = ["clock", "clock@server"]\n'
                         'placement = "one-of-type"\n[[apps]]\nname = "clock"\ncommand = ["y"]\n')
    board, _ = sorted(cfg.node_apps(), key=lambda a: a.name)
    assert (board.depends_on, board.local_deps, board.placement) == (("clock", "clock@server"), ("clock",), "one-of-type")
    assert [a.name for a in cfg.node_apps()] == ["clock", "board"]
    with pytest.raises(ConfigError, match="depends on 'nope', which is not an app"):
        load(tmp_path, '[[apps]]\nname = "a"\ncommand = ["x"]\ndepends-on = ["nope", "nope@server"]\n')


def test_a_types_cycle_is_found_on_a_node_of_that_type_only(tmp_path: Path) -> None:
    text = ('[[types.display.apps]]\nname = "a"\ncommand = ["x"]\ndepends-on = ["b"]\n'
            '[[types.display.apps]]\nname = "b"\ncommand = ["x"]\ndepends-on = ["a"]\n')
    assert load(tmp_path, text).node_apps() == ()  # a standard node runs none of a display's apps
    with pytest.raises(ConfigError, match="cycle: a -> b -> a"):
        load(tmp_path, 'type = "display"\n' + text)


def test_node_apps_caps_how_many_a_node_runs() -> None:
    many = [AppSpec(name=f"a{i}", command=("x",)) for i in range(33)]
    with pytest.raises(ConfigError, match="at most 32 apps"):
        node_apps(many, [])
