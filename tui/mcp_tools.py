"""The tools `trainwiz mcp` offers, without the MCP SDK: plain functions whose typed, annotated
parameters become each tool's JSON schema, and whose results are the CLI's ``--json`` payloads.

Each tool calls the builder its CLI command prints with ``--json`` (``tui/commands/*``), so an
agent and a script read the same fields from the same code: nothing here computes a figure, a
verdict or a refusal of its own. The arguments mirror the CLI's options, with the CLI's bounds
(the ranges live beside each option). Options that would widen what a client can make this
machine do are left out: ``--python`` (any program as the tokenizer's interpreter) and
``--token-host`` (send the Hub token to another host).

``launch``, ``stop`` and ``resume`` start or end trainings: the server offers them only when it
was started with ``--allow-launch`` (``WRITE_TOOLS``). Risky container options still need
``yes: true``, the CLI's ``--yes``, and the planner's verdict still gates a launch unless
``ignore_plan: true``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from backend.redact import preset_secrets, redact_data, redact_text
from backend.rundir import LOG
from backend.runs import find_run
from backend.runs.control import tail_lines
from backend.runs.resume import resume as resume_run
from backend.termsafe import terminal_safe
from tui.commands import check as check_cmd
from tui.commands import compare as compare_cmd
from tui.commands import data as data_cmd
from tui.commands import diagnose as diagnose_cmd
from tui.commands import launch as launch_cmd
from tui.commands import model as model_cmd
from tui.commands import plan as plan_cmd
from tui.commands import presets as presets_cmd
from tui.commands import resume as resume_cmd
from tui.commands import runs as runs_cmd
from tui.commands import tune as tune_cmd

PATH_MAX = 4096  # the longest path a name may be: a longer string is refused by the schema

Ref = Annotated[str, Field(min_length=1, max_length=PATH_MAX)]
PresetRef = Annotated[
    str,
    Field(
        min_length=1,
        max_length=PATH_MAX,
        description="a shipped preset name (see the presets tool) or a YAML path",
    ),
]
RunRef = Annotated[
    str,
    Field(
        min_length=1,
        max_length=PATH_MAX,
        description="run id, unique prefix, 'last', a run dir or a Slurm job id",
    ),
]
Name = Annotated[str, Field(min_length=1, max_length=200)]
HostRam = Annotated[
    float,
    Field(
        ge=plan_cmd.HOST_RAM_RANGE[0],
        le=plan_cmd.HOST_RAM_RANGE[1],
        allow_inf_nan=False,
        description="host RAM in GiB to plan within (default: this machine's for its GPU)",
    ),
]
LOG_LINES_MAX = 5000


def scrub(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A result with every secret hidden: env mappings by the env rule, URL credentials, the
    process's secret values, Hub and Bearer tokens and the preset's own ``secrets`` in every
    string. A float JSON cannot carry (NaN, inf) becomes null."""
    known = list(secrets)

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return redact_text(item, known)
        if isinstance(item, dict):
            return {k: walk(v) for k, v in item.items()}
        if isinstance(item, list):
            return [walk(v) for v in item]
        if isinstance(item, float) and not math.isfinite(item):
            return None
        return item

    return walk(redact_data(value))


def check(
    preset: PresetRef | None = None,
    only: Annotated[list[Name], Field(max_length=64)] | None = None,
) -> Any:
    """Check this machine (driver, GPUs, Docker, disk, RAM, network), judged against a preset
    when one is given: `trainwiz check --json`. Any check with status 'fail' blocks a launch."""
    found, results, risks = check_cmd.run_check_set(preset, only)
    return check_cmd.check_json(found, results, risks)


def presets() -> Any:
    """The shipped presets with a one-line description: `trainwiz presets --json`."""
    return presets_cmd.presets_json()


def plan(
    preset: PresetRef,
    gpu: Name | None = None,
    config: Ref | None = None,
    transformers: Name | None = None,
    tune: bool = False,
    free_batch: bool = False,
    lengths: Ref | None = None,
    host_ram: HostRam | None = None,
) -> Any:
    """Every step a launch of the preset runs (exact commands), and the planner's memory and
    throughput estimate with its verdict (does it fit this machine's or ``gpu``'s memory and the
    host RAM): `trainwiz plan --json`. ``config``: the model's config.json; ``lengths``: a
    saved `data check --json` report; ``tune``: also the fastest preset that fits."""
    outcome = plan_cmd.make_plan(
        preset,
        transformers=transformers,
        gpu=gpu,
        config=config,
        do_tune=tune,
        free_batch=free_batch,
        lengths=lengths,
        host_ram=host_ram,
    )
    return scrub(plan_cmd.plan_json(outcome), preset_secrets(outcome.preset))


def tune(
    preset: PresetRef,
    probe: bool = False,
    gpu: Name | None = None,
    config: Ref | None = None,
    free_batch: bool = False,
    write: Ref | None = None,
    force: bool = False,
    top: Annotated[int, Field(ge=tune_cmd.TOP_RANGE[0], le=tune_cmd.TOP_RANGE[1])] = 3,
    steps: Annotated[int, Field(ge=tune_cmd.STEPS_RANGE[0], le=tune_cmd.STEPS_RANGE[1])] = 12,
    compile_budget: Annotated[
        float,
        Field(
            ge=tune_cmd.COMPILE_BUDGET_RANGE[0],
            le=tune_cmd.COMPILE_BUDGET_RANGE[1],
            allow_inf_nan=False,
        ),
    ]
    | None = None,
    lengths: Ref | None = None,
    host_ram: HostRam | None = None,
) -> Any:
    """The configuration with the most real tokens/s that fits the GPU and host RAM, written as
    a tuned preset (``write``, default PRESET-tuned.yaml; an existing file needs ``force``):
    `trainwiz tune --json`. Predicted only, unless ``probe: true`` measures the top candidates
    here with short trainings."""
    opts = tune_cmd.TuneOptions(
        preset=preset, gpu=gpu, config=config, free_batch=free_batch, probe=probe,
        no_probe=not probe, compile_budget=compile_budget, top=top, steps=steps, write=write,
        force=force, lengths=lengths, host_ram=host_ram,
    )  # fmt: skip
    outcome = tune_cmd.tune_preset(opts)
    return scrub(outcome.payload, outcome.secrets)


def data_check(
    file: Annotated[
        str,
        Field(
            min_length=1,
            max_length=PATH_MAX,
            description="FastChat conversation JSON ('@sample' works)",
        ),
    ],
    model: Ref | None = None,
    max_length: Annotated[
        int, Field(ge=data_cmd.MAX_LENGTH_RANGE[0], le=data_cmd.MAX_LENGTH_RANGE[1])
    ] = 512,
    chat_template: Name = "auto",
) -> Any:
    """Find the records FastChat would choke on (roles, empty turns, ids; token lengths and
    masking with ``model``, a model dir whose tokenizer measures): `trainwiz data check
    --json`."""
    report = data_cmd.data_report(file, model, max_length, chat_template=chat_template)
    return data_cmd.data_json(report)


def model_validate(model_dir: Ref) -> Any:
    """Check a model dir without loading its weights (config, shards, dtype, tokenizer):
    `trainwiz model validate DIR --json`."""
    return model_cmd.validate_json(model_cmd.validate_report(model_dir))


def runs() -> Any:
    """Every run with its state, real tokens/s, wall time, eval loss, checkpoint and world
    size: `trainwiz runs --json`."""
    return runs_cmd.runs_json()


def run_status(run: RunRef) -> Any:
    """A run's refreshed record (state, message, cause, exit code) and its progress (step,
    loss, real tokens/s, ETA; the Monitor's figures): `trainwiz attach RUN --json`. Poll it
    until ``state`` is finished, failed or stopped."""
    return runs_cmd.status_json(find_run(run))


def logs_tail(
    run: RunRef,
    lines: Annotated[int, Field(ge=1, le=LOG_LINES_MAX)] = 200,
) -> Any:
    """The last ``lines`` lines of a run's train.log, secrets redacted and made terminal-safe
    (escape sequences dropped, control characters shown as \\xNN)."""
    run_dir = find_run(run)
    text = "\n".join(tail_lines(run_dir / LOG, lines))
    return {"run_id": run_dir.name, "lines": lines, "text": terminal_safe(redact_text(text))}


def diagnose(
    target: Annotated[
        str,
        Field(min_length=1, max_length=PATH_MAX, description="a log file path or a run id"),
    ],
    preset: PresetRef | None = None,
) -> Any:
    """Known failures in a run's log (or a log file), most severe first, each with its cause
    and fixes computed against the preset (default for a run: its own): `trainwiz diagnose
    --json`."""
    return diagnose_cmd.diagnose_json(diagnose_cmd.diagnose_target(target, preset))


def compare(runs: Annotated[list[Ref], Field(min_length=1, max_length=32)]) -> Any:
    """Two or more runs side by side (losses, real tokens/s, wall time, GPU-hours, the preset
    fields that differ): `trainwiz runs compare --json`."""
    return compare_cmd.compared(runs)


def launch(
    preset: PresetRef,
    yes: bool = False,
    ignore_plan: bool = False,
    no_prepare: bool = False,
    transformers: Name | None = None,
) -> Any:
    """Start a training run from a preset, detached (it survives this server): `trainwiz
    launch --detach --json`. Dangerous container options are refused unless ``yes: true``; a
    preset the plan predicts does not fit is refused unless ``ignore_plan: true``. Then poll
    run_status."""
    result = launch_cmd.start_run(
        preset,
        no_prepare=no_prepare,
        transformers=transformers,
        yes=yes,
        ignore_plan=ignore_plan,
        ask=False,
    )
    return launch_cmd.launch_json(result)


def stop(
    run: RunRef,
    timeout: Annotated[float, Field(ge=0, le=86400, allow_inf_nan=False)] = 30.0,
) -> Any:
    """Stop a run gracefully (SIGTERM / docker stop, then kill after ``timeout`` seconds), and
    a serve of it: `trainwiz stop --json`."""
    return runs_cmd.stop_json(find_run(run), timeout)


def resume(run: RunRef) -> Any:
    """Start the next attempt of a failed or stopped run from its newest complete checkpoint,
    detached: `trainwiz resume --detach --json`."""
    run_dir = find_run(run)
    return resume_cmd.resume_json(run_dir, resume_run(run_dir))


@dataclass(frozen=True)
class ToolSpec:
    fn: Callable[..., Any]
    read_only: bool


READ_TOOLS = [
    ToolSpec(fn, read_only=fn not in (tune,))
    for fn in (
        check, presets, plan, tune, data_check, model_validate, runs, run_status, logs_tail,
        diagnose, compare,
    )
]  # fmt: skip
WRITE_TOOLS = [ToolSpec(fn, read_only=False) for fn in (launch, stop, resume)]
