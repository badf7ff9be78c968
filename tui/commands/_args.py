"""Argument types with bounds: a number the CLI takes is finite and within a stated range.

argparse turns the ``ArgumentTypeError`` into its usual ``error:`` line and exit 2, before any
work starts (``--host-ram nan``, ``--top 10**9``, ``chat --max-new-tokens -1`` fail at once).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from backend.i18n import _


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not re.fullmatch(r"[+-]?\d{1,12}", text.strip()):
            raise argparse.ArgumentTypeError(
                _("'{text}' is not a whole number").format(text=text[:40])
            )
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                _("{value} is out of range: use {low} to {high}").format(
                    value=value, low=low, high=high
                )
            )
        return value

    return parse


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                _("'{text}' is not a number").format(text=text[:40])
            ) from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(
                _("{text} is out of range: use a finite number from {low:g} to {high:g}").format(
                    text=text[:40], low=low, high=high
                )
            )
        return value

    return parse


def version_text(what: str, pattern: str = r"\d{1,4}(\.\d{1,4}){0,3}") -> Callable[[str], str]:
    """A dotted version (``535.54.03``, ``12.2``, ``9.0``)."""

    def parse(text: str) -> str:
        if not re.fullmatch(pattern, text):
            raise argparse.ArgumentTypeError(
                _("'{text}' is not {what}").format(text=text[:40], what=what)
            )
        return text

    return parse


def add_ignore_plan_flag(parser: argparse.ArgumentParser) -> None:
    """`launch` and `replay`: the user's override of the planner's verdict (the launch refuses a
    preset predicted not to fit this machine's GPU memory or host RAM)."""
    parser.add_argument(
        "--ignore-plan",
        action="store_true",
        help=_(
            "launch even when the plan predicts the preset does not fit this machine's GPU "
            "memory or host RAM"
        ),
    )


def path_arg(text: str) -> str:
    """A file or folder named on the command line: never empty. ``--to "$OUT"`` with OUT unset
    is ``--to ''``, and ``Path('')`` is the current folder, so an empty path used to mean a
    default (export into ``.``, ``tune --write`` onto PRESET-tuned.yaml, ``check --preset ''``
    a plain survey). argparse names the flag: ``argument --to: empty: ...``, exit 2."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            _("empty: name a file or folder (use '.' for the current folder)")
        )
    return text


def model_dir_arg(text: str) -> str:
    """A folder a model is written into (``model fetch --dir``): never empty, never a system
    directory or a home folder itself, the rule ``model.dir`` follows in a preset."""
    from backend.preset.hostpaths import model_dir_problem  # deferred: one command uses it

    path = path_arg(text)
    problem = model_dir_problem(path)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return path
