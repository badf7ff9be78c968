"""CLI: `trainwiz data check` — find the records FastChat would choke on, before training."""

from __future__ import annotations

import argparse

from backend.data.check import DataReport
from tui.commands._common import add_json_flag, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("data", help="check FastChat conversation data")
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="roles, empty turns, ids; token lengths with --model")
    check.add_argument("file", metavar="FILE", help="FastChat conversation JSON ('@sample' works)")
    check.add_argument("--model", metavar="DIR", help="model dir whose tokenizer measures lengths")
    check.add_argument(
        "--max-length", type=int, default=512, help="model_max_length (default 512, FastChat's)"
    )
    check.add_argument("--python", help="training python for the tokenizer (default: this one)")
    add_json_flag(check)
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    from backend.data.check import check_data
    from backend.errors import BadInput
    from backend.model.placeholders import resolve_placeholders

    if args.max_length < 8:
        raise BadInput("--max-length must be at least 8")
    path = resolve_placeholders(args.file, None)
    model = resolve_placeholders(args.model, None) if args.model else None
    report = check_data(path, model, args.max_length, python=args.python)
    if args.json:
        print_json({**report.model_dump(mode="json"), "errors": report.errors, "ok": report.ok})
    else:
        print_report(report)
    return 0 if report.ok else 1


def print_report(r: DataReport) -> None:
    print(f"data        {r.path}")
    print(f"records     {r.n_records} ({r.n_turns} turns)")
    for issue in r.issues:
        print(f"{issue.severity}: {issue.line()}")
    listed = len(r.issues)
    total = sum(r.counts.values())
    if total > listed:
        print(f"... {total - listed} more issues; by kind: {r.counts}")
    t = r.tokens
    if t is not None:
        print(
            f"tokens      mean {t.mean}, p50 {t.p50}, p90 {t.p90}, p99 {t.p99}, max {t.max} "
            f"({t.tokenizer_class}, vicuna_v1.1 template from {t.template_source})"
        )
        print(
            f"truncated   {t.truncated} of {t.n} ({t.truncated_share:.1%}) longer than "
            f"model_max_length {t.model_max_length}"
        )
        if t.mismatched:
            print(
                f"mismatch    {t.mismatched} records FastChat would mask out entirely "
                f"(tokenization mismatch), e.g. {t.mismatched_indexes[:5]}"
            )
    elif r.tokens_unavailable:
        print(f"tokens      unavailable: {r.tokens_unavailable}")
    mismatched = r.tokens.mismatched if r.tokens else 0
    print("ok" if r.ok else f"{r.errors} record error(s), {mismatched} masked out")
