"""CLI: `trainwiz mcp [--http [--port N]] [--allow-launch]`: a Model Context Protocol server, so
coding agents drive trainwiz through the same backend as the CLI (docs/agents.md).

Over stdio by default (the client starts it); with ``--http``, streamable HTTP on 127.0.0.1
only. Without ``--allow-launch`` it offers only tools that start and end nothing. The server
(``tui/mcp_server.py``) and the MCP SDK load only here, when the command runs.
"""

from __future__ import annotations

import argparse

from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from tui.commands._args import bounded_int


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "mcp",
        help=_("serve trainwiz's tools to coding agents (Model Context Protocol)"),
        description=_(
            "A Model Context Protocol server over stdio (or streamable HTTP on 127.0.0.1): "
            "check, presets, plan, tune, data check, model validate, runs, run status, logs, "
            "diagnose and compare as tools whose results are the CLI's --json; launch, stop and "
            "resume only with --allow-launch. See docs/agents.md for client configuration."
        ),
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help=_("serve streamable HTTP on 127.0.0.1 instead of stdio (the URL is printed)"),
    )
    parser.add_argument(
        "--port",
        type=bounded_int(0, 65535),
        default=0,
        help=_("the --http port (default 0: one the OS chooses)"),
    )
    parser.add_argument(
        "--allow-launch",
        action="store_true",
        help=_("also offer launch, stop and resume, which start and end trainings"),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.port and not args.http:
        raise BadInput(
            _("--port {port}: only with --http (stdio has no port)").format(port=args.port)
        )
    try:
        from tui.mcp_server import serve  # deferred: the MCP SDK and its web stack, only here
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("mcp", "mcp_types"):
            raise
        raise TrainwizError(
            _(
                "the MCP SDK is not installed ({error}): install it with "
                "'.venv/bin/pip install mcp' or re-run scripts/install.sh"
            ).format(error=exc.name)
        ) from None
    return serve(http=args.http, port=args.port, allow_launch=args.allow_launch)
