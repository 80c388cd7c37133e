"""The ``huddle`` command's checks of its arguments: a value that cannot work is refused before
anything runs, with the reason and the usage of the command given (never the top level's, never
a traceback or a bare failure)."""

from __future__ import annotations

import pytest

from huddle.cli import main


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("count", ["-1", "0"])
def test_tail_count_must_be_positive(count: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["tail", "--count", count, "--api", "127.0.0.1:9"], capsys)
    assert "usage: huddle tail" in err and "--count: must be positive" in err


def test_log_after_needs_source(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["log", "--after", "3", "--api", "127.0.0.1:9"], capsys)
    assert "usage: huddle log" in err and "--after needs --source" in err
    err = _refused(["log", "--source", "ab", "--after", "-1", "--api", "127.0.0.1:9"], capsys)
    assert "--after must be 0 or more" in err
    err = _refused(["log", "--limit", "0", "--api", "127.0.0.1:9"], capsys)
    assert "--limit must be between 1 and 10000" in err


@pytest.mark.parametrize("argv, usage", [
    (["node", "--nmae", "x"], "usage: huddle node "),
    (["peers", "--bogus"], "usage: huddle peers "),
    (["group", "new", "derby", "--bogus"], "usage: huddle group new "),
    (["simulate", "--node", "3x"], "usage: huddle simulate "),
])
def test_a_mistyped_flag_shows_the_commands_usage(argv: list[str], usage: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(argv, capsys)
    assert usage in err and "usage: huddle [-h]" not in err, err


@pytest.mark.parametrize("api, why", [
    ("nonsense:abc", "the port must be a number"),
    ("127.0.0.1:99999", "the port must be a number"),
    ("ftp://127.0.0.1:8090", "is not a node's API"),
    (":8090", "is not a node's API"),
])
def test_a_bad_api_address_says_why(api: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["peers", "--api", api]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"huddle peers: --api {api!r}") and why in err, err
    assert "Traceback" not in err
