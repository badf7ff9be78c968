"""CLI: `trainwiz sweep PRESET --set path=v1,v2 ...` and `trainwiz sweep show [ID]`.

A sweep writes one preset per variant under ``TRAINWIZ_HOME/sweeps/<id>/``, validates and
plans each before anything is queued (``backend.queue.sweep``), then queues them; ``show``
ranks the variants by the sweep's metric in the compare table's format (``runs compare``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from backend.errors import BadInput
from backend.i18n import _
from backend.preset import load_preset
from backend.queue import db
from backend.queue.ops import parse_gpus
from backend.queue.ranking import RankedVariant, SweepRanking, rank_sweep
from backend.queue.sweep import create_sweep, find_sweep, sweep_ids
from backend.results.compare import RunFigures
from tui.commands._args import add_ignore_plan_flag, bounded_int
from tui.commands._common import add_json_flag, print_json, say, to_jsonable
from tui.commands._risks import confirm_risks
from tui.commands.compare import figure_rows, print_table
from tui.commands.queue import add_gpu_flags, add_max_parallel


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "sweep",
        help=_("queue a hyperparameter sweep; 'sweep show ID' ranks its variants"),
        description=_(
            "Write one preset per combination of the --set values, validate and plan each, "
            "then queue them. 'trainwiz sweep show [ID]' ranks a sweep's variants by its "
            "metric (no ID: list the sweeps)."
        ),
    )
    parser.add_argument("preset", metavar="PRESET|show",
                        help=_("a shipped preset name or a YAML path; or 'show'"))  # fmt: skip
    parser.add_argument("sweep_id", nargs="?", metavar="ID", help=_("with 'show': the sweep"))
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=V1,V2",
                        help=_("a preset field and its values, e.g. training.learning_rate=1e-5,2e-5"))  # fmt: skip
    parser.add_argument("--samples", type=bounded_int(1, 10_000), metavar="N",
                        help=_("queue N variants drawn from the grid (default: all)"))  # fmt: skip
    parser.add_argument("--seed", type=bounded_int(0, 2**31), default=0,
                        help=_("the draw of --samples (default 0)"))  # fmt: skip
    parser.add_argument("--metric", choices=("eval_loss", "loss"),
                        help=_("rank by this (default: eval_loss when the preset evaluates)"))  # fmt: skip
    parser.add_argument("--by", choices=("best", "final"), default="best",
                        help=_("the run's lowest value of the metric, or its last (default best)"))  # fmt: skip
    add_max_parallel(parser)
    add_gpu_flags(parser)
    add_ignore_plan_flag(parser)
    parser.add_argument("--yes", "-y", action="store_true",
                        help=_("accept dangerous container options (privileged, host mounts, ...)"))  # fmt: skip
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.preset == "show":
        return run_show(args)
    if args.sweep_id is not None:
        raise BadInput(_("sweep: one PRESET (or 'sweep show ID'); got {extra} too").format(
            extra=args.sweep_id[:40]))  # fmt: skip
    confirm_risks(load_preset(args.preset), args.yes)
    result = create_sweep(
        args.preset, args.sets, samples=args.samples, seed=args.seed, metric=args.metric,
        rank_by=args.by, max_parallel=args.max_parallel, gpus=parse_gpus(args.gpus),
        share=args.share, ignore_plan=args.ignore_plan,
    )  # fmt: skip
    if args.json:
        print_json(result)
        return 0
    print(result.id)
    for label, item_id, file in result.queued:
        say(_("trainwiz: queued item {id}: {label} ({file})").format(id=item_id, label=label,
                                                                     file=file), stderr=True)  # fmt: skip
    for label, why in result.refused:
        say(_("trainwiz: refused by the plan: {label}: {why}").format(label=label, why=why),
            stderr=True)  # fmt: skip
    say(_("trainwiz: sweep {id}: {count} variant(s) queued, ranked by {by} {metric}; see "
          "'trainwiz sweep show {id}'").format(id=result.id, count=len(result.queued),
                                                by=result.rank_by, metric=result.metric),
        stderr=True)  # fmt: skip
    if result.paused:
        say(_("trainwiz: the queue is paused: 'trainwiz queue resume' starts it"), stderr=True)
    return 0


def show_json(ranking: SweepRanking) -> dict[str, Any]:
    """`sweep show --json`: the sweep and its variants in rank order (no loss curves)."""

    def figures(fig: RunFigures | None) -> dict[str, Any] | None:
        if fig is None:
            return None
        data: dict[str, Any] = to_jsonable(fig)
        data.pop("loss", None)
        data.pop("eval_loss", None)
        return data

    def variant(v: RankedVariant) -> dict[str, Any]:
        item = v.item
        return {"rank": v.rank, "label": item.label, "values": item.overrides,
                "value": v.value, "item": item.id, "state": item.state, "run_id": item.run_id,
                "message": item.message, "diagnosis_category": item.diagnosis_category,
                "diagnosis_title": item.diagnosis_title, "preset_file": item.preset_file,
                "figures": figures(v.figures)}  # fmt: skip

    return {"id": ranking.id, "base": ranking.base, "metric": ranking.metric,
            "rank_by": ranking.rank_by, "dir": ranking.dir, "done": ranking.done,
            "notified_at": ranking.notified_at, "states": ranking.counts(),
            "variants": [variant(v) for v in ranking.variants]}  # fmt: skip


def run_show(args: argparse.Namespace) -> int:
    if args.sweep_id is None:
        known = sweep_ids()
        if args.json:
            print_json({"sweeps": known})
        else:
            for sweep_id in known:
                say(sweep_id)
            if not known:
                say(_("no sweeps yet: 'trainwiz sweep PRESET --set path=v1,v2'"))
        return 0
    conn = db.connect()
    try:
        ranking = rank_sweep(conn, find_sweep(args.sweep_id))
    finally:
        conn.close()
    if args.json:
        print_json(show_json(ranking))
        return 0
    print_ranking(ranking)
    return 0


def print_ranking(ranking: SweepRanking) -> None:
    variants = ranking.variants
    counts = ", ".join(f"{n} {state}" for state, n in sorted(ranking.counts().items()))
    say(_("sweep {id} of {base}: ranked by {by} {metric} ({counts})").format(
        id=ranking.id, base=ranking.base, by=ranking.rank_by, metric=ranking.metric,
        counts=counts))  # fmt: skip
    if not variants:
        return
    ids = [f"#{v.rank}" if v.rank else f"q{v.item.id}" for v in variants]
    placeholder = [v.figures or RunFigures(v.item.run_id or "-", v.item.preset_name, v.item.state)
                   for v in variants]  # fmt: skip
    rows: list[tuple[str, list[str]]] = [
        (_("variant"), [v.item.label or "" for v in variants]),
        (f"{ranking.rank_by} {ranking.metric}",
         ["-" if v.value is None else f"{v.value:.4f}" for v in variants]),
        (_("queue item"), [f"{v.item.id} ({v.item.state})" for v in variants]),
        (_("run"), [v.item.run_id or "-" for v in variants]),
    ]  # fmt: skip
    rows += figure_rows(placeholder)
    failed = [v for v in variants if v.item.state == "failed"]
    if failed:
        rows.append((_("diagnosis"), [
            f"{v.item.diagnosis_category}: {v.item.diagnosis_title}" if v.item.diagnosis_category
            else (v.item.message[:60] if v.item.state == "failed" else "") for v in variants
        ]))  # fmt: skip
    split = len(rows)
    paths = sorted({p for v in variants for p in (v.item.overrides or {})})
    for path in paths:
        rows.append((path, [(v.item.overrides or {}).get(path, "-") for v in variants]))
    print_table(ids, rows, split, _("swept preset fields:"))
    if ranking.notified_at is None and ranking.done:
        print(_("trainwiz: the sweep ended; its notification is sent by the scheduler"),
              file=sys.stderr)  # fmt: skip
