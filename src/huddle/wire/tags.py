"""Tags (docs/protocol.md 4.1 and 14.1, "Tags"): the key/value pairs a node advertises of itself
(``role=scoreboard``, ``rack=3``), carried in its HELO and its RAWS report, shown with its peers and
filtered on.  Their bounds, one set for every node (a bound set per node would let one refuse what
the others hold, and the picture's digest differ): at most MAX_TAGS tags, a key of
``[a-z0-9][a-z0-9._-]*`` up to MAX_TAG_KEY octets, a value of printable UTF-8 up to MAX_TAG_VALUE
octets (empty allowed).

:func:`tags_problem` checks a map as a message's constructor does (a node's own, a peer's);
:func:`parse_tags` reads ``KEY=VALUE`` assignments (``--tag``), :func:`parse_filter` a filter
(``role=scoreboard``: that value; ``role``: the key, any value) and :func:`matches` applies one.

Pure: no sockets, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "MAX_TAGS", "MAX_TAG_KEY", "MAX_TAG_VALUE", "TAG_KEY_RE", "NodeTags", "TagError", "matches", "parse_filter",
    "parse_tags", "tags_problem",
]

MAX_TAGS: Final = 16  # tags one node may advertise
MAX_TAG_KEY: Final = 32  # octets of a tag's key
MAX_TAG_VALUE: Final = 64  # octets of a tag's value, as UTF-8
TAG_KEY_RE: Final = re.compile(r"[a-z0-9][a-z0-9._-]*")

NodeTags = dict[str, str]  # key -> value


class TagError(ValueError):
    """A tag, a set of tags or a filter that cannot be (the message says which and why)."""


def tags_problem(tags: object) -> str | None:
    """What is wrong with ``tags`` as a node's tags, or None: an object of at most MAX_TAGS
    members, each key ``[a-z0-9][a-z0-9._-]*`` of at most MAX_TAG_KEY octets, each value a
    string of printable characters of at most MAX_TAG_VALUE octets of UTF-8."""
    if type(tags) is not dict:
        return "tags must be an object"
    if len(tags) > MAX_TAGS:
        return f"at most {MAX_TAGS} tags, got {len(tags)}"
    for key, value in tags.items():
        problem = _key_problem(key) or _value_problem(key, value)
        if problem is not None:
            return problem
    return None


def _key_problem(key: object) -> str | None:
    if type(key) is not str or len(key) > MAX_TAG_KEY or TAG_KEY_RE.fullmatch(key) is None:
        return (f"tag key {str(key)[:40]!r} must be 1..{MAX_TAG_KEY} of a-z 0-9 . _ - "
                "starting with a letter or digit")
    return None


def _value_problem(key: str, value: object) -> str | None:
    if type(value) is not str:
        return f"tag {key}: the value must be a string"
    if not value.isprintable():  # no control characters, no line breaks (also a lone surrogate)
        return f"tag {key}: the value must be printable text"
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return f"tag {key}: the value is not valid text"
    if size > MAX_TAG_VALUE:
        return f"tag {key}: the value is {size} octets, more than {MAX_TAG_VALUE}"
    return None


def parse_tags(assignments: Iterable[str], base: Mapping[str, str] | None = None) -> NodeTags:
    """``KEY=VALUE`` assignments (``--tag``) over ``base`` (a config file's ``[tags]``: a key
    given here replaces its value there); a key given twice among ``assignments`` is refused, as
    is anything :func:`tags_problem` refuses.  Raises TagError saying which."""
    out: NodeTags = dict(base or {})
    seen: set[str] = set()
    for text in assignments:
        key, sep, value = text.partition("=")
        if not sep:
            raise TagError(f"tag {text[:60]!r} must be KEY=VALUE, e.g. role=scoreboard")
        if key in seen:
            raise TagError(f"tag {key!r} is given twice: a node has one value per key")
        problem = _key_problem(key) or _value_problem(key, value)
        if problem is not None:
            raise TagError(problem)
        seen.add(key)
        out[key] = value
    problem = tags_problem(out)
    if problem is not None:
        raise TagError(problem)
    return out


def parse_filter(texts: Iterable[str]) -> list[tuple[str, str | None]]:
    """Tag filters: ``KEY=VALUE`` (that value) or ``KEY`` (the key, any value), each checked as a
    tag is.  Raises TagError saying which is malformed."""
    out: list[tuple[str, str | None]] = []
    for text in texts:
        key, sep, value = text.partition("=")
        problem = _key_problem(key) or (_value_problem(key, value) if sep else None)
        if problem is not None:
            raise TagError(f"filter {text[:60]!r}: {problem}")
        out.append((key, value if sep else None))
    return out


def matches(tags: Mapping[str, str], wanted: Iterable[tuple[str, str | None]]) -> bool:
    """Whether ``tags`` meet every filter of ``wanted`` (an empty filter: any tags do)."""
    return all(key in tags and (value is None or tags[key] == value) for key, value in wanted)
