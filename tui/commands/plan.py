"""CLI: `trainwiz plan PRESET` — every step's exact command, copy-pasteable (or --json)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass
from typing import Any

from backend.i18n import _
from backend.mirrors import apply_mirrors, plan_lines
from backend.plan.commands import comment
from backend.plan.outputs import check_output_dir
from backend.planner.hostram import host_ram_for
from backend.planner.report import planner_report
from backend.preset import load_preset
from backend.preset.safety import Risk, container_risks
from backend.preset.schema import Preset
from backend.redact import preset_secrets, redact_text
from backend.runs.spec import LaunchSpec, plan_spec
from tui.commands._args import bounded_float, path_arg
from tui.commands._common import add_json_flag, print_json

HOST_RAM_RANGE = (1.0, 65536.0)  # GiB --host-ram takes (and the MCP server's plan and tune)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "plan",
        help=_("print the exact commands a preset runs (shell-quoted, copy-pasteable)"),
        description=_(
            "Print every step of a preset as the exact command trainwiz runs: model "
            "fetch, image pull, environment, docker run, in-container setup, torchrun."
        ),
    )
    parser.add_argument("preset", metavar="PRESET", help=_("a shipped preset name or a YAML path"))
    parser.add_argument(
        "--transformers",
        metavar="VERSION",
        help=_("name the training flags for this transformers version (default: the preset's)"),
    )
    parser.add_argument(
        "--gpu", metavar="NAME", help=_("plan memory for this GPU (h200, a100, ...)")
    )
    parser.add_argument(
        "--config", metavar="PATH", type=path_arg, help=_("the model's config.json (its shape)")
    )
    parser.add_argument("--tune", action="store_true", help=_("print the fastest preset that fits"))
    parser.add_argument(
        "--free-batch", action="store_true", help=_("--tune may change the global batch")
    )
    add_real_data_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def add_real_data_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lengths",
        metavar="REPORT",
        type=path_arg,
        help=_(
            "token lengths from `trainwiz data check FILE --model DIR --json` saved to a file "
            "(default: a stated ShareGPT-like distribution)"
        ),
    )
    parser.add_argument(
        "--host-ram",
        metavar="GIB",
        type=bounded_float(*HOST_RAM_RANGE),
        help=_("host RAM to plan within (default: this machine's when planning for its GPU)"),
    )


@dataclass
class PlanOutcome:
    """What `trainwiz plan` found: the launch's spec for this machine, the preset's risks, and
    the planner's lines (the script's comments) and estimate (the JSON's fields)."""

    preset: Preset
    spec: LaunchSpec
    risks: list[Risk]
    lines: list[str]
    estimate: dict[str, Any]


def make_plan(
    preset_ref: str,
    *,
    transformers: str | None = None,
    gpu: str | None = None,
    config: str | None = None,
    do_tune: bool = False,
    free_batch: bool = False,
    lengths: str | None = None,
    host_ram: float | None = None,
) -> PlanOutcome:
    """The plan of `trainwiz plan` and of the MCP server's ``plan`` tool (one path for both)."""
    preset = load_preset(preset_ref)
    check_output_dir(preset)  # where the weights would go: refused before anything else
    if preset.mirrors.profile == "custom" and preset.mirrors.resolved is None:
        # The preset's own hosts: a plan is a look, it sends them no request (launch probes).
        print(
            _(
                "trainwiz: mirrors: custom: not probed by plan (no request goes to the preset's "
                "hosts); launch probes them and records its choice in mirrors.json"
            ),
            file=sys.stderr,
        )
    else:
        preset = apply_mirrors(preset)  # mirrors: auto/cn probe first
    # The launch's own decisions (port, torchrun, image) for this machine, made the same way.
    spec = plan_spec(preset, transformers_version=transformers, preset_ref=preset_ref)
    risks = container_risks(preset)
    lines, estimate = planner_report(
        preset,
        gpu,
        config,
        do_tune=do_tune,
        free_batch=free_batch,
        lengths=lengths,
        host_ram=host_ram_for(host_ram, gpu),
    )
    for risk in risks:
        print(_("trainwiz: warning: {line}").format(line=redact_text(risk.line())), file=sys.stderr)
    return PlanOutcome(preset, spec, risks, lines, estimate)


def plan_json(outcome: PlanOutcome) -> dict[str, Any]:
    """`trainwiz plan --json`: one builder for the CLI and the MCP server."""
    spec = outcome.spec
    return {
        **spec.plan.to_dict(),
        "master_port": spec.master_port,
        "torchrun": spec.torchrun,
        "image": spec.image,
        "notes": spec.notes,
        **_scrub(outcome.estimate, preset_secrets(outcome.preset)),  # e.g. the tuned YAML
        "risks": [asdict(r) for r in outcome.risks],
        "mirrors": outcome.preset.mirrors.resolved,
    }


def run(args: argparse.Namespace) -> int:
    outcome = make_plan(
        args.preset,
        transformers=args.transformers,
        gpu=args.gpu,
        config=args.config,
        do_tune=args.tune,
        free_batch=args.free_batch,
        lengths=args.lengths,
        host_ram=args.host_ram,
    )
    if args.json:
        print_json(plan_json(outcome))
        return 0
    preset, spec, risks = outcome.preset, outcome.spec, outcome.risks
    warnings = [comment(_("WARNING {line}").format(line=risk.line())) for risk in risks]
    script = spec.plan.as_script()
    if warnings:  # right under the title line, before any command
        head, _sep, rest = script.partition("\n")
        script = "\n".join([head, *warnings, rest])
    print(script, end="")
    secrets = preset_secrets(preset)
    notes = [*spec.notes, *plan_lines(preset), *outcome.lines]
    print("\n" + "\n".join(comment(redact_text(line, secrets)) for line in notes))
    return 0


def _scrub(value: Any, secrets: list[str]) -> Any:
    """Every string inside ``value`` with the preset's secrets redacted."""
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    return value
