"""CLI: `trainwiz chat RUN [--checkpoint N] [--prompt TEXT] [--device auto|cpu|cuda]`.

With ``--prompt`` (repeatable) it prints each reply and exits, for scripts; without, it reads
prompts from the terminal until an empty line, ^D or ^C. The model lives in a worker process
started with the training side's python (this process never imports torch).
"""

from __future__ import annotations

import argparse
import sys

from backend.i18n import _
from backend.results.chat import ChatSession
from backend.runs import find_run
from tui.commands._args import bounded_int
from tui.commands._common import add_json_flag, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("chat", help=_("talk to a run's model (FastChat's template)"))
    parser.add_argument("run", metavar="RUN", help=_("run id, unique prefix, 'last' or a run dir"))
    parser.add_argument(
        "--checkpoint",
        type=bounded_int(0, 10**9),
        metavar="N",
        help=_("checkpoint-N, not the final"),
    )
    parser.add_argument(
        "--prompt", action="append", metavar="TEXT", help=_("ask this and exit (repeatable)")
    )
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--max-new-tokens", type=bounded_int(1, 65536), default=128)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    run_dir = find_run(args.run)
    with ChatSession(
        run_dir, checkpoint=args.checkpoint, device=args.device, max_new_tokens=args.max_new_tokens
    ) as session:
        if session.consolidated:
            note = _("consolidated the FSDP-sharded {source} into full weights")
            print(note.format(source=session.model), file=sys.stderr)
        if args.prompt:
            turns = [{"prompt": p, "reply": session.ask(p)} for p in args.prompt]
            if args.json:
                model = {"model": str(session.model), "consolidated": session.consolidated}
                print_json(
                    {
                        **model,
                        "device": session.device,
                        "template": session.template,
                        "turns": turns,
                    }
                )
            else:
                for turn in turns:
                    print(turn["reply"])
            return 0
        print(
            _("chat with {model} on {device} (empty line to end)").format(
                model=session.model, device=session.device
            ),
            file=sys.stderr,
        )
        while True:
            try:
                prompt = input("you> ")
            except (EOFError, KeyboardInterrupt):
                print(file=sys.stderr)
                return 0
            if not prompt.strip():
                return 0
            print(f"model> {session.ask(prompt)}")
