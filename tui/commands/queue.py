"""CLI: `trainwiz queue [add PRESET | rm ID | pause | resume] [--json]` (docs/queue.md).

`trainwiz queue` lists the items (id, state, preset, GPUs, position, run id once started);
`add` checks the preset as a launch would and queues it; the detached scheduler
(``backend.queue.scheduler``) starts each item when its GPUs (or a CPU slot) are free, and hands
a Slurm preset's item to sbatch at once (the list then shows its Slurm job id and state).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from backend import paths
from backend.i18n import _
from backend.preset import load_preset
from backend.queue.ops import add, listing, parse_gpus, remove, set_paused, shown_state
from backend.queue.service import LOG
from tui.commands._args import add_ignore_plan_flag, bounded_int, path_arg
from tui.commands._common import add_json_flag, pad_cells, print_json, say, to_jsonable
from tui.commands._risks import confirm_risks

MAX_PARALLEL = bounded_int(1, 256)


def add_max_parallel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-parallel",
        type=MAX_PARALLEL,
        metavar="N",
        help=_("how many CPU runs of the queue run at once (stored with the queue; default 1)"),
    )


def add_gpu_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpus", metavar="0,1", help=_("the GPUs to run on (default: any free ones)")
    )
    parser.add_argument(
        "--share",
        action="store_true",
        help=_("may run on GPUs other runs use (only the memory the plan needs must be free)"),
    )


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "queue",
        help=_("queue runs: each starts when its GPUs (or a CPU slot) are free"),
        description=_(
            "Without a command, list the queue. The scheduler runs detached (one per "
            "TRAINWIZ_HOME) and exits when the queue is empty."
        ),
    )
    add_json_flag(parser)
    parser.set_defaults(func=run_list)
    sub = parser.add_subparsers(dest="queue_command", metavar="add|rm|pause|resume")
    add = sub.add_parser("add", help=_("queue a preset"))
    add.add_argument("preset", metavar="PRESET", type=path_arg,
                     help=_("a shipped preset name or a YAML path"))  # fmt: skip
    add_gpu_flags(add)
    add.add_argument(
        "--after", metavar="RUN", help=_("start only after this run or queue item ended")
    )
    add_max_parallel(add)
    add.add_argument("--yes", "-y", action="store_true",
                     help=_("accept dangerous container options (privileged, host mounts, ...)"))  # fmt: skip
    add_ignore_plan_flag(add)
    add_json_flag(add)
    add.set_defaults(func=run_add)
    remove = sub.add_parser("rm", help=_("take a queued item out of the queue"))
    remove.add_argument("item", metavar="ID", help=_("the item id ('trainwiz queue' lists them)"))
    add_json_flag(remove)
    remove.set_defaults(func=run_rm)
    pause = sub.add_parser("pause", help=_("start no new item (started ones go on)"))
    add_json_flag(pause)
    pause.set_defaults(func=run_pause)
    resume = sub.add_parser(
        "resume", help=_("start items again; restarts the scheduler (after a reboot too)")
    )
    add_max_parallel(resume)
    add_json_flag(resume)
    resume.set_defaults(func=run_resume)


def run_add(args: argparse.Namespace) -> int:

    gpus = parse_gpus(args.gpus)
    preset = load_preset(args.preset)
    confirm_risks(preset, args.yes)
    added = add(preset, ref=args.preset, gpus=gpus, share=args.share, after=args.after,
                ignore_plan=args.ignore_plan, max_parallel=args.max_parallel)  # fmt: skip
    if args.json:
        print_json({"item": _item_json(added.item), "scheduler": added.scheduler,
                    "paused": added.paused})  # fmt: skip
        return 0
    print(added.item.id)
    print(_scheduler_line(added.paused, added.scheduler, _("queued as item {id}").format(
        id=added.item.id)), file=sys.stderr)  # fmt: skip
    return 0


def _scheduler_line(paused: bool, pid: int | None, head: str) -> str:
    if paused:
        return _("trainwiz: {head}; the queue is paused: 'trainwiz queue resume' starts it").format(
            head=head
        )
    if pid is None:
        return _("trainwiz: {head}; the scheduler found nothing to start").format(head=head)
    return _("trainwiz: {head}; scheduler pid {pid} (log: {log})").format(
        head=head, pid=pid, log=_log_path()
    )


def _log_path() -> str:
    return str(paths.home() / LOG)


def _item_json(item: Any) -> dict[str, Any]:
    data: dict[str, Any] = to_jsonable(item)
    return data


def run_rm(args: argparse.Namespace) -> int:

    item = remove(args.item)
    if args.json:
        print_json({"item": _item_json(item)})
    else:
        say(_("trainwiz: queue item {id} removed ({preset})").format(id=item.id,
                                                                     preset=item.preset_name))  # fmt: skip
    return 0


def run_pause(args: argparse.Namespace) -> int:

    paused, pid = set_paused(True)
    if args.json:
        print_json({"paused": paused, "scheduler": pid})
    else:
        print(_("trainwiz: queue paused: no new item starts; started runs go on"), file=sys.stderr)
    return 0


def run_resume(args: argparse.Namespace) -> int:

    paused, pid = set_paused(False, args.max_parallel)
    if args.json:
        print_json({"paused": paused, "scheduler": pid})
    else:
        print(_scheduler_line(False, pid, _("queue resumed")), file=sys.stderr)
    return 0


def _note(row: Any) -> str:
    """Why an item waits (here, or as a Slurm job still PENDING), how it failed (the
    diagnosis' top finding), else nothing."""
    if row.state == "failed":
        return str(row.diagnosis or row.message)
    if row.state == "running" and row.slurm_state == "PENDING":
        return str(row.message)
    return "" if row.state in ("finished", "running") else str(row.message)


def run_list(args: argparse.Namespace) -> int:

    found = listing()
    if args.json:
        print_json(found)
        return 0
    rows = found["items"]
    head = [_("id"), _("state"), _("preset"), _("GPUs"), _("position"), _("run"), _("note")]
    table = [[str(r.id), shown_state(r), r.preset, r.gpus,
              str(r.position or "-"), r.run_id or "-", _note(r)]
             for r in rows]  # fmt: skip
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h)
              for i, h in enumerate(head)]  # fmt: skip
    if table:
        say("  ".join(pad_cells(h, w) for h, w in zip(head, widths)).rstrip())
        for row in table:
            say("  ".join(pad_cells(c, w) for c, w in zip(row, widths)).rstrip())
    else:
        say(
            _(
                "the queue is empty: 'trainwiz queue add PRESET' or 'trainwiz sweep PRESET --set ...'"
            )
        )
    scheduler = found["scheduler"]
    state = (
        _("scheduler pid {pid}").format(pid=scheduler["pid"])
        if scheduler["running"]
        else _("no scheduler runs")
    )
    paused = _("paused") if found["paused"] else _("running")
    say(_("queue {paused}, --max-parallel {limit} (CPU runs), {state}").format(
        paused=paused, limit=found["max_parallel"], state=state))  # fmt: skip
    waiting = any(r.state in ("queued", "starting", "running") for r in rows)
    if waiting and not scheduler["running"] and not found["paused"]:
        say(_("nothing schedules the waiting items: 'trainwiz queue resume' starts the scheduler"))
    return 0
