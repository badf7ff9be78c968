"""CLI: `trainwiz model fetch|validate|make-tiny` — get a model and check it without loading it."""

from __future__ import annotations

import argparse
import builtins
import sys
from pathlib import Path

from backend.errors import BadInput
from backend.i18n import _
from backend.model.hub import FetchProgress
from backend.model.validate import ModelReport, validate_model_dir
from backend.preset.loader import SHIPPED_DIR, load_preset
from backend.preset.schema import ModelSource, TinyModelSpec
from backend.termsafe import terminal_safe
from backend.tokens import allow_hosts
from backend.units import clock, human
from tui.commands._args import model_dir_arg
from tui.commands._common import add_json_flag, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("model", help=_("fetch a model, validate it, make the tiny one"))
    sub = parser.add_subparsers(dest="model_command", metavar="ACTION", required=True)

    fetch = sub.add_parser(
        "fetch", help=_("download/clone/make the model of a preset, or a Hub repo")
    )
    fetch.add_argument("target", metavar="PRESET|REPO", help=_("a preset name/path or owner/name"))
    fetch.add_argument(
        "--dir", type=model_dir_arg, help=_("model directory (default: the preset's model.dir)")
    )
    fetch.add_argument("--endpoint", help=_("Hub endpoint or mirror, e.g. https://hf-mirror.com"))
    fetch.add_argument("--revision", help=_("branch, tag or commit"))
    fetch.add_argument("--token-env", help=_("env var holding the Hub token (default HF_TOKEN)"))
    fetch.add_argument(
        "--token-host",
        action="append",
        default=[],
        metavar="HOST",
        help=_("also send the token to this https host (like TRAINWIZ_TOKEN_HOSTS)"),
    )
    add_json_flag(fetch)
    fetch.set_defaults(func=run_fetch)

    validate = sub.add_parser("validate", help=_("check a model dir without loading its weights"))
    validate.add_argument("dir", metavar="DIR")
    add_json_flag(validate)
    validate.set_defaults(func=run_validate)

    tiny = sub.add_parser(
        "make-tiny", help=_("create the tiny random Llama of a preset (or at DIR)")
    )
    tiny.add_argument("target", metavar="PRESET|DIR", nargs="?", default="tiny-cpu")
    tiny.add_argument(
        "--force",
        action="store_true",
        help=_("remake even if a valid one exists; delete other files in the folder"),
    )
    add_json_flag(tiny)
    tiny.set_defaults(func=run_make_tiny)


def _source_for(args: argparse.Namespace) -> ModelSource:
    """A preset's model section, or an ad-hoc Hub source for ``owner/name``."""
    from backend.model.fetch import default_dir  # deferred: `--help` skips the model clients

    target: str = args.target
    looks_like_file = target.endswith((".yaml", ".yml")) or Path(target).is_file()
    if looks_like_file or "/" not in target:
        from backend.mirrors import apply_mirrors  # deferred: http/ssl mirrors, only to download

        source = apply_mirrors(load_preset(target)).model  # mirrors: the probed endpoint
    else:
        source = ModelSource(source="hf", repo=target, dir=str(default_dir(target)))
    updates = {
        k: v
        for k, v in {
            "endpoint": args.endpoint,
            "revision": args.revision,
            "token_env": args.token_env,
        }.items()
        if v
    }
    return source.model_copy(update=updates) if updates else source


def _print_progress(p: FetchProgress) -> None:
    line = (
        f"\r{p.files_done}/{p.files_total} files  {human(p.bytes)}/{human(p.total)}  "
        f"{human(p.speed)}/s  ETA {clock(p.eta)}  {p.file[-40:]}"
    )
    print(line.ljust(100), end="", file=sys.stderr, flush=True)


def run_fetch(args: argparse.Namespace) -> int:
    from backend.model.fetch import ensure_model  # deferred: `--help` skips the model clients

    allow_hosts(args.token_host)
    source = _source_for(args)
    tty = sys.stderr.isatty() and not args.json
    result = ensure_model(source, dir=args.dir, progress=_print_progress if tty else None)
    if tty:
        print(file=sys.stderr)
    if args.json:
        print_json(
            {
                "dir": result.dir,
                "source": result.source,
                "action": result.action,
                "commit": result.fetch.commit if result.fetch else None,
                "files": result.fetch.files if result.fetch else [],
                "skipped": result.fetch.skipped if result.fetch else [],
                "retries": result.fetch.retries if result.fetch else 0,
                "report": result.report,
                "ok": result.report.ok,
            }
        )
    else:
        print(f"{result.action}: {result.dir}")
        if result.fetch and result.fetch.skipped:
            print(
                _("skipped duplicate weight formats: {items}").format(
                    items=", ".join(result.fetch.skipped)
                )
            )
        _print_report(result.report)
    return 0 if result.report.ok else 1


def _print_report(r: ModelReport) -> None:
    """Values come from the model's own files (config.json, shard names): printed terminal-safe."""

    def print(text: str = "") -> None:  # shadows on purpose: the one safe printer
        builtins.print(terminal_safe(text))

    c = r.config
    print(_("model       {path}").format(path=r.path))
    print(
        _("arch        {architecture} ({model_type})").format(
            architecture=c.architecture, model_type=c.model_type
        )
    )
    print(
        _(
            "shape       hidden {hidden_size}, layers {num_hidden_layers}, heads "
            "{num_attention_heads}, kv heads {num_key_value_heads}, ffn {intermediate_size}"
        ).format(
            hidden_size=c.hidden_size,
            num_hidden_layers=c.num_hidden_layers,
            num_attention_heads=c.num_attention_heads,
            num_key_value_heads=c.num_key_value_heads,
            intermediate_size=c.intermediate_size,
        )
    )
    print(
        _("vocab       {vocab_size}, max positions {max_position_embeddings}").format(
            vocab_size=c.vocab_size, max_position_embeddings=c.max_position_embeddings
        )
    )
    n = f"{r.n_params:,}" if r.n_params is not None else "unknown"
    implied = f"{r.n_params_from_config:,}" if r.n_params_from_config else "?"
    print(
        _("parameters  {n} ({n_params_source}); config implies {implied}").format(
            n=n, n_params_source=r.n_params_source, implied=implied
        )
    )
    print(
        _("dtype       {dtype} ({weight_format}, {count} files, {human})").format(
            dtype=r.dtype,
            weight_format=r.weight_format,
            count=len(r.shards),
            human=human(r.weights_bytes),
        )
    )
    print(_("tokenizer   {value}").format(value=", ".join(r.tokenizer_files) or "none"))
    for w in r.warnings:
        print(_("warning: {w}").format(w=w))
    for p in r.problems:
        print(_("problem: {p}").format(p=p))
    print(_("ok") if r.ok else _("{count} problem(s)").format(count=len(r.problems)))


def _named_dir(value: str, what: str) -> str:
    """An empty DIR (an unset shell variable) would mean the current folder: refused."""
    if not value.strip():
        raise BadInput(
            _("{what}: empty: name the model folder (use '.' for this folder)").format(what=what)
        )
    return value


def run_validate(args: argparse.Namespace) -> int:
    report = validate_report(args.dir)
    if args.json:
        print_json(validate_json(report))
    else:
        _print_report(report)
    return 0 if report.ok else 1


def validate_report(model_dir: str) -> ModelReport:
    """`trainwiz model validate DIR`'s report (and the MCP server's ``model_validate``)."""
    return validate_model_dir(_named_dir(model_dir, "DIR"))


def validate_json(report: ModelReport) -> dict[str, object]:
    """`trainwiz model validate --json`: one builder for the CLI and the MCP server."""
    return {**report.model_dump(mode="json"), "ok": report.ok}


def run_make_tiny(args: argparse.Namespace) -> int:
    from backend.model.fetch import model_dir  # deferred: `--help` skips the model clients
    from backend.model.tiny import make_tiny  # deferred: `--help` skips the tiny-model maker

    target: str = _named_dir(args.target, "PRESET|DIR")
    is_preset = target.endswith((".yaml", ".yml")) or (SHIPPED_DIR / f"{target}.yaml").is_file()
    if is_preset:
        source = load_preset(target).model
        if source.source != "tiny":
            raise BadInput(
                _("preset '{target}': model.source is '{source}', not 'tiny'").format(
                    target=target, source=source.source
                )
            )
        result = make_tiny(model_dir(source), source.tiny, force=args.force)
    else:
        result = make_tiny(Path(target), TinyModelSpec(), force=args.force)
    if args.json:
        print_json({"dir": result.dir, "created": result.created, "report": result.report})
    else:
        print(f"{'made' if result.created else 'already there'}: {result.dir}")
        _print_report(result.report)
    return 0
