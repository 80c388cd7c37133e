"""The base of huddle's counters: dataclasses whose values the API shows as a dict.

Below every package (the transport, the API's guard and the protocol all
count), so that none imports another for it.
"""

from __future__ import annotations

__all__ = ["Counters"]


class Counters:
    """Base of the counter dataclasses (``slots=True``): their values as a dict."""

    __slots__ = ()

    def as_dict(self) -> dict[str, int]:
        names: tuple[str, ...] = type(self).__slots__
        return {k: getattr(self, k) for k in names}
