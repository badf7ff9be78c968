"""`trainwiz mcp`: the tools of ``tui.mcp_tools`` and the runs' records served to coding agents
over the Model Context Protocol, on the official SDK (``mcp``), over stdio or streamable HTTP.

Only ``tui/commands/mcp.py`` imports this module, when `trainwiz mcp` runs: the SDK (and its
web stack) is never loaded by the wizard or another subcommand.

What a client gets back is what the CLI prints: a tool's result is its command's ``--json``
(as text, and as structured content: a list is given as ``{"result": [...]}``), a failure the
command's error lines (``tui.cli.failure``: one line per problem, naming the field and the fix,
``file:line:col`` for a YAML error), made terminal-safe with secrets redacted, returned as a
tool error, never a traceback. An argument the schema refuses is told the same way.
"""

from __future__ import annotations

import functools
import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from backend.errors import BadInput
from backend.i18n import _, set_language
from backend.paths import LAUNCH, METRICS, STATUS
from backend.redact import redact_data, redact_text
from backend.rundir import find_run_by_id
from backend.runs.control import tail_lines
from tui.cli import __version__, error_text, failure, one_line
from tui.commands._common import json_text
from tui.mcp_tools import READ_TOOLS, WRITE_TOOLS, ToolSpec, scrub

HOST = "127.0.0.1"  # --http listens here only: a tool starts trainings, so no other machine
PATH = "/mcp"
ERROR_LINES = 30  # lines of one error at most (a preset with many problems)
ERROR_LINE_CHARS = 1000  # characters of one line at most (a huge argument is cut, not echoed)
METRICS_TAIL = 200  # lines of metrics.jsonl the metrics resource gives

INSTRUCTIONS = (
    "trainwiz takes a GPU server from bare to a running, monitored FastChat fine-tune. "
    "Typical order: check (the machine), presets, plan (the exact commands and whether the "
    "preset fits), tune (the fastest configuration that fits), launch (with --allow-launch), "
    "then poll run_status until state is finished/failed/stopped, logs_tail, and diagnose a "
    "failed run. Results are the CLI's --json output; errors name the field and the fix."
)


def error_result(lines: list[str]) -> CallToolResult:
    """A tool error as the CLI tells it: each line made safe to show, at most ``ERROR_LINES``."""
    shown = [one_line(error_text(line), ERROR_LINE_CHARS) for line in lines[:ERROR_LINES]]
    return CallToolResult(content=[TextContent(type="text", text="\n".join(shown))], is_error=True)


def ok_result(payload: Any) -> CallToolResult:
    """The command's ``--json`` text, and the same data as structured content."""
    text = json_text(scrub(json.loads(json_text(payload))))
    data = json.loads(text)
    structured = data if isinstance(data, dict) else {"result": data}
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def tool_call(fn: Callable[..., Any]) -> Callable[..., CallToolResult]:
    """``fn`` as a tool: its signature (the schema) kept, its failures told as the CLI's."""

    @functools.wraps(fn)
    def call(**kwargs: Any) -> CallToolResult:
        try:
            payload = fn(**kwargs)
        except Exception as exc:  # every failure is a tool error in the CLI's words
            return error_result(failure(exc)[1])
        return ok_result(payload)

    return call


class TrainwizServer(MCPServer):
    """The SDK's server, with the SDK's own refusals (an argument the schema rejects, a tool
    this server does not offer) told in the CLI's words too."""

    write_tools: frozenset[str] = frozenset(spec.fn.__name__ for spec in WRITE_TOOLS)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):  # the arguments against the schema
                return error_result(failure(cause)[1])
            if name in self.write_tools and self._tool_manager.get_tool(name) is None:
                return error_result(failure(BadInput(not_offered(name)))[1])
            return error_result([f"trainwiz: {exc}"])


def not_offered(name: str) -> str:
    return _(
        "{tool}: not offered by this server: it starts or ends trainings, so it needs "
        "`trainwiz mcp --allow-launch`"
    ).format(tool=name)


def build_server(*, allow_launch: bool) -> TrainwizServer:
    """The server with the read tools, the write tools when ``allow_launch``, and the runs'
    records as resources."""
    server = TrainwizServer(
        "trainwiz", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )
    for spec in [*READ_TOOLS, *(WRITE_TOOLS if allow_launch else [])]:
        add_tool(server, spec)
    add_resources(server)
    return server


def add_tool(server: MCPServer, spec: ToolSpec) -> None:
    name = spec.fn.__name__
    hints = ToolAnnotations(
        read_only_hint=spec.read_only,
        destructive_hint=name == "stop",
        open_world_hint=False,
    )
    server.add_tool(tool_call(spec.fn), name=name, annotations=hints, structured_output=False)


def _run_file(run_id: str, name: str) -> Path:
    """A file of a run under this TRAINWIZ_HOME, by id (or unique prefix, or 'last'): never a
    path, so a URI reaches only the runs' own records."""
    try:
        return find_run_by_id(run_id) / name
    except BadInput as exc:
        raise ResourceError(one_line(error_text(exc.problems[0]), ERROR_LINE_CHARS)) from None


def _json_record(path: Path) -> str:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResourceError(one_line(error_text(f"{path.name}: {exc}"), ERROR_LINE_CHARS)) from None
    return json_text(scrub(redact_data(data)))


def add_resources(server: MCPServer) -> None:
    """``trainwiz://runs/{run_id}/status`` (status.json), ``.../launch`` (launch.json, the
    launch spec the watcher runs), ``.../metrics`` (the last lines of metrics.jsonl)."""

    @server.resource(
        "trainwiz://runs/{run_id}/status",
        name="run-status",
        description="a run's status.json, as written",
        mime_type="application/json",
    )
    def status_record(run_id: str) -> str:
        return _json_record(_run_file(run_id, STATUS))

    @server.resource(
        "trainwiz://runs/{run_id}/launch",
        name="run-launch-spec",
        description="a run's launch.json: the launch spec its watcher executes (no secrets)",
        mime_type="application/json",
    )
    def launch_record(run_id: str) -> str:
        return _json_record(_run_file(run_id, LAUNCH))

    @server.resource(
        "trainwiz://runs/{run_id}/metrics",
        name="run-metrics",
        description=f"the last {METRICS_TAIL} lines of a run's metrics.jsonl (one event a line)",
        mime_type="application/jsonl",
    )
    def metrics_tail(run_id: str) -> str:
        lines = tail_lines(_run_file(run_id, METRICS), METRICS_TAIL)
        return redact_text("\n".join(lines) + ("\n" if lines else ""))


def serve(*, http: bool, port: int, allow_launch: bool) -> int:
    """Serve until the client goes (stdio: its end of the pipe closes) or ^C (HTTP)."""
    set_language("en")  # machine output, as --json: scripts and agents read the same texts
    server = build_server(allow_launch=allow_launch)
    if not http:
        anyio.run(server.run_stdio_async)
        return 0
    anyio.run(functools.partial(_serve_http, server, port))
    return 0


async def _serve_http(server: MCPServer, port: int) -> None:
    """Streamable HTTP on 127.0.0.1 only, on ``port`` (0: one the OS chooses): the socket is
    bound first, so the address printed is the one that answers."""
    import uvicorn  # the SDK's own web server

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise BadInput(
            _("--port {port}: cannot listen on {host}: {error} (choose another, or 0)").format(
                port=port, host=HOST, error=exc.strerror
            )
        ) from None
    sock.listen(64)
    url = f"http://{HOST}:{sock.getsockname()[1]}{PATH}"
    print(url, flush=True)  # stdout: the one line a script reads
    print(_("trainwiz: MCP server at {url} (^C ends it)").format(url=url), file=sys.stderr)
    app = server.streamable_http_app(streamable_http_path=PATH, host=HOST)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])
