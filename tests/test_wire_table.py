"""The one table of message types (wire/framing.py ``SPECS``) and the places that must
agree with it: every message class of the wire package has a spec, every spec a
Hypothesis strategy (tests/wire_strategies.py) that round-trips and a section of
docs/protocol.md; the ``Message`` union, the traffic counters' types and the types the
mesh keeps for itself are the table's."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import pkgutil
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wire_strategies import STRATEGIES

import huddle.wire
from huddle import NodeId
from huddle.protocol import Mesh
from huddle.protocol.service import MeshView, PeerFacts
from huddle.transport.stats import TRAFFIC_TYPES
from huddle.wire import MESH_TYPES, SPECS, TAGS, Message, MessageSpec, decode, encode, encode_parts, peek
from huddle.wire.framing import Body

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL_MD = ROOT / "docs" / "protocol.md"
SOURCE = ROOT / "src" / "huddle"
# Files outside the wire that may spell a type tag: the simulator's hostile peers forge
# frames byte by byte on purpose.
SPELLS_TAGS = {"simhostile.py"}
# Files that still spell a tag, until their change to the wire's TAG_ names lands; a file
# that no longer does must leave this set (the test says so).
PENDING_TAGS: set[str] = set()
CLASSES = [spec.cls for spec in SPECS]


def _message_classes() -> set[type[Any]]:
    """Every dataclass defined in a module of the wire package with a ``sender`` field: a
    message (the UDP beacon, ``wire/beacon.py``, is a datagram of its own, not a message)."""
    found: set[type[Any]] = set()
    for info in pkgutil.iter_modules(huddle.wire.__path__):
        if info.name == "beacon":
            continue
        module = importlib.import_module(f"huddle.wire.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == module.__name__ and dataclasses.is_dataclass(cls)
                    and "sender" in {f.name for f in dataclasses.fields(cls)}):
                found.add(cls)
    return found


def test_every_message_class_of_the_wire_has_one_spec() -> None:
    assert len(_message_classes()) >= 14
    assert _message_classes() == set(CLASSES)
    assert len(set(CLASSES)) == len(SPECS)


def test_each_tag_is_its_classes_four_capitals_and_no_two_share_one() -> None:
    for spec in SPECS:
        assert spec.tag == spec.cls.TAG
        assert re.fullmatch(rb"[A-Z]{4}", spec.tag), spec
    assert len(set(TAGS)) == len(TAGS) == len(SPECS)


def test_the_message_union_the_counters_and_the_meshs_own_types_are_the_tables() -> None:
    assert set(typing.get_args(Message)) == set(CLASSES)
    assert TRAFFIC_TYPES == TAGS == tuple(spec.tag for spec in SPECS)
    assert {spec.cls for spec in SPECS if spec.mesh} == MESH_TYPES


def test_every_spec_has_a_strategy() -> None:
    missing = [cls.__name__ for cls in CLASSES if cls not in STRATEGIES]
    assert not missing, f"no Hypothesis strategy in tests/wire_strategies.py for {missing}"
    assert set(STRATEGIES) == set(CLASSES)


@pytest.mark.parametrize("spec", SPECS, ids=[spec.tag.decode() for spec in SPECS])
@given(data=st.data())
def test_every_type_round_trips(spec: MessageSpec, data: st.DataObject) -> None:
    msg = data.draw(STRATEGIES[spec.cls])
    assert type(msg) is spec.cls
    frames = encode(msg)
    assert frames[1] == spec.tag and frames[0] == bytes(msg.sender)
    assert len(frames) == (4 if spec.body is Body.FRAMES else 3)
    assert encode_parts(msg) == frames[1:]
    assert peek(frames) == (bytes(msg.sender), spec.tag)
    assert decode(frames) == msg
    if spec.body is Body.TEXT:
        frames[2].decode("utf-8")  # a text body is UTF-8


def _headings() -> list[str]:
    return [line for line in PROTOCOL_MD.read_text(encoding="utf-8").splitlines()
            if re.match(r"#{2,4} [0-9][0-9.]* ", line)]


def test_every_tag_has_a_section_of_the_protocol() -> None:
    """A numbered heading of docs/protocol.md names each type ("### 4.7 CHAT: text",
    "## 13. Addressed messages: DMSG and DACK")."""
    headings = _headings()
    missing = [tag.decode() for tag in TAGS if not any(re.search(rf"\b{tag.decode()}\b", h) for h in headings)]
    assert not missing, f"no section of docs/protocol.md is titled with {missing}"


def test_every_tag_has_its_name_in_the_wire() -> None:
    for spec in SPECS:
        assert getattr(huddle.wire, f"TAG_{spec.tag.decode()}") == spec.tag
        assert f"TAG_{spec.tag.decode()}" in huddle.wire.__all__


def test_no_module_outside_the_wire_spells_a_tag() -> None:
    literal = re.compile(rb'b"(' + b"|".join(TAGS) + rb')"')
    spelled = {path.relative_to(SOURCE).as_posix() for path in SOURCE.rglob("*.py")
               if not path.relative_to(SOURCE).as_posix().startswith("wire/") and literal.search(path.read_bytes())}
    assert spelled - SPELLS_TAGS - PENDING_TAGS == set(), "compare huddle.wire's TAG_ names (or use peek)"
    assert spelled >= PENDING_TAGS, f"{PENDING_TAGS - spelled} spell no tag now: take them out of PENDING_TAGS"


def test_peek_reads_the_sender_and_tag_of_a_message_shaped_frames_only() -> None:
    sender = bytes(16)
    assert peek([sender, b"CHAT", b"hi"]) == (sender, b"CHAT")
    assert peek([sender, b"WHAT", b""]) == (sender, b"WHAT")  # not checked: decode does that
    assert peek([sender, b"BULK", b"h", b"data"]) == (sender, b"BULK")
    for frames in ([], [sender], [sender, b"CHAT"], [sender, b"CHAT", b"x", b"y"], [sender, b"BULK", b"h", b"d", b"e"]):
        assert peek(frames) is None


class _Claims:
    """A peer service that claims one message type and does nothing."""

    def __init__(self, kind: type[Any]) -> None:
        self.handles = (kind,)

    def attach(self, mesh: MeshView) -> None: ...
    def peer_up(self, peer: NodeId, conn: int, now: float, facts: PeerFacts) -> None: ...
    def peer_down(self, peer: NodeId, now: float) -> None: ...
    def forget(self, peer: NodeId) -> None: ...
    def receive(self, peer: NodeId, msg: Message, now: float) -> None: ...
    def tick(self, now: float) -> None: ...
    def next_deadline(self, now: float) -> float:
        return math.inf
    def take_actions(self) -> list[Any]:
        return []


@pytest.mark.parametrize("spec", SPECS, ids=[spec.tag.decode() for spec in SPECS])
def test_a_service_may_claim_exactly_the_types_the_mesh_does_not_handle(spec: MessageSpec) -> None:
    def mesh() -> Mesh:
        return Mesh(NodeId(b"\x01" * 16), name="a", group="g", endpoint="tcp://10.0.0.1:5000", incarnation="11" * 8,
                    now=0.0, services=[_Claims(spec.cls)])

    if spec.mesh:
        with pytest.raises(ValueError, match="the mesh's own message"):
            mesh()
    else:
        mesh()
