"""CLI: `trainwiz diagnose LOGFILE|RUN [--json] [--preset P]`.

Exit 0 when nothing at error level was found, 1 otherwise, 2 for a missing log (BadInput), so
scripts can gate a relaunch on it. A run id reads ``$TRAINWIZ_HOME/runs/<id>/train.log`` and,
unless ``--preset`` says otherwise, fixes are computed against that run's ``preset.yaml``.
"""

from __future__ import annotations

import argparse
import builtins
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backend.diagnosis import Diagnosis, diagnose_file
from backend.errors import BadInput
from backend.i18n import N_, _
from backend.paths import LOG, NODES, PRESET, STATUS, runs_dir  # not rundir: no pydantic for a log
from backend.termsafe import terminal_safe
from tui.commands._args import path_arg
from tui.commands._common import add_json_flag, fill_cells, pad_cells, print_json, to_jsonable

if TYPE_CHECKING:  # backend.runs pulls in the launcher: only a run needs it, and imports it then
    from backend.rundir import RunStatus

# Severity words as shown to people (JSON keeps the English keys).
_SEVERITY = {"error": N_("ERROR"), "warning": N_("WARNING"), "info": N_("INFO")}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "diagnose",
        help=_("recognise known failures in a training log and propose preset fixes"),
        description=_(
            "Read a log (a file, or a run id under $TRAINWIZ_HOME/runs) and report known "
            "failures, most severe first, each with its cause and fixes. Exit 1 if any is an error."
        ),
    )
    parser.add_argument("target", metavar="LOGFILE|RUN", help=_("a log file path or a run id"))
    parser.add_argument(
        "--preset",
        metavar="NAME|PATH",
        type=path_arg,
        help=_("compute fixes against this preset (default for a run: its preset.yaml)"),
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def resolve_log(target: str) -> tuple[Path, Path | None]:
    """(log file, the run's preset file or None) for a path, a run directory or a run id."""
    path = Path(target).expanduser()
    if path.is_file():
        return path, None
    run_dir = path if path.is_dir() else runs_dir() / target
    log = run_dir / LOG
    node_logs = (run_dir / STATUS).is_file() and any((run_dir / NODES).glob("node*-*.log"))
    if log.is_file() or node_logs:  # a Slurm run's nodes/ logs are read even without train.log
        preset = run_dir / PRESET
        return log, preset if preset.is_file() else None
    raise BadInput(
        _(
            "diagnose: '{target}' is neither a log file nor a run with a train.log "
            "(runs live in {runs}): give a log path or a run id from `trainwiz runs list`"
        ).format(target=target, runs=runs_dir())
    )


def _print_human(log: Path, diagnosis: Diagnosis) -> None:
    """Everything here can quote the log: it is printed through ``terminal_safe``."""

    def print(text: str = "") -> None:  # shadows on purpose: the one safe printer
        builtins.print(terminal_safe(text))

    if not diagnosis.findings:
        print(
            _("{log}: no known failure found ({lines} lines read)").format(
                log=log, lines=diagnosis.lines_read
            )
        )
        return
    print(
        _("{log}: {count} finding(s), most severe first").format(
            log=log, count=len(diagnosis.findings)
        )
    )
    for finding in diagnosis.findings:
        more = _(" (+{count} more)").format(count=finding.count - 1) if finding.count > 1 else ""
        severity = _(_SEVERITY.get(finding.severity, finding.severity.upper()))
        where = _("line {line}").format(line=finding.line)
        print(f"\n{pad_cells(severity, 7)} {finding.category}  {where}{more}")
        print(f"  {finding.title}")
        if finding.node:
            others = [n for n in finding.nodes if n != finding.node]
            also = _(" (also on {nodes})").format(nodes=", ".join(others)) if others else ""
            print("  " + _("on {node}").format(node=finding.node) + also)
        print(textwrap.indent(textwrap.fill(terminal_safe(finding.text), 96), "  > "))
        print(textwrap.indent(_fill(finding.explanation), "  "))
        for number, fix in enumerate(finding.fixes, 1):
            print(
                "  "
                + _("fix {number}: {title} ({reason})").format(
                    number=number, title=fix.title, reason=fix.reason
                )
            )
            for change in fix.changes:
                print(f"      {change.path}: {change.value!r}  # {change.reason}")


def _run_fields(status: RunStatus | None) -> dict[str, object] | None:
    if status is None:
        return None
    return {
        "run_id": status.run_id,
        "state": status.state,
        "cause": status.cause,
        "exit_code": status.exit_code,
        "message": status.message,
    }


def _fill(text: str, width: int = 96) -> str:
    return fill_cells(terminal_safe(text), width)


def _run_line(status: RunStatus) -> str:
    """The record's verdict first: what the run itself says about how it ended."""
    from backend.runs.summary import shown_message  # deferred: `diagnose FILE` skips run records

    cause = _(", cause {cause}").format(cause=status.cause) if status.cause else ""
    message = f": {shown_message(status.message)}" if status.message else ""
    return _("run {run}: {state}{cause}{message}").format(
        run=status.run_id, state=status.state, cause=cause, message=message
    )


@dataclass
class Diagnosed:
    """A log's diagnosis, and the run record it belongs to when it is a run's."""

    log: Path
    preset_source: str | Path | None
    diagnosis: Diagnosis
    status: RunStatus | None


def run(args: argparse.Namespace) -> int:
    found = diagnose_target(args.target, args.preset)
    if args.json:
        print_json(diagnose_json(found))
    else:
        if found.status is not None:
            builtins.print(terminal_safe(_run_line(found.status)))
        _print_human(found.log, found.diagnosis)
    return 1 if found.diagnosis.has_error else 0


def diagnose_json(found: Diagnosed) -> dict[str, object]:
    """`trainwiz diagnose --json`: one builder for the CLI and the MCP server."""
    return {
        "log": str(found.log),
        "preset": str(found.preset_source) if found.preset_source else None,
        "run": _run_fields(found.status),
        "findings": [to_jsonable(f) for f in found.diagnosis.findings],
    }


def diagnose_target(target: str, preset_ref: str | None = None) -> Diagnosed:
    """Diagnose a log file, a run dir or a run id (fixes against ``preset_ref``, else the run's
    own preset): the one path of `trainwiz diagnose` and the MCP server's ``diagnose``."""
    log, run_preset = resolve_log(target)
    preset = None
    preset_source = preset_ref or run_preset
    if preset_source:
        from backend.preset.loader import (  # deferred: `diagnose FILE` skips pydantic, YAML
            load_preset,
        )

        preset = load_preset(preset_source)
    status = None
    if (log.parent / STATUS).is_file():
        from backend.runs.diagnose_run import (  # deferred: `diagnose FILE` skips run records
            diagnose_run,
        )

        result = diagnose_run(log.parent, preset=preset)
        diagnosis, status = result.diagnosis, result.status
    else:
        diagnosis = diagnose_file(log, preset=preset)
        if preset is not None:
            from backend.runs.memfixes import (  # deferred: the planner, only with a preset
                judge_memory_fixes,
            )

            judge_memory_fixes(diagnosis.findings, preset)
    return Diagnosed(log, preset_source, diagnosis, status)
