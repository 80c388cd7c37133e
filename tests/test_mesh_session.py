"""A session's phases (protocol/session.py): one table of moves, one transition(), the
diagram drawn from the table and shown in the docs, and no other way to change a phase."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

from huddle import NodeId
from huddle.errors import LocalProtocolError
from huddle.protocol import Mesh, session
from huddle.protocol.session import TRANSITIONS, Move, Phase, Session, diagram, transition
from huddle.wire import Group, Helo, encode

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL = ROOT / "src" / "huddle" / "protocol"
# The mesh and its parts: the modules that hold sessions.
MESH_MODULES = ("mesh", "session", "sessions", "handshake", "admission", "seeds", "gossip", "introductions", "moves",
                "liveness", "clock", "chat", "helo", "parts")


def test_every_move_in_the_table_lands_where_the_table_says() -> None:
    for (phase, move), after in TRANSITIONS.items():
        assert transition(phase, move) is after


def test_a_move_not_in_the_table_raises() -> None:
    missing = [(p, m) for p, m in itertools.product(Phase, Move) if (p, m) not in TRANSITIONS]
    assert (Phase.CONNECTING, Move.BOUT) in missing and (Phase.ALIVE, Move.HEARD) in missing
    for phase, move in missing:
        with pytest.raises(LocalProtocolError, match=f"no move {move.name} from a session in {phase.name}"):
            transition(phase, move)


def test_a_session_starts_connecting_and_moves_only_along_the_table() -> None:
    s = Session(uuid=NodeId(b"\x02" * 16), conn=1, endpoint="tcp://10.0.0.2:5000", created=0.0, last_heard=0.0)
    assert s.phase is Phase.CONNECTING and not s.admitted
    with pytest.raises(LocalProtocolError):
        s.move(Move.BOUT)  # admitted before its HELO: no such arrow
    assert s.phase is Phase.CONNECTING  # a refused move changes nothing
    for move, after in ((Move.HELO, Phase.HANDSHAKE), (Move.BOUT, Phase.ALIVE), (Move.SILENT, Phase.SUSPECT),
                        (Move.HEARD, Phase.ALIVE)):
        s.move(move)
        assert s.phase is after
    s.move(Move.END)
    assert s.phase is Phase.ALIVE  # removed: its last phase is still read as it ends
    with pytest.raises(TypeError):
        Session(uuid=s.uuid, conn=1, endpoint=s.endpoint, created=0.0, last_heard=0.0,
                phase=Phase.ALIVE)  # type: ignore[call-arg]


def test_every_phase_is_reached_and_left() -> None:
    reached = {after for after in TRANSITIONS.values() if after is not None} | {Phase.CONNECTING}
    assert reached == set(Phase)
    assert {phase for phase, move in TRANSITIONS if move is Move.END} == set(Phase)


def _drawn(text: str, opening: str) -> str:
    """The Mermaid block after ``opening`` in ``text``, its indentation removed."""
    block = text[text.index(opening) + len(opening):].lstrip("\n")
    lines = []
    for line in block.splitlines():
        if not line.strip() or line.strip() == "```":
            break
        lines.append(line)
    indent = min(len(x) - len(x.lstrip()) for x in lines)
    return "\n".join(x[indent:] for x in lines)


def test_the_diagram_in_the_docs_is_the_one_the_table_draws() -> None:
    drawn = diagram()
    assert drawn.splitlines()[0] == "stateDiagram-v2" and len(drawn.splitlines()) == len(TRANSITIONS) + 2
    assert _drawn(session.__doc__ or "", "``tests/test_mesh_session.py`` checks both)::\n") == drawn
    protocol = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = protocol[protocol.index("## 5. Session state machine"):protocol.index("## 6. Liveness")]
    assert _drawn(section, "```mermaid\n") == drawn


def test_the_diagram_follows_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    changed = {**TRANSITIONS, (Phase.SUSPECT, Move.SILENT): Phase.SUSPECT}
    monkeypatch.setattr(session, "TRANSITIONS", changed)
    assert "    SUSPECT --> SUSPECT: SILENT" in diagram()
    assert transition(Phase.SUSPECT, Move.SILENT) is Phase.SUSPECT
    monkeypatch.undo()
    assert "SUSPECT --> SUSPECT" not in diagram()
    with pytest.raises(TypeError):
        TRANSITIONS[Phase.SUSPECT, Move.SILENT] = Phase.SUSPECT  # type: ignore[index]  # read-only


def test_no_code_but_the_table_assigns_a_phase() -> None:
    """grep, as the AST sees it: ``x.phase = ...`` only in Session.move."""
    found = []
    for name in MESH_MODULES:
        tree = ast.parse((PROTOCOL / f"{name}.py").read_text(encoding="utf-8"))
        for scope in ast.walk(tree):
            if not isinstance(scope, ast.FunctionDef):
                continue
            for node in ast.walk(scope):
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
                for target in targets:
                    for leaf in ast.walk(target):
                        if isinstance(leaf, ast.Attribute) and leaf.attr == "phase":
                            found.append(f"{name}.{scope.name}")
    assert found == ["session.move"]
    # No setattr / replace() around it either.
    for name in MESH_MODULES:
        text = (PROTOCOL / f"{name}.py").read_text(encoding="utf-8")
        assert not re.search(r"setattr\([^)]*phase|replace\([^)]*phase=", text), name


def test_the_mesh_moves_a_session_through_the_table() -> None:
    """Driven by messages: HELO, BOUT, silence, a sign of life, a GBYE: each a move of the
    table; a bug that made a move not in it would raise."""
    mesh = Mesh(NodeId(b"\x01" * 16), name="alice", group="g", endpoint="tcp://10.0.0.1:5000",
                incarnation="11" * 8, now=0.0)
    bob = NodeId.random()
    mesh.receive(encode(Helo(bob, endpoint="tcp://10.0.0.2:6000", name="bob", incarnation="22" * 8)), 0.0)
    s = mesh.sessions.by_uuid[bob]
    assert s.phase is Phase.HANDSHAKE
    mesh.receive(encode(Group(bob, group="g")), 0.0)
    assert s.phase is Phase.ALIVE
    mesh.tick(mesh.timing.handshake_timeout / 2 + 0.01)  # not answered yet: suspect after half the timeout
    assert s.phase is Phase.SUSPECT
    mesh.receive(encode(Group(bob, group="g")), 3.0)
    assert s.phase is Phase.ALIVE
    with pytest.raises(LocalProtocolError):
        s.move(Move.BOUT)  # admitted twice: not in the table
    mesh.leave(4.0)
    assert mesh.sessions.by_uuid == {}
