"""CLI: `trainwiz check [--preset P] [--json] [--only ID ...]` — the Checks step without the UI.

Exit 0 when nothing fails (warnings and skips are fine), 1 otherwise, so a provisioning script
can gate on it. People get a table and the fixes; scripts get JSON.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from backend.checks import CheckResult, blocked_steps, check_ids, run_checks
from backend.errors import BadInput
from backend.i18n import N_, _
from backend.mirrors import apply_mirrors
from backend.preset.loader import load_preset
from backend.preset.safety import Risk, container_risks
from backend.preset.schema import Preset
from backend.tokens import allow_hosts
from tui.commands._args import path_arg
from tui.commands._common import add_json_flag, print_json

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
_MARK = {"ok": "✓", "warn": "!", "fail": "✗", "skip": "–"}
# Status words as shown to people (JSON keeps the English keys).
_STATUS = {"ok": N_("ok"), "warn": N_("warn"), "fail": N_("fail"), "skip": N_("skip")}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "check",
        help=_("check this machine against a preset (driver, GPUs, Docker, disk, RAM, network)"),
        description=_("Run the system checks concurrently; exit 0 when nothing fails."),
    )
    parser.add_argument(
        "--preset",
        metavar="NAME|PATH",
        type=path_arg,
        help=_("judge against this preset (default: a plain survey)"),
    )
    parser.add_argument(
        "--only",
        metavar="ID",
        action="append",
        help=_("run only these checks: {ids}").format(ids=", ".join(check_ids())),
    )
    parser.add_argument(
        "--token-host",
        action="append",
        default=[],
        metavar="HOST",
        help=_("also send the Hub token to this https host (like TRAINWIZ_TOKEN_HOSTS)"),
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    allow_hosts(args.token_host)
    preset, results, risks = run_check_set(args.preset, args.only)
    if args.json:
        print_json(check_json(preset, results, risks))
    else:
        _print_table(results, preset.name if preset else None)
        _print_risks(risks)
    return 1 if any(r.status == "fail" for r in results) else 0


def run_check_set(
    preset_ref: str | None, only: list[str] | None
) -> tuple[Preset | None, list[CheckResult], list[Risk]]:
    """The checks `trainwiz check` runs (and the MCP server's ``check`` tool): the preset loaded
    and its mirrors probed first, so the network checks test the mirror the launch would use."""
    if only:
        unknown = [i for i in only if i not in check_ids()]
        if unknown:
            raise BadInput(
                _("--only {ids}: unknown check (known: {known})").format(
                    ids=", ".join(unknown), known=", ".join(check_ids())
                )
            )
    preset = load_preset(preset_ref) if preset_ref else None
    if preset is not None:  # mirrors: auto/cn probe first, so the network checks test the choice
        preset = apply_mirrors(preset)
    results = run_checks(preset, only=only)
    risks = container_risks(preset) if preset is not None else []
    return preset, results, risks


def check_json(preset: Preset | None, results: list[CheckResult], risks: list[Risk]) -> dict:
    """`trainwiz check --json`: one builder for the CLI and the MCP server."""
    return {
        "preset": preset.name if preset else None,
        "checks": [r.model_dump(mode="json") for r in results],
        "blocked_steps": blocked_steps(results),
        "risks": [asdict(r) for r in risks],
    }


def _print_risks(risks: list[Risk]) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console()
    for risk in risks:
        console.print(
            Text(
                _("! dangerous option {field}: {message}").format(
                    field=risk.field, message=risk.message
                ),
                style="bold yellow",
            )
        )
        console.print(
            Text("  " + _("fix: {fix}; launch asks for --yes").format(fix=risk.fix)),
            soft_wrap=True,
        )


def _print_table(results: list[CheckResult], preset_name: str | None) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    title = (
        _("trainwiz check — preset {name}").format(name=preset_name)
        if preset_name
        else _("trainwiz check — no preset")
    )
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("", width=1)
    table.add_column(_("check"), style="bold")
    table.add_column("id", style="dim")  # what --only takes: never translated
    table.add_column(_("status"))
    table.add_column(_("found"))
    for r in results:
        style = _STYLE[r.status]
        table.add_row(
            Text(_MARK[r.status], style=style),
            _(r.title) or r.id,
            r.id,
            Text(_(_STATUS[r.status]), style=style),
            r.summary,
        )
    console.print(table)
    for r in results:
        if r.status in ("fail", "warn"):
            status = _(_STATUS[r.status])
            title = _(r.title) or r.id
            heading = _("{title} · {id} ({status})").format(title=title, id=r.id, status=status)
            console.print(Text(heading, style=_STYLE[r.status]))
            if r.why:
                console.print(Text("  " + _("why: {why}").format(why=r.why)), soft_wrap=True)
            if r.fix:
                fix = r.fix.replace("\n", "\n  ")
                console.print(Text("  " + _("fix: {fix}").format(fix=fix)), soft_wrap=True)
    blocked = blocked_steps(results)
    if blocked:
        for step, ids in blocked.items():
            console.print(
                Text(
                    _("blocks step '{step}': {checks}").format(step=step, checks=", ".join(ids)),
                    style="bold red",
                )
            )
    elif not preset_name:
        console.print(
            Text(_("(no preset: missing pieces are warnings; use --preset to judge)"), style="dim")
        )
