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
from backend.i18n import N_, _, resolve_language, set_language
from backend.redact import redact_text

__version__ = "0.1.0"

# Order = order in --help. One module per group; each module registers its own parsers.
COMMAND_MODULES = [
    "check",
    "model",
    "data",
    "images",
    "env",
    "plan",
    "tune",
    "launch",
    "runs",
    "resume",
    "chat",
    "export",
    "diagnose",
    "replay",
    "presets",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainwiz",
        description=_(
            "From a bare GPU server to a running, monitored FastChat fine-tune. "
            "With no command, opens the wizard."
        ),
    )
    parser.add_argument("--version", action="version", version=f"trainwiz {__version__}")
    parser.add_argument(
        "--preset",
        metavar="NAME|PATH",
        help=_("open the wizard with this preset loaded (a shipped name or a YAML path)"),
    )
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        help=_("plan the wizard's memory and Tune for this GPU (a100, h200, ...) on any machine"),
    )
    parser.add_argument("--lang", metavar="LANG", help=_(LANG_HELP))
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"tui.commands.{name}")
        module.register(subparsers)
    _add_lang_everywhere(subparsers)
    return parser


LANG_HELP = N_("language of messages: en, zh (default: TRAINWIZ_LANG, then the locale)")


def _add_lang_everywhere(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """`trainwiz check --lang zh` as well as `trainwiz --lang zh check`: every (sub)command
    takes --lang; SUPPRESS keeps a subcommand from resetting a value given before it."""
    for sub in subparsers.choices.values():
        sub.add_argument("--lang", metavar="LANG", default=argparse.SUPPRESS, help=_(LANG_HELP))
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_lang_everywhere(action)


def _help_language(argv: list[str]) -> None:
    """The language for ``--help`` and argparse's own errors, which come before ``args.lang``
    is parsed: a quick look for ``--lang X`` / ``--lang=X``, else TRAINWIZ_LANG and the locale.
    A value trainwiz cannot honour is left for the real parse to report."""
    value = None
    for index, word in enumerate(argv):
        if word == "--lang" and index + 1 < len(argv):
            value = argv[index + 1]
        elif word.startswith("--lang="):
            value = word.split("=", 1)[1]
    try:
        set_language(resolve_language(value))
    except BadInput:
        set_language("en")


def main(argv: Sequence[str] | None = None) -> int:
    _help_language(sys.argv[1:] if argv is None else list(argv))
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        # Machine output stays English (scripts read the same texts everywhere).
        set_language("en" if getattr(args, "json", False) else resolve_language(args.lang))
        if args.command is None:
            from tui.app import run_wizard

            return run_wizard(preset=args.preset, gpu=args.gpu)
        result: int = args.func(args)
        return result
    except BadInput as exc:
        for line in exc.problems:
            print(redact_text(f"trainwiz: {line}"), file=sys.stderr)
        return 2
    except TrainwizError as exc:
        print(redact_text(_("trainwiz: error: {error}").format(error=exc)), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(_("trainwiz: interrupted"), file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_went_away()


def _reader_went_away() -> int:
    """`trainwiz plan P | head`: the reader closed the pipe. Stop quietly, as `cat` would.

    Pointing stdout at /dev/null keeps the interpreter's final flush from raising a second
    BrokenPipeError at exit; 141 is the shell's code for a command ended by SIGPIPE.
    """
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


def entry() -> None:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_went_away()
    sys.exit(code)


if __name__ == "__main__":
    entry()
