"""CLI: `trainwiz presets` (placeholder until its issue lands: it says so and exits 1)."""

from __future__ import annotations

import argparse

from backend.errors import TrainwizError


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("presets", help="(presets: not built yet)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise TrainwizError("'trainwiz presets' is not built yet")
