"""The `trainwiz` command: the wizard with no subcommand, scriptable subcommands otherwise.

Each subcommand group lives in its own module under ``tui/commands`` and exposes
``register(subparsers)``; this file only wires them up and maps errors to exit codes
(0 success, 1 failure, 2 bad input). Textual is imported only when the wizard opens, so that
scripted subcommands start fast.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from backend.errors import BadInput, TrainwizError
from backend.i18n import N_, _, resolve_language, set_language
from backend.redact import redact_text
from backend.termsafe import terminal_safe
from tui.commands._args import path_arg

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
    "queue",
    "sweep",
    "chat",
    "serve",
    "export",
    "diagnose",
    "replay",
    "presets",
    "mcp",
]


# Subcommands a module registers beside its own name: without this table `trainwiz stop`
# built the whole parser (every command module, the checks, the planner, pydantic's schema:
# ~0.2 s of CPU on each stop, logs and attach) to find the one it needed.
COMMAND_ALIASES = {"attach": "runs", "stop": "runs", "logs": "runs"}


def _command_in(argv: Sequence[str]) -> str | None:
    """The module of the subcommand ``argv`` names (skipping the global options and their
    values), if any."""
    words = iter(argv)
    for word in words:
        if word in ("--preset", "--gpu", "--lang"):
            next(words, None)
        elif not word.startswith("-"):
            if word in COMMAND_ALIASES:
                return COMMAND_ALIASES[word]
            return word if word in COMMAND_MODULES else None
        elif word in ("-h", "--help", "--version"):
            return None
    return None


class OneLineParser(argparse.ArgumentParser):
    """argparse's refusals as one line (``trainwiz plan: error: ... (trainwiz plan --help)``),
    exit 2, like every other bad input: its default prints the whole usage block first.
    Subcommand parsers inherit the class (``add_subparsers`` uses the parent's type)."""

    def error(self, message: str) -> NoReturn:
        line = _("{prog}: error: {message} (see {prog} --help)").format(
            prog=self.prog, message=message
        )
        self.exit(2, error_text(one_line(line)) + "\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with ``only`` just that subcommand's (the others are not imported:
    `trainwiz diagnose FILE` starts without the launcher, planner and image modules)."""
    parser = OneLineParser(
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
        type=path_arg,
        help=_("open the wizard with this preset loaded (a shipped name or a YAML path)"),
    )
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        help=_("plan the wizard's memory and Tune for this GPU (a100, h200, ...) on any machine"),
    )
    parser.add_argument("--lang", metavar="LANG", help=_(LANG_HELP))
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in [only] if only else COMMAND_MODULES:
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
    words = sys.argv[1:] if argv is None else list(argv)
    _help_language(words)
    parser = build_parser(only=_command_in(words))
    args = parser.parse_args(argv)
    try:
        # Machine output stays English (scripts read the same texts everywhere).
        set_language("en" if getattr(args, "json", False) else resolve_language(args.lang))
        if args.command is None:
            from tui.app import run_wizard  # deferred: Textual, only with no subcommand

            return run_wizard(preset=args.preset, gpu=args.gpu)
        result: int = args.func(args)
        return result
    except KeyboardInterrupt:
        print(_("trainwiz: interrupted"), file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_went_away()
    except OSError as exc:
        return _os_error(exc)
    except Exception as exc:  # never a traceback: one line each, and exit 1 or 2
        code, lines = failure(exc)
        for line in lines:
            print_error(line)
        return code


def failure(exc: Exception) -> tuple[int, list[str]]:
    """The exit code and the lines a command's failure is told in (not yet made terminal-safe:
    ``error_text``). One definition for the CLI and the MCP server's tool errors: bad input
    (2) one line per problem, naming the field and the fix; any other failure (1) one line."""
    if isinstance(exc, BadInput):
        return 2, [_("trainwiz: {line}").format(line=line) for line in exc.problems]
    if isinstance(exc, TrainwizError):
        return 1, [_("trainwiz: error: {error}").format(error=exc)]
    if isinstance(exc, OSError):
        what = exc.strerror or type(exc).__name__
        name = exc.filename if isinstance(exc.filename, str) else None
        text = f"{one_line(name, 120)}: {what}" if name else what
        return (
            2 if exc.errno in _INPUT_ERRNOS else 1,
            [_("trainwiz: error: {error}").format(error=text)],
        )
    if _is_validation_error(exc):  # a value a model refused that no command checked first
        lines = []
        for error in exc.errors()[:30]:  # type: ignore[attr-defined]
            where = ".".join(str(p) for p in error.get("loc", ())) or type(exc).__name__
            message = str(error.get("msg", "")).removeprefix("Value error, ")
            lines.append(f"trainwiz: {where}: {one_line(message)}")
        return 2, lines
    return 1, [_("trainwiz: error: {error}").format(error=one_line(f"{type(exc).__name__}: {exc}"))]


def _is_validation_error(exc: BaseException) -> bool:
    """A pydantic ValidationError, without importing pydantic: a command that never loaded it
    (``diagnose FILE`` starts without it) cannot have raised one."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(exc, pydantic.ValidationError)


def error_text(text: str) -> str:
    """An error as it may reach the terminal. It quotes arguments, paths and file contents, so
    secrets are redacted first (a control character shown as ``\\xNN`` next to a token would
    hide it from the patterns), then every escape, control and bidi character is shown as text:
    the user sees what they typed instead of a terminal obeying it."""
    return terminal_safe(redact_text(text), show_sequences=True)


def print_error(text: str) -> None:
    """The one printer of the refusals and failures that end a command (``error_text``)."""
    print(error_text(text), file=sys.stderr)


def one_line(text: str, limit: int = 400) -> str:
    """A message as one short terminal line (a 100k-character input is cut, not echoed)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# Errors that mean the user's input named something the system cannot take: bad input.
_INPUT_ERRNOS = {errno.ENAMETOOLONG, errno.EINVAL, errno.ENOTDIR, errno.ELOOP, errno.EISDIR}


def _os_error(exc: OSError) -> int:
    """An OSError that reached the top: a too-long or impossible path is bad input (2); a full
    disk, a closed stdout, a read-only home is a failure (1). Either way one line."""
    code, lines = failure(exc)
    try:
        print_error(lines[0])
    except (OSError, ValueError, AttributeError):
        pass
    return code


class _ClosedStream:
    """sys.stdout when fd 1 is closed (``trainwiz runs >&-``): writing is an error, as for cat."""

    def write(self, _text: str) -> int:
        raise OSError(errno.EBADF, _("cannot write the output: stdout is closed"))

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "stdout is closed")


def _reader_went_away() -> int:
    """`trainwiz plan P | head`: the reader closed the pipe. Stop quietly, as `cat` would.

    Pointing stdout at /dev/null keeps the interpreter's final flush from raising a second
    BrokenPipeError at exit; 141 is the shell's code for a command ended by SIGPIPE.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


def entry() -> None:
    if sys.stdout is None:
        sys.stdout = _ClosedStream()  # type: ignore[assignment]
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (to the exit)
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_went_away()
    except OSError as exc:  # the last flush: `trainwiz plan P >/dev/full`
        code = _os_error(exc)
        _quiet_stdout()
    sys.exit(code)


def _quiet_stdout() -> None:
    """After a failed write, the interpreter's own final flush must not print a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    entry()
