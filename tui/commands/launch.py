"""CLI: `trainwiz launch PRESET [--detach] [--json]`: validate, plan, start a detached run.

Without ``--detach`` the log is followed to the end and the exit code is the training's; the
run itself is detached either way, so ^C or a dropped SSH session only stops the following.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from backend.i18n import _
from backend.plan.commands import check_version
from backend.preset import load_preset
from backend.runs import follow_log, refresh
from backend.runs.launch import LaunchResult, launch
from backend.runs.summary import ProgressLine, RunSummary, shown_message, summarize_run
from tui.commands._args import add_ignore_plan_flag
from tui.commands._common import add_json_flag, print_json, say, to_jsonable
from tui.commands._risks import confirm_risks


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "launch",
        help=_("start a training run from a preset (detached: it survives the SSH session)"),
        description=_(
            "Validate the preset, write its run directory and start the training "
            "through the preset's runner (host process or Docker container)."
        ),
    )
    parser.add_argument("preset", metavar="PRESET", help=_("a shipped preset name or a YAML path"))
    parser.add_argument(
        "--detach", "-d", action="store_true", help=_("print the run id and return at once")
    )
    parser.add_argument(
        "--no-prepare",
        action="store_true",
        help=_("skip the model/environment steps even when their result is missing"),
    )
    parser.add_argument(
        "--transformers", metavar="VERSION", help=_("name training flags for this transformers")
    )
    parser.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help=_("accept dangerous container options (privileged, host mounts, LD_PRELOAD...)"),
    )
    add_ignore_plan_flag(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = start_run(
        args.preset,
        no_prepare=args.no_prepare,
        transformers=args.transformers,
        yes=args.yes,
        ignore_plan=args.ignore_plan,
    )
    if args.detach:
        if args.json:
            print_json(launch_json(result))
        else:
            print(result.run_id)
            print(
                _("trainwiz: started in {run_dir}; follow with 'trainwiz logs -f {run_id}'").format(
                    run_dir=result.run_dir, run_id=result.run_id
                ),
                file=sys.stderr,
            )
        return 0
    print(
        _("trainwiz: run {run_id} ({run_dir})").format(
            run_id=result.run_id, run_dir=result.run_dir
        ),
        file=sys.stderr,
    )
    try:
        follow_with_progress(result.run_dir)
    except KeyboardInterrupt:
        print(
            _("\ntrainwiz: stopped following; the run continues (trainwiz stop {run_id})").format(
                run_id=result.run_id
            ),
            file=sys.stderr,
        )
        return 130
    return report_end(result.run_dir, args.json)


def start_run(
    preset_ref: str,
    *,
    no_prepare: bool = False,
    transformers: str | None = None,
    yes: bool = False,
    ignore_plan: bool = False,
    ask: bool = True,
) -> LaunchResult:
    """Validate, confirm the preset's risks, launch: what `trainwiz launch` refuses and starts is
    what the MCP server's ``launch`` refuses and starts (it passes ``ask=False``: the explicit
    ``yes`` is its only confirmation). The planner's verdict gates inside ``launch``."""
    preset = load_preset(preset_ref)
    if transformers is not None:
        check_version(transformers)  # before any run directory exists
    confirm_risks(preset, yes, ask=ask)
    result = launch(
        preset,
        prepare=not no_prepare,
        transformers_version=transformers,
        ignore_plan=ignore_plan,
        ref=preset_ref,
    )
    for note in result.notes:
        print(_("trainwiz: {line}").format(line=note), file=sys.stderr)
    return result


def launch_json(result: LaunchResult) -> dict[str, Any]:
    """`trainwiz launch --detach --json`: one builder for the CLI and the MCP server."""
    return {"run_id": result.run_id, "run_dir": str(result.run_dir), **result.status.model_dump()}


def report_end(run_dir: Path, as_json: bool) -> int:
    """How a followed run ended, the same for `launch` and `resume`: the state line, the
    summary line (steps, loss, real tokens/s, model), on failure the likely cause; the exit
    code is 0 only for a finished run."""
    status = refresh(run_dir)
    failed = status.state != "finished"
    summary = summarize_run(run_dir, with_diagnosis=failed)
    if as_json:
        print_json({**status.model_dump(), "summary": to_jsonable(summary)})
    else:
        say(
            _("trainwiz: run {run_id} {state}: {message}").format(
                run_id=status.run_id, state=status.state, message=shown_message(status.message)
            ),
            stderr=True,
        )
        say(_("trainwiz: {line}").format(line=summary.line()), stderr=True)
        if failed:
            _print_failure_hint(status.run_id, summary)
    if status.state == "finished":
        return 0
    print(
        _("trainwiz: see what went wrong with 'trainwiz diagnose {run_id}'").format(
            run_id=status.run_id
        ),
        file=sys.stderr,
    )
    return status.exit_code if status.exit_code not in (None, 0) and status.exit_code > 0 else 1


PROGRESS_EVERY = 30.0  # seconds between the follower's progress lines


def follow_with_progress(
    run_dir: Path, every: float = PROGRESS_EVERY, *, from_start: bool = True
) -> None:
    """Print the log as it grows and, every ``every`` seconds of it, a progress line with the
    ETA on stderr (real tokens left / recent real tokens/s); the last one when the run ends."""
    progress = ProgressLine(run_dir)
    shown, due = None, time.monotonic() + every
    for text in follow_log(run_dir, from_start=from_start):
        say(text, end="", flush=True)  # the run's train.log: anything may be in it
        if time.monotonic() >= due:
            due = time.monotonic() + every
            line = progress.line()
            if line and line != shown:
                shown = line
                print("\n" + _("trainwiz: {line}").format(line=line), file=sys.stderr, flush=True)
    line = progress.line()
    if line and line != shown:
        print(_("trainwiz: {line}").format(line=line), file=sys.stderr, flush=True)


def _print_failure_hint(run_id: str, summary: RunSummary) -> None:
    """The most likely cause first, then where the whole diagnosis and its fixes are."""
    top = summary.top_finding
    if top is not None:
        print(
            _("trainwiz: likely cause: {category}: {title} (log line {line})").format(
                category=top.category, title=top.title, line=top.line
            ),
            file=sys.stderr,
        )
        if top.fixes:
            print(
                _("trainwiz: first fix: {title}").format(title=top.fixes[0].title), file=sys.stderr
            )
    print(
        _("trainwiz: see the findings and fixes: trainwiz diagnose {run_id}").format(run_id=run_id),
        file=sys.stderr,
    )
