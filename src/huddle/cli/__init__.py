"""The ``huddle`` command: :mod:`.parse` builds the arguments, :mod:`.commands` holds one
handler per command, :mod:`huddle.render` turns the API's answers into text."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..errors import ConfigError, HuddleError
from .commands import handler_of
from .parse import build_parser, parse_args

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return handler_of(args)(args)
    except HuddleError as exc:
        print(f"huddle {args.command}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else getattr(exc, "exit_status", 1)  # e.g. 4 bad input, 5 bad output
    except BrokenPipeError:  # e.g. `huddle log | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
