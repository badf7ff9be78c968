"""CLI: `trainwiz runs compare A B [C…] [--json]`: runs side by side (backend.results.compare).

The preset fields and values come from each run's preset.yaml, the ids from directory names:
each cell is made terminal-safe before its width is taken, and every line printed with ``say``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from backend.i18n import _
from backend.runs import find_run
from backend.runs.summary import duration
from backend.termsafe import terminal_safe
from tui.commands._common import add_json_flag, pad_cells, print_json, say

if TYPE_CHECKING:  # the compare code loads when runs are compared, not for `--help`
    from backend.results.compare import Comparison, RunFigures


def register_compare(runs: argparse.ArgumentParser) -> None:
    """`compare` under `runs` (``trainwiz runs`` alone still lists the runs)."""
    sub = runs.add_subparsers(dest="runs_command", metavar="compare")
    parser = sub.add_parser(
        "compare",
        help=_("compare runs: loss, eval loss, real tok/s, wall time, GPU-hours, preset changes"),
    )
    parser.add_argument(
        "runs", nargs="+", metavar="RUN", help=_("two or more runs (id, prefix, 'last', dir)")
    )
    add_json_flag(parser)
    parser.set_defaults(func=run_compare)


def _num(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _value(value: Any) -> str:
    return "-" if value is None else terminal_safe(str(value))


def compared(refs: list[str]) -> Comparison:
    """The runs side by side: `trainwiz runs compare` (its ``--json`` is this, as JSON) and the
    MCP server's ``compare``."""
    from backend.results.compare import compare_runs  # deferred: `--help` skips the compare code

    return compare_runs([find_run(ref) for ref in refs])


def figure_rows(runs: list[RunFigures]) -> list[tuple[str, list[str]]]:
    """The figure rows of the compare table, one value per run (``runs compare`` and
    ``sweep show`` print the same rows)."""
    return [
        (_("state"), [r.state for r in runs]),
        (_("steps"), [f"{r.steps}/{r.max_steps}" if r.max_steps else str(r.steps) for r in runs]),
        (_("final loss"), [_num(r.final_loss) for r in runs]),
        (
            _("min loss"),
            [
                f"{_num(r.min_loss)} @{r.min_loss_step}" if r.min_loss is not None else "-"
                for r in runs
            ],
        ),
        (_("mean loss"), [_num(r.mean_loss) for r in runs]),
        (_("final eval loss"), [_num(r.final_eval_loss) for r in runs]),
        (_("min eval loss"), [_num(r.min_eval_loss) for r in runs]),
        (_("real tok/s"), [_num(r.real_tokens_per_s, ",.0f") for r in runs]),
        (_("wall time"), [duration(r.wall_s) for r in runs]),
        (
            _("GPU-hours"),
            [_num(r.gpu_hours, ".2f") + (f" ({r.gpus} GPU)" if r.gpus else " (CPU)") for r in runs],
        ),
    ]


def print_table(
    ids: list[str], rows: list[tuple[str, list[str]]], split_at: int | None, split_title: str
) -> None:
    """The compare table: a label column, one column per run headed by ``ids``; a line
    ``split_title`` before row ``split_at`` (the preset fields). Cells are terminal-safe."""
    ids = [terminal_safe(i) for i in ids]
    rows = [(terminal_safe(label), [terminal_safe(v) for v in values]) for label, values in rows]
    label_w = max(len(label) for label, _v in rows)
    widths = [max(len(ids[i]), *(len(values[i]) for _l, values in rows)) for i in range(len(ids))]
    say(pad_cells("", label_w) + "  " + "  ".join(
        pad_cells(run_id, w) for run_id, w in zip(ids, widths, strict=True)
    ))  # fmt: skip
    for number, (label, values) in enumerate(rows):
        if number == split_at:
            say(split_title)
        cells = "  ".join(pad_cells(v, w) for v, w in zip(values, widths, strict=True))
        say(pad_cells(label, label_w) + "  " + cells)


def run_compare(args: argparse.Namespace) -> int:
    found = compared(args.runs)
    if args.json:
        print_json(found)
        return 0
    rows = figure_rows(found.runs)
    figures = len(rows)
    for path, values in found.differences.items():
        rows.append((path, [_value(v) for v in values]))
    print_table([r.run_id for r in found.runs], rows, figures, _("preset fields that differ:"))
    if not found.differences:
        say(_("the presets are the same"))
    return 0
