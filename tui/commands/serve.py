"""CLI: `trainwiz serve RUN [--checkpoint N] [--port P] [--host H] [--api-key-env VAR]
[--allow-no-key] [--detach]`: the run's model behind FastChat's OpenAI-compatible API
(backend.results.serve).

In the foreground it serves until ctrl+c; with ``--detach`` it returns once the model answers
and `trainwiz stop RUN` ends it. Either way it prints the base URL and a curl line to try."""

from __future__ import annotations

import argparse
import sys

from backend.i18n import _
from backend.runs import find_run
from tui.commands._common import add_json_flag, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "serve",
        help=_("serve a run's model over an OpenAI-compatible API (FastChat)"),
        description=_(
            "Start FastChat's controller, model worker (vLLM's where it runs) and OpenAI API "
            "server for the run's model, named after the run. Listens on 127.0.0.1 unless "
            "--host says otherwise; ctrl+c or 'trainwiz stop RUN' ends every process."
        ),
    )
    parser.add_argument("run", metavar="RUN", help=_("run id, unique prefix, 'last' or a run dir"))
    parser.add_argument(
        "--checkpoint", type=int, metavar="N", help=_("checkpoint-N, not the final")
    )
    parser.add_argument("--port", type=int, default=8000, help=_("the API's port (default 8000)"))
    parser.add_argument(
        "--host", default="127.0.0.1", help=_("the API's address (default 127.0.0.1: this machine)")
    )
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        help=_("require this API key, read from environment variable VAR (never from argv)"),
    )
    parser.add_argument(
        "--allow-no-key",
        action="store_true",
        help=_("serve an address other machines reach without an API key (refused otherwise)"),
    )
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument(
        "--detach", "-d", action="store_true", help=_("return once served; stop with trainwiz stop")
    )
    add_json_flag(parser)
    parser.set_defaults(func=run)


def _forward(args: argparse.Namespace) -> list[str]:
    out = ["--host", args.host, "--port", str(args.port), "--device", args.device]
    if args.checkpoint is not None:
        out += ["--checkpoint", str(args.checkpoint)]
    if args.api_key_env is not None:
        out += ["--api-key-env", args.api_key_env]
    if args.allow_no_key:
        out.append("--allow-no-key")
    return out


def _say_ready(plan_url: str, model: str, curl: str, name: str, detached: bool) -> None:
    print(
        _("trainwiz: serving {model} at {url}").format(model=model, url=plan_url), file=sys.stderr
    )
    print(plan_url)
    print(curl)
    end = (
        _("trainwiz: stop it with 'trainwiz stop {name}'")
        if detached
        else _("trainwiz: ctrl+c stops it (or 'trainwiz stop {name}')")
    )
    print(end.format(name=name), file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from backend.results import serve, serve_run  # deferred: `--help` skips the serve helpers

    run_dir = find_run(args.run)
    plan = serve.plan_serve(
        run_dir,
        checkpoint=args.checkpoint,
        host=args.host,
        port=args.port,
        api_key_env=args.api_key_env,
        device=args.device,
        allow_no_key=args.allow_no_key,
    )  # fmt: skip: checks everything (exit 2) before a process starts
    for warning in plan.warnings:
        print(_("trainwiz: warning: {line}").format(line=warning), file=sys.stderr)
    if args.detach:
        record = serve_run.start_detached(run_dir, _forward(args))
        if args.json:
            print_json({**record, "curl": plan.curl()})
        else:
            _say_ready(plan.base_url, plan.model_name, plan.curl(), run_dir.name, True)
        return 0
    print(
        _("trainwiz: starting {engine} for {model} ({path})…").format(
            engine=plan.engine, model=plan.model_name, path=plan.model_path
        ),
        file=sys.stderr,
        flush=True,
    )
    try:
        serving = serve.start(plan)
    except KeyboardInterrupt:
        serve.end_leftovers(run_dir)
        print(_("trainwiz: interrupted"), file=sys.stderr)
        return 130
    code = serve_run.supervise(
        plan,
        serving,
        on_ready=lambda: _say_ready(
            plan.base_url, plan.model_name, plan.curl(), run_dir.name, False
        ),
    )
    print(_("trainwiz: stopped serving {model}").format(model=plan.model_name), file=sys.stderr)
    return code
