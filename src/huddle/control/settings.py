"""``[control]``: what a node runs after an operator's node order stops it (docs/control.md,
"Orders from any node").

Read by the node's configuration (docs/configuration.md): each field is a TOML key of the
``[control]`` table and the flag ``--control-KEY`` (repeated: one argument each).  A node
without a command refuses that order (409): a node is never shut down or rebooted by a
command it was not given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..errors import ConfigError

__all__ = ["ControlSection"]

MAX_ARGS = 64  # arguments of one command


@dataclass(frozen=True)
class ControlSection:
    """``[control]``: the commands a node order of shutdown or reboot runs once the node stopped."""

    TABLE: ClassVar[str] = "control"
    FLAG_PREFIX: ClassVar[str] = "control-"

    # The program and its arguments (a list, no shell), run once the node and its apps stopped.
    shutdown_command: tuple[str, ...] = ()  # e.g. ["sudo", "systemctl", "poweroff"]
    reboot_command: tuple[str, ...] = ()  # e.g. ["sudo", "systemctl", "reboot"]

    def __post_init__(self) -> None:
        for key, command in (("shutdown-command", self.shutdown_command), ("reboot-command", self.reboot_command)):
            if len(command) > MAX_ARGS or (command and not command[0]):
                raise ConfigError(f"control {key} is a program and its arguments: 1..{MAX_ARGS} strings, "
                                  "the first not empty")
