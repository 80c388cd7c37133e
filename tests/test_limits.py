"""The limits table: one place, set from TOML or --limit, and every limit documented."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from huddle.config import load_config
from huddle.errors import ConfigError
from huddle.limits import Limits, describe

DOCS = Path(__file__).resolve().parent.parent / "docs" / "limits.md"


def test_every_limit_is_in_docs_limits_md_with_its_default() -> None:
    text = DOCS.read_text()
    rows = dict(re.findall(r"^\| `([a-z-]+\.[a-z0-9-]+)` \| ([^|]+) \|", text, re.MULTILINE))
    names = [k for k, _, _ in describe()]
    assert names, "no limits declared"
    missing = [k for k in names if k not in rows]
    assert not missing, f"docs/limits.md lacks {missing}"
    unknown = sorted(set(rows) - set(names))
    assert not unknown, f"docs/limits.md documents limits that do not exist: {unknown}"


def test_toml_tables_and_flags_set_limits(tmp_path: Path) -> None:
    conf = tmp_path / "node.toml"
    conf.write_text('name = "x"\n[limits.mesh]\nreceive-hwm = 77\n')
    config = load_config(conf)
    assert config.limits.mesh.receive_hwm == 77
    assert config.limits.mesh.receive_batch_bytes == Limits().mesh.receive_batch_bytes
    config = config.with_limits(["mesh.receive-batch-bytes=2m", "mesh.receive_hwm=5"])
    assert config.limits.mesh.receive_batch_bytes == 2 * 1024 * 1024
    assert config.limits.mesh.receive_hwm == 5


@pytest.mark.parametrize(("toml", "message"), [
    ("[limits.nowhere]\nx = 1\n", "unknown limits area 'nowhere'"),
    ("[limits.mesh]\nnothing = 1\n", "unknown limit mesh.nothing"),
    ("[limits.mesh]\nreceive-hwm = \"many\"\n", "must be a number"),
    ("[limits.mesh]\nreceive-hwm = -1\n", "must not be negative"),
    ("[limits.mesh]\nreceive-hwm = 1.5\n", "wrong type"),
    ("limits = 3\n", "limits are tables"),
])
def test_a_bad_limit_is_a_clear_config_error(tmp_path: Path, toml: str, message: str) -> None:
    conf = tmp_path / "node.toml"
    conf.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(conf)


@pytest.mark.parametrize("flag", ["mesh.receive-hwm", "receive-hwm=3", "mesh=3", "mesh.receive-hwm=lots"])
def test_a_bad_limit_flag_is_a_clear_config_error(flag: str) -> None:
    with pytest.raises(ConfigError, match=r"--limit|must be a number|unknown"):
        load_config(None).with_limits([flag])


def test_huddle_limits_lists_every_limit() -> None:
    out = subprocess.run([sys.executable, "-m", "huddle", "limits"], capture_output=True, text=True, check=True).stdout
    for name, value, _ in describe():
        assert re.search(rf"^{re.escape(name)}\s+{re.escape(str(value))}\s", out, re.MULTILINE), name


def test_the_protocol_and_guest_documents_name_the_limits_of_their_doors() -> None:
    """docs/protocol.md names every limit a peer can meet on the wire (mesh, log, posts, naming)
    where it describes the behaviour; docs/guests.md names every guest limit."""
    root = DOCS.parent
    protocol = (root / "protocol.md").read_text()
    guests = (root / "guests.md").read_text()
    missing = [k for k, _, _ in describe() if k.split(".")[0] in ("mesh", "log", "posts", "naming") and k not in protocol]
    assert not missing, f"docs/protocol.md does not name {missing}"
    missing = [k for k, _, _ in describe() if k.startswith("guests.") and k.split(".", 1)[1] not in guests]
    assert not missing, f"docs/guests.md does not name {missing}"
