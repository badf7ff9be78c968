"""CLI: `trainwiz data check` — find the records FastChat would choke on, before training."""

from __future__ import annotations

import argparse

from backend.data.check import DataReport, check_data
from backend.errors import BadInput
from backend.i18n import _
from backend.model.placeholders import resolve_placeholders
from tui.commands._args import bounded_int
from tui.commands._common import add_json_flag, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("data", help=_("check FastChat conversation data"))
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help=_("roles, empty turns, ids; token lengths with --model"))
    check.add_argument(
        "file", metavar="FILE", help=_("FastChat conversation JSON ('@sample' works)")
    )
    check.add_argument(
        "--model", metavar="DIR", help=_("model dir whose tokenizer measures lengths")
    )
    check.add_argument(
        "--max-length",
        type=bounded_int(8, 1048576),
        default=512,
        help=_("model_max_length (default 512, FastChat's)"),
    )
    check.add_argument("--python", help=_("training python for the tokenizer (default: this one)"))
    add_json_flag(check)
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    if args.max_length < 8:
        raise BadInput(_("--max-length must be at least 8"))
    path = resolve_placeholders(args.file, None)
    model = resolve_placeholders(args.model, None) if args.model else None
    report = check_data(path, model, args.max_length, python=args.python)
    if args.json:
        print_json({**report.model_dump(mode="json"), "errors": report.errors, "ok": report.ok})
    else:
        print_report(report)
    return 0 if report.ok else 1


def print_report(r: DataReport) -> None:
    print(_("data        {path}").format(path=r.path))
    print(
        _("records     {n_records} ({n_turns} turns)").format(
            n_records=r.n_records, n_turns=r.n_turns
        )
    )
    for issue in r.issues:
        print(f"{issue.severity}: {issue.line()}")
    listed = len(r.issues)
    total = sum(r.counts.values())
    if total > listed:
        print(
            _("... {value} more issues; by kind: {counts}").format(
                value=total - listed, counts=r.counts
            )
        )
    t = r.tokens
    if t is not None:
        print(
            _(
                "tokens      mean {mean}, p50 {p50}, p90 {p90}, p99 {p99}, max {max} "
                "({tokenizer_class}, vicuna_v1.1 template from {template_source})"
            ).format(
                mean=t.mean,
                p50=t.p50,
                p90=t.p90,
                p99=t.p99,
                max=t.max,
                tokenizer_class=t.tokenizer_class,
                template_source=t.template_source,
            )
        )
        print(
            _(
                "truncated   {truncated} of {n} ({truncated_share:.1%}) longer than "
                "model_max_length {model_max_length}"
            ).format(
                truncated=t.truncated,
                n=t.n,
                truncated_share=t.truncated_share,
                model_max_length=t.model_max_length,
            )
        )
        if t.mismatched:
            print(
                _(
                    "mismatch    {mismatched} records FastChat would mask out entirely (tokenization "
                    "mismatch), e.g. {value}"
                ).format(mismatched=t.mismatched, value=t.mismatched_indexes[:5])
            )
    elif r.tokens_unavailable:
        print(
            _("tokens      unavailable: {tokens_unavailable}").format(
                tokens_unavailable=r.tokens_unavailable
            )
        )
    mismatched = r.tokens.mismatched if r.tokens else 0
    print(
        _("ok")
        if r.ok
        else _("{errors} record error(s), {mismatched} masked out").format(
            errors=r.errors, mismatched=mismatched
        )
    )
