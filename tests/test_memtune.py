"""glibc malloc tuned for a node process (src/huddle/memtune.py): the user's own settings are
left alone, and a tuned process reuses its 1 MiB chunk buffers."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest


def test_tune_malloc_leaves_the_users_own_settings_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from huddle import memtune

    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    assert memtune.tune_malloc() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")
    assert memtune.tune_malloc() is False


_FAULTS = """
import collections, os, resource, sys
from huddle.memtune import tune_malloc
applied = tune_malloc()
fd = os.open(sys.argv[1], os.O_RDONLY)
held = collections.deque()  # 8 chunks in flight, as a node serving a post keeps them
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200):
    held.append(os.pread(fd, 1 << 20, (i % 16) << 20))
    if len(held) > 8:
        held.popleft()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                    reason="tune_malloc only changes glibc's malloc; this C library is not glibc")
def test_a_tuned_node_process_reuses_its_chunk_buffers(tmp_path: Path) -> None:
    """200 reads of 1 MiB with 8 held: tuned, the process faults in about the pages of the 9
    buffers once; with glibc's defaults (kept when the user sets MALLOC_*), about twice that."""
    import subprocess
    import sys

    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(16 << 20))

    def faults(env: dict[str, str]) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", _FAULTS, str(src)], capture_output=True, text=True,
                             env=env, check=True).stdout.split()
        return out[0], int(out[1])

    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES" and not k.startswith("MALLOC_")}
    applied, tuned = faults(env)
    assert applied == "True" and tuned < 9 * 256 * 1.3, tuned
    applied, plain = faults(env | {"MALLOC_ARENA_MAX": "8"})
    assert applied == "False" and plain > 1.5 * tuned, (plain, tuned)
