"""Process-wide settings for a node process: malloc (glibc only), and the
limit on open descriptors (:func:`raise_descriptor_limit`).

A node moving a large post allocates and frees buffers of 1 MiB many times a
second: the content read for each CONTENT on the serving side, ZeroMQ's
buffer for each message on the fetching side.  glibc's defaults then keep
giving that memory back to the kernel and asking for it again (after the
first free, blocks of this size come from the heap, whose top is trimmed
whenever more than twice the block is free), so every chunk faults its pages
in afresh.  Measured with ``bench/posts_transfer.py`` (200 MiB, held pages):
the serving node's CPU time 0.11-0.12 s -> 0.07-0.08 s, the fetcher's
0.20-0.22 s -> 0.18-0.19 s, the transfer 1 030-1 140 -> 1 230-1 420 MiB/s.

The cost: up to ``TRIM_THRESHOLD`` of freed memory stays with the process for
reuse instead of going back to the system at once (measured: the fetcher's RSS
after a 200 MiB post 64 MiB, against 50-54 MiB with the defaults; the peak is
64 MiB either way).  Settings the user made
(``GLIBC_TUNABLES``, ``MALLOC_*`` in the environment) are left alone, and so
is any other C library.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import resource

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "raise_descriptor_limit", "tune_malloc"]

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 4 * 1024 * 1024  # blocks below this come from the heap (1 MiB chunks among them)
TRIM_THRESHOLD = 32 * 1024 * 1024  # free memory kept at the heap's top before it is given back


def tune_malloc() -> bool:
    """Apply the settings above to this process; False if they were not (not glibc, or the
    user set malloc tunables of their own)."""
    if os.environ.get("GLIBC_TUNABLES") or any(k.startswith("MALLOC_") for k in os.environ):
        return False
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # Both, or the dynamic threshold (which a fixed trim threshold turns off) would stay at
    # 128 KiB and every 1 MiB block would be mapped and unmapped: slower than the defaults.
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def raise_descriptor_limit(want: int = 65536) -> int:
    """Raise this process's soft limit on open descriptors towards its hard limit
    (at most ``want``); returns the soft limit now in force.  Every peer, guest and
    API client connected to a node costs a descriptor, and desktop systems start
    processes with a soft limit of 1024: a crowd, or a flood, must meet the node's
    own caps (docs/limits.md) long before the kernel's."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(hard, want)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft
