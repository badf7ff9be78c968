"""CLI: `trainwiz plan PRESET` — every step's exact command, copy-pasteable (or --json)."""

from __future__ import annotations

import argparse

from backend.plan import build_plan
from backend.planner.report import planner_report
from backend.preset import load_preset
from tui.commands._common import add_json_flag, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "plan",
        help="print the exact commands a preset runs (shell-quoted, copy-pasteable)",
        description="Print every step of a preset as the exact command trainwiz runs: model "
        "fetch, image pull, environment, docker run, in-container setup, torchrun.",
    )
    parser.add_argument("preset", metavar="PRESET", help="a shipped preset name or a YAML path")
    parser.add_argument(
        "--transformers",
        metavar="VERSION",
        help="name the training flags for this transformers version (default: the preset's)",
    )
    parser.add_argument("--gpu", metavar="NAME", help="plan memory for this GPU (h200, a100, ...)")
    parser.add_argument("--config", metavar="PATH", help="the model's config.json (its shape)")
    parser.add_argument("--tune", action="store_true", help="print the fastest preset that fits")
    parser.add_argument(
        "--free-batch", action="store_true", help="--tune may change the global batch"
    )
    add_real_data_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)
    from tui.commands import tune

    tune.register(subparsers)


def add_real_data_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lengths",
        metavar="REPORT",
        help="token lengths from `trainwiz data check FILE --model DIR --json` saved to a file "
        "(default: a stated ShareGPT-like distribution)",
    )
    parser.add_argument(
        "--host-ram",
        metavar="GIB",
        type=float,
        help="host RAM to plan within (default: this machine's when planning for its GPU)",
    )


def run(args: argparse.Namespace) -> int:
    preset = load_preset(args.preset)
    plan = build_plan(preset, transformers_version=args.transformers, preset_ref=args.preset)
    from backend.planner.hostram import host_ram_for

    lines, estimate = planner_report(
        preset,
        args.gpu,
        args.config,
        do_tune=args.tune,
        free_batch=args.free_batch,
        lengths=args.lengths,
        host_ram=host_ram_for(args.host_ram, args.gpu),
    )
    if args.json:
        print_json({**plan.to_dict(), **estimate})
    else:
        print(plan.as_script(), end="")
        print("\n" + "\n".join(f"# {line}" for line in lines))
    return 0
