"""``[posts]``: what a node fetches of its peers' posts, and how (the posts feature's settings).

Read by the node's configuration (docs/configuration.md): each field is a TOML
key of the ``[posts]`` table and the flag ``--posts-KEY``.  It checks itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import ConfigError
from .codec import MAX_FETCH
from .model import Policy

__all__ = ["PostsSection"]


@dataclass(frozen=True)
class PostsSection:
    """``[posts]``: the fetch policy, the size of one FETCH and the retry interval."""

    TABLE: ClassVar[str] = "posts"
    FLAG_PREFIX: ClassVar[str] = "posts-"

    policy: str = "all"  # what to fetch from peers: all, newest:N, budget:OCTETS[kmg]
    chunk: int = 1024 * 1024  # octets per FETCH request
    interval: float = 2.0  # seconds before a failed or incomplete sync session is tried again

    def __post_init__(self) -> None:
        self.fetch_policy()
        if not 1024 <= self.chunk <= MAX_FETCH:
            raise ConfigError(f"posts chunk must be 1024..{MAX_FETCH} octets, got {self.chunk}")
        if self.interval <= 0:
            raise ConfigError("posts interval must be positive")

    def fetch_policy(self) -> Policy:
        """The policy, parsed."""
        try:
            return Policy.parse(self.policy)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
