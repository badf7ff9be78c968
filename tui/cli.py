"""The `trainwiz` command: the wizard with no subcommand, scriptable subcommands otherwise.

Each subcommand group lives in its own module under ``tui/commands`` and exposes
``register(subparsers)``; this file only wires them up and maps errors to exit codes
(0 success, 1 failure, 2 bad input). Textual is imported only when the wizard opens, so that
scripted subcommands start fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from backend.errors import BadInput, TrainwizError

__version__ = "0.1.0"

# Order = order in --help. One module per group; each module registers its own parsers.
COMMAND_MODULES = [
    "check",
    "model",
    "data",
    "images",
    "env",
    "plan",
    "launch",
    "runs",
    "diagnose",
    "replay",
    "presets",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainwiz",
        description="From a bare GPU server to a running, monitored FastChat fine-tune. "
        "With no command, opens the wizard.",
    )
    parser.add_argument("--version", action="version", version=f"trainwiz {__version__}")
    parser.add_argument(
        "--preset",
        metavar="NAME|PATH",
        help="open the wizard with this preset loaded (a shipped name or a YAML path)",
    )
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        help="plan the wizard's memory and Tune for this GPU (a100, h200, ...) on any machine",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"tui.commands.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from tui.app import run_wizard

            return run_wizard(preset=args.preset, gpu=args.gpu)
        result: int = args.func(args)
        return result
    except BadInput as exc:
        for line in exc.problems:
            print(f"trainwiz: {line}", file=sys.stderr)
        return 2
    except TrainwizError as exc:
        print(f"trainwiz: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("trainwiz: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
