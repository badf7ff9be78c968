"""CLI: `trainwiz data check` — find the records FastChat would choke on, before training."""

from __future__ import annotations

import argparse

from backend.data.check import DataReport, MaskSample, TokenStats, check_data
from backend.errors import BadInput
from backend.i18n import _
from backend.model.placeholders import resolve_placeholders
from backend.termsafe import terminal_safe
from tui.commands._args import bounded_int, path_arg
from tui.commands._common import add_json_flag, print_json

MAX_LENGTH_RANGE = (8, 1048576)  # what --max-length takes (and the MCP server's data_check)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("data", help=_("check FastChat conversation data"))
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help=_("roles, empty turns, ids; token lengths with --model"))
    check.add_argument(
        "file",
        metavar="FILE",
        type=path_arg,
        help=_("FastChat conversation JSON ('@sample' works)"),
    )
    check.add_argument(
        "--model",
        metavar="DIR",
        type=path_arg,
        help=_("model dir whose tokenizer measures lengths"),
    )
    check.add_argument(
        "--max-length",
        type=bounded_int(*MAX_LENGTH_RANGE),
        default=512,
        help=_("model_max_length (default 512, FastChat's)"),
    )
    check.add_argument(
        "--python",
        metavar="PATH",
        type=path_arg,
        help=_("training python for the tokenizer (default: this one)"),
    )
    check.add_argument(
        "--chat-template",
        default="auto",
        metavar="NAME",
        help=_("training.chat_template: auto (default), vicuna, model or a FastChat template name"),
    )
    add_json_flag(check)
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    report = data_report(
        args.file, args.model, args.max_length, python=args.python, chat_template=args.chat_template
    )
    if args.json:
        print_json(data_json(report))
    else:
        print_report(report)
    return 0 if report.ok else 1


def data_report(
    file: str,
    model: str | None,
    max_length: int = 512,
    *,
    python: str | None = None,
    chat_template: str = "auto",
) -> DataReport:
    """`trainwiz data check`'s report (and the MCP server's ``data_check``): placeholders such
    as ``@sample`` and ``@home`` resolved as the launch resolves them."""
    if max_length < 8:
        raise BadInput(_("--max-length must be at least 8"))
    path = resolve_placeholders(file, None)
    model_dir = resolve_placeholders(model, None) if model else None
    return check_data(path, model_dir, max_length, python=python, chat_template=chat_template)


def data_json(report: DataReport) -> dict[str, object]:
    """`trainwiz data check --json`: one builder for the CLI and the MCP server."""
    return {**report.model_dump(mode="json"), "errors": report.errors, "ok": report.ok}


def _length_fields(t: TokenStats) -> dict[str, object]:
    """The length statistics both token lines print (vicuna's and another template's)."""
    return {"mean": t.mean, "p50": t.p50, "p90": t.p90, "p99": t.p99, "max": t.max,
            "tokenizer_class": t.tokenizer_class}  # fmt: skip


def print_report(r: DataReport) -> None:
    print(_("data        {path}").format(path=r.path))
    print(
        _("records     {n_records} ({n_turns} turns)").format(
            n_records=r.n_records, n_turns=r.n_turns
        )
    )
    for issue in r.issues:
        print(f"{issue.severity}: {terminal_safe(issue.line())}")  # ids come from the data
    listed = len(r.issues)
    total = sum(r.counts.values())
    if total > listed:
        print(
            _("... {value} more issues; by kind: {counts}").format(
                value=total - listed, counts=r.counts
            )
        )
    t = r.tokens
    vicuna = t is None or t.chat_template == "vicuna"
    if t is not None and not vicuna:
        print(
            _("template    {template} ({reason})").format(
                template=t.chat_template, reason=t.chat_template_reason
            )
        )
        print(
            _(
                "tokens      mean {mean}, p50 {p50}, p90 {p90}, p99 {p99}, max {max} "
                "({tokenizer_class}, pad {pad})"
            ).format(**_length_fields(t), pad=terminal_safe(t.pad_token))
        )
    elif t is not None:
        print(
            _(
                "tokens      mean {mean}, p50 {p50}, p90 {p90}, p99 {p99}, max {max} "
                "({tokenizer_class}, vicuna_v1.1 template from {template_source})"
            ).format(**_length_fields(t), template_source=t.template_source)
        )
    if t is not None:
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
        if not vicuna:
            print_masks(t)
    elif r.tokens_unavailable:
        print(
            _("tokens      unavailable: {tokens_unavailable}").format(
                tokens_unavailable=r.tokens_unavailable
            )
        )
    mismatched = r.tokens.mismatched if r.tokens else 0
    if r.ok:
        print(_("ok"))
    elif t is not None and t.mostly_unmaskable:
        print(
            _(
                "{errors} record error(s); {unmaskable} of {checked} conversations unmaskable: "
                "more than half, the launch would refuse this data (check --chat-template)"
            ).format(errors=r.errors, unmaskable=t.unmaskable, checked=t.n + t.unmaskable)
        )
    elif not vicuna and t is not None:
        print(
            _("{errors} record error(s), {unmaskable} unmaskable").format(
                errors=r.errors, unmaskable=t.unmaskable
            )
        )
    else:
        print(
            _("{errors} record error(s), {mismatched} masked out").format(
                errors=r.errors, mismatched=mismatched
            )
        )


UNMASKABLE_SHOWN = 5  # unmaskable records named in the text output (--json names more)
SEGMENT_SHOWN = 600  # characters of one masked/trained run shown (--json has all of it)


def print_masks(t: TokenStats) -> None:
    """The template's unmaskable records and a few samples, trained text in «»."""
    if t.truncated_away:
        print(
            _(
                "no reply    {count} conversations have no reply within model_max_length "
                "(training skips them)"
            ).format(count=t.truncated_away)
        )
    if t.unmaskable:
        print(
            _(
                "unmaskable  {count} of {checked} conversations cannot be masked exactly "
                "(training skips them):"
            ).format(count=t.unmaskable, checked=t.n + t.unmaskable)
        )
        for rec in t.unmaskable_records[:UNMASKABLE_SHOWN]:
            ident = _(" (id {id})").format(id=rec.id) if rec.id is not None else ""
            line = _("  record {index}{ident}: {reason}")
            print(terminal_safe(line.format(index=rec.index, ident=ident, reason=rec.reason)))
        if t.unmaskable > UNMASKABLE_SHOWN:
            print(
                _("  ... and {count} more (--json)").format(count=t.unmaskable - UNMASKABLE_SHOWN)
            )
    for sample in t.samples:
        print_sample(sample)


def print_sample(sample: MaskSample) -> None:
    ident = _(" (id {id})").format(id=sample.id) if sample.id is not None else ""
    print(
        terminal_safe(
            _("sample      record {index}{ident}: «trained on», the rest masked").format(
                index=sample.index, ident=ident
            )
        )
    )
    text = "".join(
        f"«{shorten(s.text)}»" if s.trained else shorten(s.text) for s in sample.segments
    )
    for line in terminal_safe(text).splitlines():
        print(f"    {line}")


def shorten(text: str) -> str:
    """A long run cut in the middle, so that each sample's boundaries stay on one screen."""
    if len(text) <= SEGMENT_SHOWN:
        return text
    half = SEGMENT_SHOWN // 2
    cut = _("[... {count} characters ...]").format(count=len(text) - 2 * half)
    return text[:half] + cut + text[-half:]
