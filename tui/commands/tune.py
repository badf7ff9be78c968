"""CLI: `trainwiz tune PRESET [--probe]`: the configuration with the most real tokens/s that fits
the GPU and the host, predicted (and with --probe, measured here), written as a preset diff."""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from backend.errors import BadInput
from backend.i18n import _
from backend.planner import gpu as planner_gpu
from backend.planner.hostram import host_ram_for
from backend.planner.method_search import is_full_fsdp, search_methods
from backend.planner.realdata import default_dist, dist_from_report
from backend.planner.report import resolve_inputs, tune_lines
from backend.planner.rowsearch import batch_line
from backend.planner.tune import COMPILE_BUDGET_S, tune
from backend.preset import load_preset
from backend.preset.loader import preset_to_yaml
from backend.redact import preset_secrets
from tui.commands._args import bounded_float, bounded_int, path_arg
from tui.commands._common import add_json_flag, print_json
from tui.commands.plan import add_real_data_flags

# What --top, --steps and --compile-budget take (the MCP server's ``tune`` tool takes the same).
TOP_RANGE = (1, 64)
STEPS_RANGE = (1, 100000)
COMPILE_BUDGET_RANGE = (0.0, 86400.0)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "tune",
        help=_("the fastest configuration on real tokens that fits GPU and host RAM"),
        description=_(
            "Search batch, recompute, offload, packing, Liger and fused AdamW for the "
            "most real (non-pad) tokens/s predicted to fit the GPU and the host's RAM, and the "
            "training methods (LoRA, QLoRA, DeepSpeed ZeRO): one of them when no full fine-tune "
            "fits, listed beside the answer otherwise. On a machine with the preset's GPU the top "
            "candidates run a few steps each here and the measured fastest wins (--no-probe: "
            "predict only); each measurement is recorded for the next prediction."
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
    parser.add_argument(
        "--config", metavar="PATH", type=path_arg, help=_("the model's config.json (its shape)")
    )
    parser.add_argument("--free-batch", action="store_true", help=_("may change the global batch"))
    parser.add_argument(
        "--probe",
        action="store_true",
        help=_("measure the top candidates here even where the GPU differs (e.g. a CPU preset)"),
    )
    parser.add_argument(
        "--no-probe", action="store_true", help=_("predict only, even on the preset's GPU")
    )
    parser.add_argument(
        "--compile-budget",
        type=bounded_float(*COMPILE_BUDGET_RANGE),
        default=None,
        metavar="S",
        help=_("seconds of compile allowed before the first step (default 240)"),
    )
    parser.add_argument(
        "--top", type=bounded_int(*TOP_RANGE), default=3, help=_("candidates to probe (default 3)")
    )
    parser.add_argument(
        "--steps",
        type=bounded_int(*STEPS_RANGE),
        default=12,
        help=_("steps per probe (default 12)"),
    )
    parser.add_argument(
        "--write",
        metavar="PATH",
        type=path_arg,
        help=_("write the tuned preset here (default: PRESET-tuned.yaml)"),
    )
    parser.add_argument(
        "--force", action="store_true", help=_("overwrite the --write file if it exists")
    )

    add_real_data_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run)


@dataclass
class TuneOptions:
    """`trainwiz tune`'s options (its argparse names): the CLI and the MCP server fill them."""

    preset: str
    gpu: str | None = None
    config: str | None = None
    free_batch: bool = False
    probe: bool = False
    no_probe: bool = False
    compile_budget: float | None = None
    top: int = 3
    steps: int = 12
    write: str | None = None
    force: bool = False
    lengths: str | None = None
    host_ram: float | None = None


@dataclass
class TuneOutcome:
    """What a tune found and wrote: the human lines, the diff and the ``--json`` payload."""

    lines: list[str]
    diff: list[str]
    payload: dict[str, Any]
    target: Path
    probed: bool
    secrets: list[str]  # the preset's, for a result shown elsewhere (the diff quotes its values)


def run(args: argparse.Namespace) -> int:
    opts = TuneOptions(**{f.name: getattr(args, f.name) for f in fields(TuneOptions)})
    outcome = tune_preset(opts)
    if args.json:
        print_json(outcome.payload)
    else:
        lines = outcome.lines
        print("\n".join(lines if not outcome.probed else [*lines, *outcome.diff]))
        print(
            _("trainwiz: tuned preset written to {target}").format(target=outcome.target),
            file=sys.stderr,
        )
    return 0


def tune_preset(opts: TuneOptions) -> TuneOutcome:
    """Search, probe when asked (or where the preset's GPU is), write the tuned preset: the one
    path of `trainwiz tune` and the MCP server's ``tune`` tool."""
    preset = load_preset(opts.preset)
    target = Path(opts.write) if opts.write else _default_target(opts.preset)
    if (target.exists() or target.is_symlink()) and not opts.force:
        raise BadInput(  # before any work: never a user's file replaced without being asked
            _("{target} exists: pass --force to overwrite it, or --write another path").format(
                target=target
            )
        )
    planned = preset
    if preset.launch.device == "cpu" and opts.probe and opts.gpu:
        # a CPU preset has no GPU plan: rank for the named GPU, measure on this CPU
        planned = preset.model_copy(deep=True)
        planned.launch.device = "cuda"
    gpu, shape, why = resolve_inputs(planned, opts.gpu, opts.config)
    if gpu is None or shape is None:
        raise BadInput(_("tune: {why}").format(why=why))
    if opts.top < 1 or opts.steps < 2:
        raise BadInput(_("--top must be >= 1 and --steps >= 2"))
    if opts.probe and opts.no_probe:
        raise BadInput(_("--probe and --no-probe: choose one"))

    budget = COMPILE_BUDGET_S if opts.compile_budget is None else opts.compile_budget
    if budget <= 0:
        raise BadInput(_("--compile-budget must be > 0 seconds"))
    dist = dist_from_report(opts.lengths) if opts.lengths else default_dist()
    host_ram = host_ram_for(opts.host_ram, opts.gpu)
    result = tune(preset, gpu, shape, free_batch=opts.free_batch, dist=dist, host_ram=host_ram,
                  compile_budget_s=budget)  # fmt: skip
    before_yaml = preset_to_yaml(preset)
    lines = tune_lines(result, before_yaml, preset_to_yaml(result.preset))
    winner_preset = result.preset
    probe_rows = []
    winner = None
    do_probe, why_not = probe_decision(opts, preset, gpu)
    if not do_probe:
        lines.append(why_not)
    if do_probe:
        from backend.runs.probe import (  # deferred: the launcher, only when probing
            probe,
            probe_methods,
        )

        say = lambda msg: print(_("trainwiz: {line}").format(line=msg), file=sys.stderr, flush=True)  # noqa: E731
        if is_full_fsdp(result.preset):
            where = "cpu" if preset.launch.device == "cpu" else gpu.name
            measured = probe(preset, result, top=opts.top, steps=opts.steps, progress=say,
                             compile_budget_s=budget, learn=(where, shape, dist))  # fmt: skip
        else:  # tune's answer (or the preset) is LoRA/QLoRA/ZeRO: probe the methods' ranking
            from backend.planner.learned import (  # deferred: calibration rows, only when tuning
                load_rows,
            )

            where = "cpu" if preset.launch.device == "cpu" else gpu.name
            ranked, _notes = search_methods(preset, gpu, shape, dist=dist, host_ram=host_ram,
                                            calibration=load_rows(where))  # fmt: skip
            if is_full_fsdp(preset):
                ranked = [c for c in ranked if c.changes]
            measured = probe_methods(preset, ranked, top=opts.top, steps=opts.steps, progress=say,
                                     learn=(where, shape, dist))  # fmt: skip
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
                    "{label}: predicted {predicted}, measured {measured} real tokens/s ({err}); "
                    "peak {peak} GiB (pred {predicted_peak}); startup {startup} s (not in the "
                    "rate); {state} (run {run})"
                ).format(
                    label=r.label,
                    predicted=f"{r.predicted_real_tokens_per_s:,.0f}",
                    measured=got,
                    err=(
                        f"{r.predicted_real_tokens_per_s / r.measured_real_tokens_per_s - 1:+.1%}"
                        if r.measured_real_tokens_per_s
                        else "-"
                    ),
                    peak=f"{r.measured_peak_gib:.1f}" if r.measured_peak_gib else "-",
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
            picked = [e for e in result.probe_pool if e.settings.label() == winner]
            if picked:
                lines.append(batch_line(result.before, picked[0], dist))
        else:
            lines.append(_("no candidate measured: the predicted pick is written"))
    after_yaml = preset_to_yaml(winner_preset)
    target.write_text(after_yaml, encoding="utf-8")
    diff = list(
        difflib.unified_diff(
            before_yaml.splitlines(), after_yaml.splitlines(), "preset", str(target), lineterm=""
        )
    )
    methods = [c.as_dict() for c in result.methods]  # LoRA/QLoRA/ZeRO alternatives
    payload = {
        "written": str(target),
        "diff": diff,
        "probe": probe_rows,
        "winner": winner,
        "methods": methods,
        "probed": do_probe,
        "predicted_only": "" if do_probe else why_not,
        "batch": result.batch,
        "dropped": [{"label": e.settings.label(), "why": why} for e, why in result.dropped],
    }
    return TuneOutcome(lines, diff, payload, target, do_probe, preset_secrets(preset))


def probe_decision(args: TuneOptions, preset: object, gpu: object) -> tuple[bool, str]:
    """Measure by default where the preset's GPU is here; otherwise predict and say why."""
    from backend.planner.learned import kind_key  # deferred: calibration rows, only when tuning

    if args.no_probe:
        return False, _("predicted only (--no-probe)")
    if args.probe:
        return True, ""
    launch = preset.launch  # type: ignore[attr-defined]
    name = gpu.name  # type: ignore[attr-defined]
    if launch.device != "cuda":
        return False, _("predicted only: the preset trains on the CPU (--probe measures it here)")
    local = planner_gpu.detect_local()  # via the module: a stand-in detector reaches it
    if local is None:
        return False, _("predicted only: no GPU on this machine (a probe needs a {gpu})").format(
            gpu=name
        )
    if kind_key(local.name) != kind_key(name):
        return False, _("predicted only: this machine has {local}, the plan is for {gpu}").format(
            local=local.name, gpu=name
        )
    world = launch.nproc_per_node * launch.nnodes
    if launch.nnodes > 1 or launch.nproc_per_node > local.count:
        return False, _(
            "predicted only: {world} GPUs needed, {count} here (multi-GPU runs are predicted, "
            "not measured)"
        ).format(world=world, count=local.count)
    return True, ""


def _default_target(ref: str) -> Path:
    path = Path(ref)
    if path.suffix in (".yaml", ".yml"):
        return path.with_name(path.stem + "-tuned.yaml")
    return Path(f"{ref}-tuned.yaml")
