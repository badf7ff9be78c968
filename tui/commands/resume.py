"""CLI: `trainwiz resume RUN [--detach] [--json]`: the same run, next attempt, from its last
complete checkpoint (same step count, optimizer, scheduler and data order; metrics continue the
same series). Without ``--detach`` the log is followed to the end, as for `trainwiz launch`."""

from __future__ import annotations

import argparse
import sys

from backend.i18n import _
from backend.runs import find_run, follow_log, refresh
from backend.runs.resume import resume
from tui.commands._common import add_json_flag, print_json


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


def run(args: argparse.Namespace) -> int:
    run_dir = find_run(args.run)
    record = resume(run_dir)
    what = f"run {run_dir.name}: attempt {record['attempt']} from step {record['resumed_from']}"
    if args.detach:
        if args.json:
            print_json({"run_id": run_dir.name, "run_dir": str(run_dir), **record})
        else:
            print(what)
        return 0
    print(f"trainwiz: {what}", file=sys.stderr)
    try:
        for text in follow_log(run_dir, from_start=False):
            sys.stdout.write(text)
            sys.stdout.flush()
    except KeyboardInterrupt:
        print(
            _("\ntrainwiz: stopped following; the run continues (trainwiz stop {name})").format(
                name=run_dir.name
            )
        )
        return 130
    status = refresh(run_dir)
    if args.json:
        print_json(status.model_dump())
    else:
        print(
            _("trainwiz: run {run_id} {state}: {message}").format(
                run_id=status.run_id, state=status.state, message=status.message
            ),
            file=sys.stderr,
        )
    return 0 if status.state == "finished" else 1
