"""CLI: `trainwiz tune PRESET [--probe]`: the configuration with the most real tokens/s that fits
the GPU and the host, predicted (and with --probe, measured here), written as a preset diff."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from backend.errors import BadInput
from backend.i18n import _
from backend.preset import load_preset
from tui.commands._common import add_json_flag, print_json


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "tune",
        help=_("the fastest configuration on real tokens that fits GPU and host RAM"),
        description=_(
            "Search batch, recompute, offload, packing, Liger and fused AdamW for the "
            "most real (non-pad) tokens/s predicted to fit the GPU and the host's RAM, and the "
            "training methods (LoRA, QLoRA, DeepSpeed ZeRO): one of them when no full fine-tune "
            "fits, listed beside the answer otherwise; with "
            "--probe, run the top candidates a few steps each here and keep the measured fastest."
        ),
    )
    parser.add_argument("preset", metavar="PRESET", help=_("a shipped preset name or a YAML path"))
    parser.add_argument(
        "--gpu",
        metavar="NAME",
        help=_(
            "plan for this GPU (default: this machine's; a CPU preset with --probe is ranked "
            "for it and measured on the CPU)"
        ),
    )
    parser.add_argument("--config", metavar="PATH", help=_("the model's config.json (its shape)"))
    parser.add_argument("--free-batch", action="store_true", help=_("may change the global batch"))
    parser.add_argument("--probe", action="store_true", help=_("measure the top candidates here"))
    parser.add_argument("--top", type=int, default=3, help=_("candidates to probe (default 3)"))
    parser.add_argument("--steps", type=int, default=12, help=_("steps per probe (default 12)"))
    parser.add_argument(
        "--write",
        metavar="PATH",
        help=_("write the tuned preset here (default: PRESET-tuned.yaml)"),
    )
    from tui.commands.plan import add_real_data_flags

    add_real_data_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from backend.planner.hostram import host_ram_for
    from backend.planner.realdata import default_dist, dist_from_report
    from backend.planner.report import resolve_inputs, tune_lines
    from backend.planner.tune import tune
    from backend.preset.loader import preset_to_yaml

    preset = load_preset(args.preset)
    planned = preset
    if preset.launch.device == "cpu" and args.probe and args.gpu:
        # a CPU preset has no GPU plan: rank for the named GPU, measure on this CPU
        planned = preset.model_copy(deep=True)
        planned.launch.device = "cuda"
    gpu, shape, why = resolve_inputs(planned, args.gpu, args.config)
    if gpu is None or shape is None:
        raise BadInput(_("tune: {why}").format(why=why))
    if args.top < 1 or args.steps < 2:
        raise BadInput(_("--top must be >= 1 and --steps >= 2"))
    dist = dist_from_report(args.lengths) if args.lengths else default_dist()
    host_ram = host_ram_for(args.host_ram, args.gpu)
    result = tune(preset, gpu, shape, free_batch=args.free_batch, dist=dist, host_ram=host_ram)
    before_yaml = preset_to_yaml(preset)
    lines = tune_lines(result, before_yaml, preset_to_yaml(result.preset))
    winner_preset = result.preset
    probe_rows = []
    winner = None
    if args.probe:
        from backend.planner.method_search import is_full_fsdp, search_methods
        from backend.planner.probe import probe, probe_methods

        say = lambda msg: print(f"trainwiz: {msg}", file=sys.stderr, flush=True)  # noqa: E731
        if is_full_fsdp(result.preset):
            measured = probe(preset, result, top=args.top, steps=args.steps, progress=say)
        else:  # tune's answer (or the preset) is LoRA/QLoRA/ZeRO: probe the methods' ranking
            ranked, _notes = search_methods(preset, gpu, shape, dist=dist, host_ram=host_ram)
            if is_full_fsdp(preset):
                ranked = [c for c in ranked if c.changes]
            measured = probe_methods(preset, ranked, top=args.top, steps=args.steps, progress=say)
        lines.append(_("probe (measured here; real tokens/s = median after the warm-up steps):"))
        for r in measured.rows:
            probe_rows.append({k: v for k, v in vars(r).items() if k != "preset"})
            if r.skipped:
                lines.append(
                    "  "
                    + _("{label}: predicted {predicted} real tokens/s; skipped: {why}").format(
                        label=r.label, predicted=f"{r.predicted_real_tokens_per_s:,.0f}",
                        why=r.skipped)
                )  # fmt: skip
                continue
            got = f"{r.measured_real_tokens_per_s:,.0f}" if r.measured_real_tokens_per_s else "-"
            lines.append(
                "  "
                + _(
                    "{label}: predicted {predicted}, measured {measured} real tokens/s; peak "
                    "{peak} GiB (pred {predicted_peak}); startup {startup} s; {state} (run {run})"
                ).format(
                    label=r.label,
                    predicted=f"{r.predicted_real_tokens_per_s:,.0f}",
                    measured=got,
                    peak=r.measured_peak_gib,
                    predicted_peak=r.predicted_peak_gib,
                    startup=f"{r.startup_s or 0:.0f}",
                    state=r.state,
                    run=r.run_id,
                )
            )
        lines += [f"  note: {n}" for n in measured.notes]
        if measured.winner is not None:
            winner_preset = measured.winner.preset
            winner = measured.winner.label
            lines.append(f"winner (measured): {measured.winner.label}")
    target = Path(args.write) if args.write else _default_target(args.preset)
    after_yaml = preset_to_yaml(winner_preset)
    target.write_text(after_yaml, encoding="utf-8")
    diff = list(
        difflib.unified_diff(
            before_yaml.splitlines(), after_yaml.splitlines(), "preset", str(target), lineterm=""
        )
    )
    if args.json:
        methods = [c.as_dict() for c in result.methods]  # LoRA/QLoRA/ZeRO alternatives
        print_json(
            {
                "written": str(target),
                "diff": diff,
                "probe": probe_rows,
                "winner": winner,
                "methods": methods,
            }
        )
    else:
        print("\n".join(lines if not args.probe else [*lines, *diff]))
        print(
            _("trainwiz: tuned preset written to {target}").format(target=target), file=sys.stderr
        )
    return 0


def _default_target(ref: str) -> Path:
    path = Path(ref)
    if path.suffix in (".yaml", ".yml"):
        return path.with_name(path.stem + "-tuned.yaml")
    return Path(f"{ref}-tuned.yaml")
