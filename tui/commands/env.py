"""CLI: `trainwiz env build PRESET` (and `tag`, `dockerfile`): the training environment, once.

Docker runner: the cached environment image `trainwiz-env:<hash>`; host runner: a venv under
the trainwiz home. Build output streams to stderr, the result (or JSON) to stdout; a failed
image build prints its error line and the diagnosis findings and exits 1.
"""

from __future__ import annotations

import argparse
import sys

from backend.diagnosis.build_log import build_explained
from backend.i18n import _
from backend.images.build import env_image_tag, plan_for
from backend.images.dockerfile import render_dockerfile
from backend.images.events import BuildStep, LogLine
from backend.images.ready import training_bin
from backend.images.venv import build_host_env
from backend.preset.loader import load_preset
from tui.commands._common import add_json_flag, print_json, to_jsonable


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "env",
        help=_("build the training environment (image or host venv) once, cached"),
        description=_("Build the preset's training environment; unchanged inputs are a cache hit."),
    )
    sub = parser.add_subparsers(dest="env_command", metavar="SUBCOMMAND", required=True)
    build = sub.add_parser("build", help=_("build the image (docker runner) or venv (host runner)"))
    build.add_argument("preset", metavar="PRESET", help=_("a shipped preset name or a YAML path"))
    build.add_argument("--force", action="store_true", help=_("rebuild even if the tag exists"))
    build.add_argument("--quiet", action="store_true", help=_("do not stream the build log"))
    add_json_flag(build)
    build.set_defaults(func=run_build)
    tag = sub.add_parser("tag", help=_("print the environment image tag for a preset"))
    tag.add_argument("preset", metavar="PRESET")
    tag.set_defaults(func=run_tag)
    dockerfile = sub.add_parser("dockerfile", help=_("print the generated Dockerfile"))
    dockerfile.add_argument("preset", metavar="PRESET")
    dockerfile.set_defaults(func=run_dockerfile)


def _stream(quiet: bool) -> object:
    def show(event: object) -> None:
        if quiet:
            return
        if isinstance(event, BuildStep):
            print(f"[{event.index}/{event.total}] {event.instruction[:160]}", file=sys.stderr)
        elif isinstance(event, LogLine):
            print(event.text, file=sys.stderr)

    return show


def run_build(args: argparse.Namespace) -> int:
    from backend.mirrors import apply_mirrors  # deferred: http/ssl mirrors, only for a build

    preset = apply_mirrors(load_preset(args.preset))  # mirrors: the probed index and image
    show = _stream(args.quiet)
    if preset.launch.runner == "host":
        if preset.environment.venv:  # a named venv that is not there: said before minutes of pip
            training_bin(preset)
        venv = build_host_env(preset, progress=show)  # type: ignore[arg-type]
        trains_in = str(training_bin(preset)) if venv.ok else ""
        used = trains_in.startswith(venv.path + "/")
        if args.json:
            print_json({"runner": "host", **_dict(venv), "trains_in": trains_in, "used": used})
        elif venv.ok:
            state = "reused" if venv.cached else f"built in {venv.seconds:.0f} s"
            print(
                _("host environment {path} ({state}): {versions}").format(
                    path=venv.path, state=state, versions=venv.versions
                )
            )
            if not used:  # the launch keeps training where it did: say where, and how to move
                print(
                    _(
                        "a launch of {name} still trains with {trains_in}: set "
                        "environment.venv: {path} in the preset to train in this one"
                    ).format(name=preset.name, trains_in=trains_in, path=venv.path)
                )
        else:
            print(
                _("host environment build failed: {error}").format(error=venv.error),
                file=sys.stderr,
            )
        return 0 if venv.ok else 1

    result = build_explained(preset, progress=show, force=args.force)  # type: ignore[arg-type]
    if args.json:
        print_json({"runner": "docker", **_dict(result)})
    elif result.ok:
        state = "cache hit" if result.cached else f"built in {result.seconds:.0f} s"
        print(f"{result.tag} ({state})")
    else:
        print(
            _("environment image build failed: {error}").format(error=result.error), file=sys.stderr
        )
        if result.error_line:
            print(
                _("  line {error_line_no}: {error_line}").format(
                    error_line_no=result.error_line_no, error_line=result.error_line
                ),
                file=sys.stderr,
            )
        for finding in result.findings:
            print(f"  [{finding.severity}] {finding.category}: {finding.title}", file=sys.stderr)
        print(_("  full log: {log_path}").format(log_path=result.log_path), file=sys.stderr)
    for note in result.notes:
        print(_("note: {note}").format(note=note), file=sys.stderr)
    return 0 if result.ok else 1


def _dict(obj: object) -> dict[str, object]:
    data = to_jsonable(obj)
    assert isinstance(data, dict)
    return data


def run_tag(args: argparse.Namespace) -> int:
    print(env_image_tag(load_preset(args.preset)))
    return 0


def run_dockerfile(args: argparse.Namespace) -> int:
    print(render_dockerfile(plan_for(load_preset(args.preset))), end="")
    return 0
