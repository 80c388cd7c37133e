"""Garbage-collector settings for work that builds many long-lived objects."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["few_collections", "paused_collections"]


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """Collect less often while the block runs.

    A simulation or a document rebuild keeps millions of long-lived objects;
    with Python's default thresholds the collector walks them over and over
    (a third of a 200-node simulation's time).  Cycles are still collected,
    only less often; the old thresholds come back afterwards.
    """
    old = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)


@contextlib.contextmanager
def paused_collections(*, collect: bool = True) -> Iterator[None]:
    """No collection while the block runs; at its end, one of the young generations.

    For work whose objects nearly all live on and make no garbage cycles
    (loading and building the bout document): the collector would find
    nothing in them, and walking each once at the end, on its way to the
    oldest generation, costs less than walking them at every threshold on
    the way (and than leaving them young, to be walked by the next two
    collections).  In a block that is already paused, nothing changes.

    ``collect=False``, for a block whose new objects all live on (a document
    just built): they are moved to the oldest generation without that walk,
    which could only find them alive (``gc.freeze`` then ``gc.unfreeze``: the
    permanent generation is empty before and after).  The full collections
    walk them from then on, as they would have.  Where something else froze
    objects, the young generations are collected instead.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        if collect or gc.get_freeze_count():
            gc.collect(1)
        else:
            gc.freeze()
            gc.unfreeze()
