"""CLI: `trainwiz export RUN --to DIR [--checkpoint N] [--merge] [--json]`: safetensors, tokenizer
and a README model card (base model, data hash and size, preset, steps, losses, hardware); a LoRA
run exports its adapter, or with --merge the adapter folded into the base."""

from __future__ import annotations

import argparse
from pathlib import Path

from backend.i18n import _
from backend.results.export import export_run
from backend.runs import find_run
from tui.commands._args import bounded_int, path_arg
from tui.commands._common import add_json_flag, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "export", help=_("write a run's model as safetensors + tokenizer + model card")
    )
    parser.add_argument("run", metavar="RUN", help=_("run id, unique prefix, 'last' or a run dir"))
    parser.add_argument(
        "--to", required=True, metavar="DIR", type=path_arg, help=_("a new (or empty) folder")
    )
    parser.add_argument(
        "--checkpoint",
        type=bounded_int(0, 10**9),
        metavar="N",
        help=_("checkpoint-N, not the final"),
    )
    parser.add_argument(
        "--merge", action="store_true", help=_("LoRA/QLoRA run: fold the adapter into its base")
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = export_run(
        find_run(args.run), Path(args.to), checkpoint=args.checkpoint, merge=args.merge
    )
    if args.json:
        print_json(result)
    else:
        if result.consolidated:
            print(_("consolidated the FSDP-sharded {source} into full weights").format(
                source=result.source))  # fmt: skip
        print(
            _("exported {source} to {to}: {items}").format(
                source=result.source, to=result.to, items=", ".join(result.files)
            )
        )
    return 0
