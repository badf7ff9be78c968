"""CLI: `trainwiz images [--preset P] [--json]` and `trainwiz images pull REF`.

The catalog and the local images, each judged against this machine's driver and GPUs and the
preset; `--driver/--cuda/--gpu` ask "what if" for a server you are not on. Exit 0 when at least
one image is compatible, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from backend.i18n import _
from backend.images.events import LayerProgress, LogLine
from backend.images.host import detect_host_gpus
from backend.images.pull import pull_image
from backend.images.survey import ImagesSurvey, host_override, survey_images
from backend.preset.loader import load_preset
from tui.commands._args import path_arg, version_text
from tui.commands._common import add_json_flag, print_json, to_jsonable

_STYLE = {"compatible": "green", "warning": "yellow", "incompatible": "red"}
_MARK = {"compatible": "✓", "warning": "!", "incompatible": "✗"}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "images",
        help=_("images this machine can train in (catalog + local), and pull"),
        description=_("Judge every catalog and local image against the driver, GPUs and preset."),
    )
    parser.add_argument(
        "--preset", metavar="NAME|PATH", type=path_arg, help=_("judge for this preset")
    )
    parser.add_argument(
        "--driver",
        type=version_text(_("a driver version like 535.54.03")),
        help=_("what-if NVIDIA driver version, e.g. 535.54.03"),
    )
    parser.add_argument(
        "--cuda",
        type=version_text(_("a CUDA version like 12.2")),
        help=_("what-if driver CUDA version, e.g. 12.2"),
    )
    parser.add_argument(
        "--gpu",
        action="append",
        metavar="CC",
        type=version_text(_("a compute capability like 9.0"), r"\d{1,2}(\.\d)?"),
        help=_("what-if compute capability, e.g. 9.0"),
    )
    parser.add_argument("--no-local", action="store_true", help=_("skip the Docker daemon"))
    parser.add_argument("--all", action="store_true", help=_("also list incompatible images"))
    add_json_flag(parser)
    parser.set_defaults(func=run)
    sub = parser.add_subparsers(dest="images_command", metavar="SUBCOMMAND")
    pull = sub.add_parser("pull", help=_("pull an image with per-layer progress"))
    pull.add_argument(
        "ref", help=_("image reference, e.g. pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel")
    )
    add_json_flag(pull)
    pull.set_defaults(func=run_pull)


def run(args: argparse.Namespace) -> int:
    """Without --preset this is a listing for the machine (exit 0); with one, a verdict
    for that job: exit 1 when no image can run it."""
    preset = load_preset(args.preset) if args.preset else None
    host = host_override(detect_host_gpus(), args.driver, args.cuda, args.gpu)
    survey = survey_images(preset, host, include_local=not args.no_local)
    if args.json:
        print_json(survey)
    else:
        _print(
            survey,
            args.all,
            _("none (a CUDA training with default settings)") if preset is None else survey.preset,
        )
        if preset is None:
            print(
                _(
                    "judged for a CUDA training with default settings; --preset P judges for your job"
                ),
                file=sys.stderr,
            )
    if preset is None:
        return 0
    return 0 if survey.suggestion else 1


def _print(survey: ImagesSurvey, show_all: bool, preset_label: str) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console()
    host = survey.host
    gpus = ", ".join(f"{g.name} (sm{g.sm})" for g in host.gpus) or "none"
    console.print(
        _("driver {value} (CUDA {value2}), GPUs: {gpus}; preset: {preset_label}").format(
            value=host.driver_version or "none",
            value2=host.cuda_driver or "-",
            gpus=gpus,
            preset_label=preset_label,
        )
    )
    if survey.docker_error:
        console.print(
            Text(
                _("local images not listed: {docker_error}").format(
                    docker_error=survey.docker_error
                ),
                style="yellow",
            )
        )
    if survey.mirrors:
        console.print(_("registry mirrors: {items}").format(items=", ".join(survey.mirrors)))
    hidden = 0
    for row in survey.rows:
        c = row.compat
        if c.verdict == "incompatible" and not show_all:
            hidden += 1
            continue
        image = row.image
        facts = f"torch {image.torch or '?'}, CUDA {image.cuda or '-'}, {image.flavor or '?'}"
        line = Text(f"{_MARK[c.verdict]} {c.verdict:<12} ", style=_STYLE[c.verdict])
        line.append(image.ref, style="bold")
        line.append(f"  {facts}{'  [local]' if image.local else ''}", style="dim")
        console.print(line, soft_wrap=True)
        for reason in c.reasons:
            if reason.level != "ok":
                console.print(Text(f"    {reason.text}", style=_STYLE[c.verdict]), soft_wrap=True)
    if hidden:
        console.print(
            Text(
                _("{hidden} incompatible images hidden (--all shows them)").format(hidden=hidden),
                style="dim",
            )
        )
    if survey.suggestion:
        console.print(
            Text(
                _("suggested: {suggestion}").format(suggestion=survey.suggestion),
                style="bold green",
            )
        )
    else:
        console.print(
            Text(_("no compatible image in the catalog for this machine"), style="bold red")
        )


def run_pull(args: argparse.Namespace) -> int:
    def show(event: object) -> None:
        if isinstance(event, LayerProgress):
            size = f" {event.current}/{event.total}" if event.total else ""
            print(f"{event.layer}: {event.status}{size}", file=sys.stderr)
        elif isinstance(event, LogLine):
            print(event.text, file=sys.stderr)

    result = pull_image(args.ref, progress=show)
    if args.json:
        print_json(to_jsonable(result))
    elif result.ok:
        print(f"pulled {result.ref} ({len(result.layers)} layers) {result.digest or ''}".rstrip())
    else:
        print(
            _("pull of {ref} failed: {error}").format(ref=result.ref, error=result.error),
            file=sys.stderr,
        )
    return 0 if result.ok else 1
