"""CLI: `trainwiz resume RUN [--detach] [--json]`: the same run, next attempt, from its last
complete checkpoint (same step count, optimizer, scheduler and data order; metrics continue the
same series). Without ``--detach`` the log is followed to the end, as for `trainwiz launch`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from backend.i18n import _
from backend.runs import find_run
from backend.runs.resume import resume
from tui.commands._common import add_json_flag, print_json
from tui.commands.launch import follow_with_progress, report_end


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "resume",
        help=_("continue a failed or stopped run from its last complete checkpoint"),
        description=_(
            "Start the next attempt of a run: training continues from the newest "
            "complete checkpoint in its output_dir, in the same run directory and metrics series."
        ),
    )
    parser.add_argument("run", metavar="RUN", help=_("run id, unique prefix, 'last' or a run dir"))
    parser.add_argument(
        "--detach", "-d", action="store_true", help=_("print the attempt and return at once")
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def resume_json(run_dir: Path, record: dict[str, Any]) -> dict[str, Any]:
    """`trainwiz resume --detach --json`: one builder for the CLI and the MCP server."""
    return {"run_id": run_dir.name, "run_dir": str(run_dir), **record}


def run(args: argparse.Namespace) -> int:
    run_dir = find_run(args.run)
    record = resume(run_dir)
    what = _("run {name}: attempt {attempt} from step {step}").format(
        name=run_dir.name, attempt=record["attempt"], step=record["resumed_from"]
    )
    # A newer checkpoint that was incomplete or damaged is named, never passed over silently.
    passed = [
        _("checkpoint-{step} skipped: {why}").format(step=item["step"], why=item["why"])
        for item in record.get("skipped") or []
    ]
    if args.detach:
        if args.json:
            print_json(resume_json(run_dir, record))
        else:
            print("\n".join([what, *passed]))
        return 0
    for line in [what, *passed]:
        print(_("trainwiz: {line}").format(line=line), file=sys.stderr)
    try:
        follow_with_progress(run_dir, from_start=False)
    except KeyboardInterrupt:
        print(
            _("\ntrainwiz: stopped following; the run continues (trainwiz stop {run_id})").format(
                run_id=run_dir.name
            ),
            file=sys.stderr,
        )
        return 130
    return report_end(run_dir, args.json)
