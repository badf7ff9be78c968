"""CLI: `trainwiz presets` — the shipped presets with a one-line description."""

from __future__ import annotations

import argparse

from backend.i18n import _
from backend.preset import list_shipped
from tui.commands._common import add_json_flag, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("presets", help=_("list the shipped presets"))
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    presets = list_shipped()
    if args.json:
        print_json(presets_json())
        return 0
    width = max(len(n) for n, _ in presets)
    for name, description in presets:
        print(f"{name:<{width}}  {description}")
    return 0


def presets_json() -> dict[str, list[dict[str, str]]]:
    """`trainwiz presets --json`: one builder for the CLI and the MCP server."""
    return {"presets": [{"name": n, "description": d} for n, d in list_shipped()]}
