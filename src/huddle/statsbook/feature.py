"""The statsbook as a feature of the node (:class:`huddle.ports.Feature`): its command alone,
``huddle bout export|import`` (:mod:`huddle.statsbook.cli`), which reads and writes the bout
through the node's API.  No routes, no driver, no facts: the bout's document is the doc feature's.
"""

from __future__ import annotations

from typing import Any, Final

from ..ports import ApiHandler, ClientOptions, FeatureBase

__all__ = ["StatsbookFeature"]


class StatsbookFeature(FeatureBase):
    """``huddle bout`` (the module docstring)."""

    name: Final = "statsbook"

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        from .cli import add_parser, run  # noqa: PLC0415 - only the CLI adds commands

        add_parser(sub, client_options, epilog)
        return {"bout": run}
