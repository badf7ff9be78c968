"""CLI: `trainwiz replay PRESET` — the whole wizard headless: checks → model → environment →
launch → follow. Nothing is asked when stdin is not a terminal; `--yes` accepts warnings.
Exit codes: 0 done, 1 a step failed (its line names the step), 2 bad input."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.markup import escape

from backend.errors import TrainwizError
from backend.i18n import _
from backend.preset import load_preset
from backend.replay import STEP_ORDER, Replay, ReplayResult, StepReport, steps_between
from backend.termsafe import terminal_safe
from tui.commands._args import add_ignore_plan_flag
from tui.commands._common import add_json_flag, print_json
from tui.commands._risks import confirm_risks

_STYLE = {"done": "green", "skipped": "cyan", "warned": "yellow", "failed": "bold red"}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "replay",
        help=_(
            "run a preset end to end without the wizard (checks, model, environment, launch, follow)"
        ),
        description=__doc__,
    )
    parser.add_argument("preset", metavar="PRESET", help=_("a shipped preset name or a YAML path"))
    parser.add_argument(
        "--yes", "-y", action="store_true", help=_("accept warnings without asking")
    )
    parser.add_argument("--from", dest="start", choices=STEP_ORDER, help=_("first step to run"))
    parser.add_argument("--until", choices=STEP_ORDER, help=_("last step to run"))
    parser.add_argument(
        "--detach", action="store_true", help=_("stop after launch; training goes on")
    )
    add_ignore_plan_flag(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    preset = load_preset(args.preset)
    confirm_risks(preset, args.yes)
    steps = steps_between(args.start, args.until)
    console = Console(stderr=args.json, highlight=False)
    interactive = sys.stdin.isatty() and not args.yes and not args.json

    def shown(text: str) -> str:
        """Log lines, messages and paths as markup-free, terminal-safe text (termsafe)."""
        return escape(terminal_safe(text))

    def confirm(text: str) -> bool:
        console.print(_("[yellow]warnings:[/] {escape}").format(escape=shown(text)))
        return console.input("continue anyway? [y/N] ").strip().lower() in ("y", "yes")

    def progress(step: str, text: str) -> None:
        if step == "follow":  # the run's train.log
            console.out(terminal_safe(text), highlight=False)
        else:
            console.print(
                _("  [dim]{step}:[/] {escape}").format(step=step, escape=shown(text)),
                highlight=False,
            )

    def emit(report: StepReport) -> None:
        style = _STYLE[report.outcome]
        console.print(
            f"[{style}]{report.outcome:>7}[/] [bold]{report.step}[/]: {shown(report.message)}"
        )
        for line in report.details:
            console.print(f"          {shown(line)}", highlight=False)

    replay = Replay(
        preset,
        accept_warnings=args.yes,
        detach=args.detach,
        progress=progress,
        confirm=confirm if interactive else None,
        ignore_plan=args.ignore_plan,
        ref=args.preset,
    )
    console.print(
        _("[bold]trainwiz replay[/] {name}: {items}").format(
            name=shown(preset.name), items=" → ".join(steps)
        )
    )
    result = replay.run(steps, emit)
    if result.findings:
        console.print(_("[bold]diagnosis of the run's log:[/]"))
        for finding in result.findings:
            console.print(f"  {shown(finding)}", highlight=False)
    if args.json:
        print_json(
            {
                "preset": preset.name,
                "run_id": result.run_id,
                "failed_step": result.failed_step,
                "exit_code": result.exit_code,
                "steps": result.reports,
                "findings": result.findings,
            }
        )
    elif result.run_id:
        console.print(_("run: {run_id}  (trainwiz attach {run_id})").format(run_id=result.run_id))
    if result.failed_step:
        raise _failure(result)
    return result.exit_code


def _failure(result: ReplayResult) -> TrainwizError:
    """The one line on stderr of a failed replay, through the CLI's error printer (exit 1):
    the step is named there, the exit code being 1 whichever step it was."""
    message = " ".join(result.reports[-1].message.split())
    return TrainwizError(
        _("replay failed at step {step}: {message}").format(
            step=result.failed_step, message=message
        )
    )
