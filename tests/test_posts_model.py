"""Hydra posts' model: a post's id as the source defines it, and its metadata checked."""

from __future__ import annotations

import hashlib

import pytest

from huddle.posts.model import Post, PostError, post_id


def test_post_id_as_the_source_defines_it() -> None:
    # sha1(b"hi") = c22b5f91...; the id is the SHA1 of this text, worked out by hand with sha1sum:
    #   printf 'hello:2026-01-02T03:04:05Z::text/plain:c22b5f9178342609428d6f51b2c5af4c0bde6a42' | sha1sum
    digest = "c22b5f9178342609428d6f51b2c5af4c0bde6a42"
    assert hashlib.sha1(b"hi").hexdigest() == digest
    expected = "3d2202849b78c149e3de1d48f2a0e2e7921b1cdf"
    assert post_id("hello", "2026-01-02T03:04:05Z", "", "text/plain", digest) == expected
    assert Post("hello", "2026-01-02T03:04:05Z", "", "text/plain", digest, 2).id == expected


def test_post_id_depends_on_every_field() -> None:
    base = ("s", "2026-01-02T03:04:05Z", "", "text/plain", "0" * 40)
    seen = {post_id(*base)}
    for i, other in enumerate(("t", "2026-01-02T03:04:06Z", "1" * 40, "image/png", "2" * 40)):
        changed = list(base)
        changed[i] = other
        seen.add(post_id(*changed))
    assert len(seen) == 6


@pytest.mark.parametrize(("field_name", "value", "message"), [
    ("timestamp", "2026-01-02 03:04:05", "ISO 8601"),
    ("parent_id", "xyz", "parent id"),
    ("mime_type", "text", "TYPE/SUBTYPE"),
    ("digest", "ABC", "digest"),
    ("size", -1, "size"),
])
def test_bad_metadata_is_refused(field_name: str, value: object, message: str) -> None:
    good = {"subject": "s", "timestamp": "2026-01-02T03:04:05Z", "parent_id": "", "mime_type": "text/plain",
            "digest": "0" * 40, "size": 0}
    with pytest.raises(PostError, match=message):
        Post(**(good | {field_name: value}))  # type: ignore[arg-type]


def test_from_json_checks_the_id() -> None:
    post = Post("s", "2026-01-02T03:04:05Z", "", "text/plain", "0" * 40, 0)
    assert Post.from_json(post.to_json()) == post
    with pytest.raises(PostError, match="does not match"):
        Post.from_json(post.to_json() | {"id": "1" * 40})


def test_a_digest_and_parent_id_as_hydra_writes_them_are_kept_as_written() -> None:
    """czmq's zdigest_string writes hex in uppercase (docs/hydra.md, "Post ids"): a Hydra node's
    digest and parent id are hashed as that text, so they are kept as written; the id stays lowercase."""
    digest = hashlib.sha1(b"hi").hexdigest()
    post = Post("s", "2026-01-02T03:04:05Z", "AB" * 20, "text/plain", digest.upper(), 2)
    assert post.digest == digest.upper() and post.parent_id == "AB" * 20
    text = f"s:2026-01-02T03:04:05Z:{'AB' * 20}:text/plain:{digest.upper()}"
    assert post.id == hashlib.sha1(text.encode()).hexdigest()  # Hydra's id, lowercased
    assert post.matches(digest, 2) and post.matches(digest.upper(), 2) and not post.matches(digest, 3)
    with pytest.raises(PostError, match="digest"):
        Post("s", "2026-01-02T03:04:05Z", "", "text/plain", digest[:20] + digest[20:].upper(), 2)  # mixed case
