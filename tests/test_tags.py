"""Tags (docs/protocol.md 4.1 and 14.1, "Tags"; docs/configuration.md, "Tags"): their bounds, the
``--tag`` flag and the ``[tags]`` table, HELO and RAWS carrying them (signed, round-tripped, a
peer's beyond the bounds refused as malformed and counted), the picture's members with them and
its digest without them unchanged, the filters, and the text ``huddle peers`` prints."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from wire_strategies import helos, raws

from huddle import NodeId
from huddle.cli.parse import build_parser
from huddle.config import NodeConfig, load_config
from huddle.errors import ConfigError, DecodeError, LocalProtocolError
from huddle.protocol import Mesh
from huddle.protocol.picture_compute import PictureTiming, compute, report_facts
from huddle.render import peers_text, system_text
from huddle.security import NodeIdentity, verify
from huddle.wire import (
    MAX_TAG_VALUE,
    MAX_TAGS,
    Group,
    Helo,
    PeerStat,
    Raws,
    TagError,
    decode,
    encode,
    helo_signed,
    matches,
    parse_filter,
    parse_tags,
    tags_problem,
)

A, B = NodeId(b"\x0a" * 16), NodeId(b"\x0b" * 16)

# Tags every receiver refuses, each for one reason.
BAD_TAGS: list[Any] = [
    {f"k{i}": "v" for i in range(MAX_TAGS + 1)},  # too many
    {"Role": "x"},  # an uppercase key
    {"-role": "x"},  # a key not starting with a letter or digit
    {"": "x"},  # an empty key
    {"k" * 33: "x"},  # a key too long
    {"role": "é" * 33},  # a value of 66 octets
    {"role": "a\nb"},  # a value with a line break
    {"role": "a\x00b"},  # a control character
    {"role": 3},  # a value not a string
    {"role": None},
    ["role", "x"],  # not an object
]


# ------------------------------------------------------------------ the bounds, the flags, the filters


def test_tags_within_the_bounds_pass_and_each_bound_is_checked() -> None:
    assert tags_problem({}) is None
    assert tags_problem({f"k{i}": "v" * MAX_TAG_VALUE for i in range(MAX_TAGS)}) is None
    assert tags_problem({"rack.3_a-b": "", "0": "Zoë's scoreboard"}) is None
    for bad in BAD_TAGS:
        assert tags_problem(bad) is not None, bad


def test_assignments_parse_override_a_base_and_refuse_duplicates_and_malformed_ones() -> None:
    assert parse_tags(["role=scoreboard", "rack=3", "note=a=b"]) == {"role": "scoreboard", "rack": "3", "note": "a=b"}
    assert parse_tags(["role=judge"], base={"role": "scoreboard", "rack": "3"}) == {"role": "judge", "rack": "3"}
    assert parse_tags(["empty="]) == {"empty": ""}
    for bad, why in [(["role"], "KEY=VALUE"), (["role=a", "role=b"], "twice"), (["Role=a"], "tag key"),
                     ([f"k{i}=v" for i in range(MAX_TAGS + 1)], "at most"), ([f"r={'x' * 65}"], "octets")]:
        with pytest.raises(TagError, match=why):
            parse_tags(bad)
    with pytest.raises(TagError, match="at most"):  # the base counts too
        parse_tags(["one-more=x"], base={f"k{i}": "v" for i in range(MAX_TAGS)})


def test_filters_match_a_value_or_a_key_and_all_must_match() -> None:
    tags = {"role": "scoreboard", "rack": "3"}
    assert matches(tags, parse_filter([]))
    assert matches(tags, parse_filter(["role=scoreboard"]))
    assert matches(tags, parse_filter(["role"]))
    assert matches(tags, parse_filter(["role=scoreboard", "rack=3"]))
    assert not matches(tags, parse_filter(["role=scoreboard", "rack=4"]))
    assert not matches(tags, parse_filter(["zone"]))
    assert matches({"empty": ""}, parse_filter(["empty="])) and not matches({"empty": "x"}, parse_filter(["empty="]))
    for bad in ["Role=x", "=x", "", "role=a\tb"]:
        with pytest.raises(TagError):
            parse_filter([bad])


def test_the_tag_flag_and_the_tags_table_give_the_nodes_tags(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[tags]\nrole = "scoreboard"\nrack = "3"\n')
    assert load_config(path).tags == {"role": "scoreboard", "rack": "3"}
    args = vars(build_parser().parse_args(["node", "--tag", "role=judge", "--tag", "zone=north"]))
    assert load_config(path).with_flags(args).tags == {"role": "judge", "rack": "3", "zone": "north"}
    path.write_text('tag = ["role=scoreboard"]\n')  # the flag's own flat form
    assert load_config(path).tags == {"role": "scoreboard"}


@pytest.mark.parametrize(("toml", "why"), [
    ("[tags]\nrack = 3\n", r"\[tags\] rack must be a string, e.g. rack = \"3\""),
    ("[tags]\nRack = \"3\"\n", "tag key 'Rack'"),
    ("tags = \"role=x\"\n", "tags are a table"),
    ("[tags]\n" + "".join(f'k{i} = "v"\n' for i in range(MAX_TAGS + 1)), "at most 16 tags"),
])
def test_a_bad_tags_table_is_refused_naming_the_file(tmp_path: Path, toml: str, why: str) -> None:
    path = tmp_path / "node.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError, match=why) as err:
        load_config(path)
    assert str(path) in str(err.value)


def test_bad_tag_flags_are_refused_as_flags() -> None:
    for argv, why in [(["--tag", "role"], "--tag: tag 'role' must be KEY=VALUE"),
                      (["--tag", "role=a", "--tag", "role=b"], "--tag: tag 'role' is given twice")]:
        with pytest.raises(ConfigError, match=why):
            NodeConfig().with_flags(vars(build_parser().parse_args(["node", *argv])))


def test_a_malformed_peers_filter_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args(["peers", "--tag", "role=scoreboard", "--tag", "rack"]).tag == [
        "role=scoreboard", "rack"]
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["peers", "--tag", "Role=x"])
    assert exit_.value.code == 2
    assert "tag key 'Role'" in capsys.readouterr().err


def test_join_takes_an_address_and_a_timeout_of_at_most_a_minute(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["join", "127.0.0.1:5000"])
    assert (args.address, args.timeout) == ("127.0.0.1:5000", 5.0)
    assert build_parser().parse_args(["join", "h:1", "--timeout", "0.5"]).timeout == 0.5
    for bad in ("61", "0", "x"):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args(["join", "h:1", "--timeout", bad])
        assert exit_.value.code == 2
    assert "must be 0.1..60 seconds" in capsys.readouterr().err


# ------------------------------------------------------------------ HELO


@settings(max_examples=200)
@given(helos())
def test_a_helo_with_tags_round_trips(helo: Helo) -> None:
    assert decode(encode(helo)) == helo
    assert decode(encode(helo)).tags == helo.tags  # left out of equality (a dict): checked apart


def test_a_tagless_helo_signs_the_octets_it_signed_before_tags_existed() -> None:
    helo = Helo(A, endpoint="tcp://127.0.0.1:5000", name="alice", incarnation="11" * 8, key=b"\x01" * 32,
                sig=b"\x02" * 64, at=1000)
    assert helo_signed(helo) == (
        b'huddle HELO 1\n["0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","",1000,"01010101010101010101010101010101010101010101'
        b'01010101010101010101",1,"tcp://127.0.0.1:5000","alice","1111111111111111",false,0,"",0.0,0,0,0]')
    assert b'"tags"' not in encode(helo)[2]


def test_a_helos_tags_are_signed() -> None:
    me = NodeIdentity.generate()
    helo = Helo(me.node_id, endpoint="tcp://127.0.0.1:5000", name="alice", incarnation="11" * 8,
                key=me.public_key, sig=bytes(64), at=1000, tags={"role": "scoreboard"})
    helo = dataclasses.replace(helo, sig=me.sign(helo_signed(helo)))
    assert verify(me.public_key, helo_signed(decode(encode(helo))), helo.sig)  # type: ignore[arg-type]
    for changed in ({"role": "judge"}, {}, {"role": "scoreboard", "rack": "3"}):
        assert not verify(me.public_key, helo_signed(dataclasses.replace(helo, tags=changed)), helo.sig), changed


def _helo_body(tags: Any) -> bytes:
    return json.dumps({"version": 1, "endpoint": "tcp://127.0.0.1:5000", "name": "x", "incarnation": "11" * 8,
                       "tags": tags}).encode()


@pytest.mark.parametrize("tags", BAD_TAGS)
def test_a_helo_with_tags_beyond_the_bounds_is_malformed(tags: Any) -> None:
    with pytest.raises(DecodeError):
        decode([bytes(A), b"HELO", _helo_body(tags)])
    with pytest.raises(LocalProtocolError):  # nor can this node build one
        Helo(A, endpoint="tcp://127.0.0.1:5000", name="x", incarnation="11" * 8, tags=tags)


def _mesh(**kw: Any) -> Mesh:
    return Mesh(NodeId(b"\x01" * 16), name="alice", group="g", endpoint="tcp://10.0.0.1:5000",
                incarnation="11" * 8, now=0.0, **kw)


def test_the_mesh_counts_a_helo_with_bad_tags_as_malformed_and_keeps_a_good_ones_tags() -> None:
    mesh = _mesh()
    peer = NodeId.random()  # a legacy id: an unsigned HELO is admitted in open mode
    for i, tags in enumerate(BAD_TAGS):
        mesh.receive([bytes(peer), b"HELO", _helo_body(tags)], 0.0, "10.0.0.4:1")
        assert mesh.stats.decode_errors == i + 1
    assert mesh.peers(0.0) == [] and not mesh.sessions.by_uuid
    helo = Helo(peer, endpoint="tcp://10.0.0.4:6000", name="bob", incarnation="22" * 8, tags={"role": "scoreboard"})
    mesh.receive(encode(helo), 0.1, "10.0.0.4:2")
    mesh.receive(encode(Group(peer, group="g")), 0.1, "10.0.0.4:2")
    assert [(p.name, p.tags) for p in mesh.peers(0.1)] == [("bob", {"role": "scoreboard"})]
    assert mesh.stats.decode_errors == len(BAD_TAGS)


def test_the_mesh_says_its_tags_in_its_helo_and_refuses_bad_ones() -> None:
    mesh = _mesh(tags={"role": "scoreboard"})
    assert mesh.tags == {"role": "scoreboard"}
    helo = mesh.greeting.helo("tcp://10.0.0.1:5000", reply=False, peers=0, deltas=True, now=1.0, to=None)
    assert helo.tags == {"role": "scoreboard"}
    assert verify(helo.key, helo_signed(helo), helo.sig)
    with pytest.raises(LocalProtocolError, match="tags"):
        _mesh(tags={"Role": "x"})


# ------------------------------------------------------------------ RAWS and the picture


def _report(origin: NodeId, peer: NodeId, **kw: Any) -> Raws:
    return Raws(origin, origin=origin, seq=7, name=f"n{origin.hex()[:2]}", node_type="standard", beat=1.0, lost=4,
                cut_off=False, peers=(PeerStat(peer, 0.5, 0.002, "alive"),), **kw)


@settings(max_examples=200)
@given(raws())
def test_a_report_with_tags_round_trips(report: Raws) -> None:
    back = decode(encode(report))
    assert back == report and back.tags == report.tags  # type: ignore[union-attr]


@pytest.mark.parametrize("tags", BAD_TAGS)
def test_a_report_with_tags_beyond_the_bounds_is_malformed(tags: Any) -> None:
    body = json.loads(encode(_report(A, B))[2])
    with pytest.raises(DecodeError):
        decode([bytes(A), b"RAWS", json.dumps(body | {"tags": tags}).encode()])


def test_a_tagless_picture_has_the_digest_it_had_before_tags() -> None:
    pic = compute({A: _report(A, B), B: _report(B, A)})
    assert pic.digest == "3eca22d5ba5b2312aab3c0ba52390462eebeffe8578f9fea35dcf08a149ac368"
    assert all("tags" not in m for m in pic.members)
    assert b'"tags"' not in encode(_report(A, B))[2]


def test_the_picture_carries_each_members_tags_and_they_move_the_digest() -> None:
    plain = compute({A: _report(A, B), B: _report(B, A)})
    tagged = compute({A: _report(A, B, tags={"role": "scoreboard"}), B: _report(B, A)})
    assert [m.get("tags") for m in tagged.members] == [{"role": "scoreboard"}, None]
    assert tagged.digest != plain.digest
    # Received as another node receives them: the same digest.
    wired = {n: decode(encode(r)) for n, r in ((A, _report(A, B, tags={"role": "scoreboard"})), (B, _report(B, A)))}
    assert compute(wired).digest == tagged.digest  # type: ignore[arg-type]
    timing = PictureTiming()
    assert report_facts(_report(A, B, tags={"role": "x"}), timing) != report_facts(_report(A, B), timing)


# ------------------------------------------------------------------ text


def test_peers_and_system_text_show_the_tags() -> None:
    me = {"name": "alice", "uuid": "a" * 32, "key": "k1", "tags": {"role": "desk"}}
    peers = [{"name": "bob", "uuid": "b" * 32, "state": "alive", "endpoint": "tcp://127.0.0.1:1", "rtt_ms": 1.0,
              "key": "k2", "verified": True, "tags": {"role": "scoreboard", "rack": "3"}},
             {"name": "carol", "uuid": "c" * 32, "state": "alive", "endpoint": "tcp://127.0.0.1:2", "rtt_ms": None,
              "key": "k3", "verified": True, "tags": {}}]
    lines = peers_text(peers, me).splitlines()
    assert lines[0] == f"this node: alice {'a' * 8} key k1 tags role=desk"
    assert lines[1].split()[-1] == "TAGS"
    assert lines[2].split()[-1] == "rack=3,role=scoreboard" and lines[3].split()[-1] == "-"
    members = [{"name": "bob", "uuid": "b" * 32, "type": "standard", "health": "ok", "problems": [],
                "tags": {"role": "scoreboard"}}]
    assert system_text({"digest": "d" * 64, "members": members, "links": []}).splitlines()[1].endswith(
        "role=scoreboard")
