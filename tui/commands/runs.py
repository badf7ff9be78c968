"""CLI: `trainwiz runs`, `attach RUN`, `stop RUN`, `logs RUN [-f]` over run directories.

Everything printed here comes from a run's own files (its log, status.json, its directory's
name), so it is printed through ``terminal_safe`` (``say``): a run can write anything there.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

from backend.errors import BadInput, TrainwizError
from backend.i18n import N_, _
from backend.monitor.world import world_fields
from backend.paths import runs_dir
from backend.preset import load_preset
from backend.rundir import RunDir, RunStatus, check_runs_root
from backend.runs import find_run, follow_log, list_runs, refresh, stop_run
from backend.runs.procs import deleted_runs, end_processes
from backend.runs.summary import run_progress, shown_message
from backend.termsafe import terminal_safe
from backend.units import duration
from tui.commands._common import add_json_flag, print_json, say
from tui.commands.compare import register_compare

_REF_HELP = N_("run id, unique prefix, 'last', a run dir or a Slurm job id")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    runs = subparsers.add_parser("runs", help=_("list runs with their state"))
    add_json_flag(runs)
    runs.set_defaults(func=run_list)

    register_compare(runs)  # `trainwiz runs compare A B [C…]`

    attach = subparsers.add_parser(
        "attach", help=_("open the wizard's monitor on a live or finished run")
    )
    attach.add_argument("run", metavar="RUN", help=_(_REF_HELP))
    add_json_flag(attach)  # the refreshed record instead of the wizard (scripts, other logins)
    attach.set_defaults(func=run_attach)

    stop = subparsers.add_parser(
        "stop", help=_("stop a run gracefully (SIGTERM / docker stop, then kill)")
    )
    stop.add_argument("run", metavar="RUN", help=_(_REF_HELP))
    stop.add_argument(
        "--timeout",
        type=_seconds,
        default=30.0,
        help=_("seconds between SIGTERM and SIGKILL (a finite number >= 0)"),
    )
    add_json_flag(stop)
    stop.set_defaults(func=run_stop)

    logs = subparsers.add_parser("logs", help=_("print a run's log (train.log)"))
    logs.add_argument("run", metavar="RUN", help=_(_REF_HELP))
    logs.add_argument("-f", "--follow", action="store_true", help=_("keep printing until it ends"))
    logs.set_defaults(func=run_logs)


def _seconds(text: str) -> float:
    """argparse type: a finite, non-negative number of seconds (nan, inf, -1 are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            _("'{text}' is not a number of seconds").format(text=text)
        ) from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            _("'{text}': give a finite number of seconds >= 0").format(text=text)
        )
    return value


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    delta = max(0, int(time.time() - seconds))
    if delta < 3600:
        return f"{delta // 60}m{delta % 60:02d}s ago"
    return f"{delta // 3600}h{delta % 3600 // 60:02d}m ago"


def listed_runs() -> tuple[list[RunStatus], dict[str, dict[str, Any]]]:
    """Every run's refreshed record and what `runs` adds to it (best eval loss, checkpoint,
    the figures, the world size); deleted runs whose processes live on are named on stderr."""
    from backend.results.summary import brief  # deferred: results, only when listing

    check_runs_root()  # a TRAINWIZ_HOME that is a file is bad input, not "no runs yet"
    statuses = list_runs()
    _note_deleted()
    extra = {
        s.run_id: {**brief(runs_dir() / s.run_id), **world_fields(runs_dir() / s.run_id)}
        for s in statuses
    }
    return statuses, extra


def runs_json() -> list[dict[str, Any]]:
    """`trainwiz runs --json`: one builder for the CLI and the MCP server."""
    statuses, extra = listed_runs()
    return [{**s.model_dump(), **extra[s.run_id]} for s in statuses]


def status_json(run_dir: Path) -> dict[str, Any]:
    """`trainwiz attach RUN --json` (and the MCP server's ``run_status``): the refreshed record
    and where the run is (step, loss, real tokens/s, ETA: ``run_progress``)."""
    status = refresh(run_dir).model_dump()
    return {**status, "run_dir": str(run_dir), "progress": run_progress(run_dir)}


def run_list(args: argparse.Namespace) -> int:
    if args.json:
        print_json(runs_json())
        return 0
    statuses, extra = listed_runs()
    if not statuses:
        print(_("no runs yet: start one with 'trainwiz launch PRESET'"))
        return 0
    ids = {s.run_id: terminal_safe(s.run_id) for s in statuses}  # a directory's name
    width = max(len(shown) for shown in ids.values())
    head = (
        f"{'RUN':<{width}}  {'STATE':<9} {'RUNNER':<7} {'WORLD':<5} {'STARTED':<12} {'EVAL':<7} "
        f"{'CKPT':<10}"
    )
    print(head + f" {'REAL TOK/S':>10} {'WALL':<7} MESSAGE")
    for s in statuses:
        best, ckpt = extra[s.run_id]["best_eval_loss"], extra[s.run_id]["last_checkpoint"]
        evals = f"{best:.4f}" if best is not None else "-"
        ckpts = f"ckpt {ckpt}" if ckpt is not None else "-"
        # real tokens/s and wall time as the Monitor and `runs compare` show them
        real = extra[s.run_id]["real_tokens_per_s"]
        rate = f"{real:,.0f}" if real is not None else "-"
        wall = duration(extra[s.run_id]["wall_s"]) if extra[s.run_id]["wall_s"] else "-"
        # the trainer's world size (its start record), and a note when it is not the plan's
        size = extra[s.run_id]["world_size"]
        world = extra[s.run_id]["world_note"]
        say(
            f"{ids[s.run_id]:<{width}}  {s.state:<9} {s.runner:<7} "
            f"{size if size is not None else '-':<5} {_age(s.started_at):<12} "
            f"{evals:<7} {ckpts:<10} {rate:>10} {wall:<7} {s.message}"
            + (f" ({world})" if world else "")
        )
    return 0


def attach_preset(run_dir: Path) -> tuple[str | None, list[str]]:
    """The run's preset for the wizard (None when it is unusable) and lines to tell the user;
    the run's record is refreshed first, so a stuck or corrupt one is resolved before."""
    status = refresh(run_dir)
    notes = [f"run {status.run_id} {status.state}: {shown_message(status.message)}"]
    preset: str | None = str(RunDir(run_dir).preset_file)
    try:
        load_preset(str(preset))
    except (TrainwizError, OSError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        notes.append(
            _("{preset} unusable ({error}); the default preset is shown").format(
                preset=preset, error=first
            )
        )
        preset = None
    return preset, notes


def run_attach(args: argparse.Namespace) -> int:
    run_dir = find_run(args.run)
    if args.json:
        print_json(status_json(run_dir))
        return 0
    from tui.app import run_wizard  # deferred: Textual, only for `runs attach`

    preset, notes = attach_preset(run_dir)
    for line in notes:
        say(_("trainwiz: {line}").format(line=line), stderr=True)
    return run_wizard(preset=preset, attach=run_dir)


def _stop_deleted(ref: str, timeout: float) -> int | None:
    """`stop ID` for a run whose directory was deleted while processes of it live on: end
    them (found by their environment marker). None when there is no such run."""
    orphans = deleted_runs(runs_dir())
    matches = [run_id for run_id in orphans if run_id == ref or run_id.startswith(ref)]
    if len(matches) != 1:
        return None
    ended, left = end_processes(runs_dir() / matches[0], timeout)
    say(
        _("{run_id}: its directory was deleted; {ended} process(es) ended, {left} left").format(
            run_id=matches[0], ended=ended, left=len(left)
        )
    )
    return 0 if not left else 1


def _note_deleted() -> None:
    for run_id, procs in sorted(deleted_runs(runs_dir()).items()):
        say(
            _(
                "trainwiz: run {run_id}: directory deleted, {count} process(es) still running "
                "(trainwiz stop {run_id})"
            ).format(run_id=run_id, count=len(procs)),
            stderr=True,
        )


def stop_counted(run_dir: Path, timeout: float, *, quiet: bool = False) -> RunStatus:
    """Stop a run and a serve of it (`trainwiz stop`, the MCP server's ``stop``): the record
    says what was ended (``ended_processes``, ``left_processes``), the servers counted in."""
    from backend.results.serve_run import stop_serving  # deferred: serve helpers, only to stop

    served = stop_serving(run_dir)  # `trainwiz serve RUN --detach`: its servers end first
    if served is not None and not quiet:
        say(_("{run_id}: stopped serving its model").format(run_id=run_dir.name))
    status = stop_run(run_dir, timeout=timeout)
    extra = status.model_extra or {}
    # What was ended is the backend's own count: the training's processes and the servers'.
    ended = extra.get("ended_processes", 0) + (served.ended if served else 0)
    left = [*extra.get("left_processes", []), *(served.left if served else [])]
    return status.model_copy(update={"ended_processes": ended, "left_processes": left})


def stop_json(run_dir: Path, timeout: float) -> dict[str, Any]:
    """`trainwiz stop RUN --json`: one builder for the CLI and the MCP server."""
    return stop_counted(run_dir, timeout, quiet=True).model_dump()


def run_stop(args: argparse.Namespace) -> int:
    try:
        run_dir = find_run(args.run)
    except BadInput:
        code = _stop_deleted(args.run, args.timeout) if args.run.strip() else None
        if code is None:
            raise
        return code
    status = stop_counted(run_dir, args.timeout, quiet=args.json)
    extra = status.model_extra or {}
    ended, left = extra.get("ended_processes", 0), extra.get("left_processes", [])
    if args.json:
        print_json(status.model_dump())
    else:
        say(f"{status.run_id}: {status.state} ({shown_message(status.message)})")
        if left:
            pids = ", ".join(str(p) for p in left)
            print(
                _("trainwiz: {count} process(es) of the run still alive: {pids}").format(
                    count=len(left), pids=pids
                )
            )
        else:
            print(
                _("trainwiz: {ended} process(es) ended; none of the run is left").format(
                    ended=ended
                )
            )
    return 0 if status.final and not left else 1


def run_logs(args: argparse.Namespace) -> int:
    run_dir = find_run(args.run)
    try:
        if args.follow:
            from tui.commands.launch import follow_with_progress  # deferred: only with --follow

            follow_with_progress(run_dir)  # the log, and a progress line with the ETA
        else:
            for text in follow_log(run_dir, follow=False):
                say(text, end="", flush=True)
    except KeyboardInterrupt:
        return 130
    if args.follow:
        status = refresh(run_dir)
        say(
            _("trainwiz: run {run_id} {state}: {message}").format(
                run_id=status.run_id, state=status.state, message=shown_message(status.message)
            ),
            stderr=True,
        )
    return 0
