"""An app's output (huddle/control/supervisor.py ``_Output``): rotated at ``log-size`` whatever
size the pipe's reads come in, ``log-keep`` files kept, whole lines where they fit, and the
latest octets read back by offset."""

from __future__ import annotations

import random
from pathlib import Path

from huddle.control.supervisor import RING, _Output


def lines(n: int) -> bytes:
    return b"".join(f"line {i:05d} {'x' * (i % 50)}\n".encode() for i in range(n))


def test_rotation_caps_each_file_and_keeps_the_newest_in_order(tmp_path: Path) -> None:
    data = lines(3000)
    rng = random.Random(3)
    out = _Output(tmp_path / "app.log", 4096, 3)
    at = 0
    while at < len(data):  # reads of any size, as a pipe gives them
        n = rng.choice((1, 17, 300, 5000, 20000))
        out.write(data[at:at + n])
        at += n
    names = ["app.log.3", "app.log.2", "app.log.1", "app.log"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # log-keep: 3 rotated
    sizes = [(tmp_path / n).stat().st_size for n in names]
    assert all(0 < s <= 4096 for s in sizes), sizes
    kept = b"".join((tmp_path / n).read_bytes() for n in names)
    assert data.endswith(kept)  # the newest octets, in order, none lost or doubled
    assert all((tmp_path / n).read_bytes().endswith(b"\n") for n in names)  # whole lines
    assert out.total == len(data)


def test_a_line_longer_than_a_file_is_cut_at_the_files_size(tmp_path: Path) -> None:
    out = _Output(tmp_path / "app.log", 4096, 5)
    out.write(b"short\n")
    out.write(b"y" * 10000)
    files = ["app.log.3", "app.log.2", "app.log.1", "app.log"]
    assert [(tmp_path / n).stat().st_size for n in files] == [6, 4096, 4096, 1808]
    assert b"".join((tmp_path / n).read_bytes() for n in files) == b"short\n" + b"y" * 10000


def test_reads_by_offset_and_what_fell_out(tmp_path: Path) -> None:
    out = _Output(tmp_path / "app.log", 1 << 20, 1)
    assert out.read(None) == {"text": "", "next": 0, "lost": False}
    out.write(b"hello\n")
    first = out.read(None)
    assert first == {"text": "hello\n", "next": 6, "lost": False}
    out.write(b"world\n")
    assert out.read(6) == {"text": "world\n", "next": 12, "lost": False}
    assert out.read(12)["text"] == ""
    out.write(b"z" * RING)
    late = out.read(6)
    assert late["lost"] and len(late["text"]) == RING and late["next"] == 12 + RING


def test_a_limited_read_comes_in_chunks_and_never_cuts_a_character(tmp_path: Path) -> None:
    out = _Output(tmp_path / "app.log", 1 << 20, 1)
    data = ("é" * 100 + "end\n").encode()  # 203 octets, two to a character
    out.write(data)
    first = out.read(0, 51)  # 51 would cut the 26th character: it waits
    assert first == {"text": "é" * 25, "next": 50, "lost": False, "more": True}
    got, after = first["text"], first["next"]
    while True:
        chunk = out.read(after, 51)
        got, after = got + chunk["text"], chunk["next"]
        if not chunk["more"]:
            break
    assert got == data.decode() and after == len(data)
    assert out.read(len(data), 51) == {"text": "", "next": len(data), "lost": False, "more": False}
    assert out.read(None, 4)["text"] == "end\n"  # the tail, at most the limit
