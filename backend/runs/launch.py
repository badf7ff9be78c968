"""Launch: preset -> checks -> run directory -> plan -> detached watcher -> run id.

Everything that can be refused (a bad preset, no torchrun, no Docker daemon) is refused before
a run directory exists, so a failed validation starts nothing. After that the launcher only
writes files and starts the watcher in its own session; the watcher owns the run from there.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path

from backend import paths
from backend.entry import copy_entry
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.images.ready import (
    environment_ready,
    refuse_missing_method_packages,
    training_bin,
    trains_in_built_venv,
)
from backend.mirrors import apply_mirrors
from backend.plan import build_plan
from backend.plan.deepspeed import write_config as write_deepspeed_config
from backend.plan.outputs import check_output_dir, claim_output_dir
from backend.plan.resolve import resolve_preset
from backend.ports import PortLock, claim_port, claimed_ports
from backend.preset.loader import preset_to_yaml
from backend.preset.redacted import redact_preset, write_secret_preset
from backend.preset.schema import Preset, map_container_path
from backend.redact import strip_spec_secrets, write_secret_env
from backend.rundir import (
    LAUNCH,
    PLAN,
    PRESET,
    RunStatus,
    create_run_dir,
    read_status,
    remove_run_dir,
    update_status,
    write_json,
    write_private,
)
from backend.runs.docker_runner import client
from backend.runs.fallback import record_chain
from backend.runs.mirrors_record import write_mirrors_json
from backend.runs.plangate import refuse_over_plan
from backend.runs.procs import PROJECT_ROOT, start_time, start_watcher
from backend.runs.spec import LaunchSpec, build_spec

__all__ = [  # training_bin / environment_ready: their home is backend.images.ready
    "PROJECT_ROOT",
    "LaunchResult",
    "LaunchSpec",
    "environment_ready",
    "launch",
    "preflight",
    "start_watcher",
    "training_bin",
]


@dataclass
class LaunchResult:
    run_id: str
    run_dir: Path
    status: RunStatus
    notes: list[str] = dataclasses.field(default_factory=list)  # e.g. "master_port 29511 in use"


def step_outlook(preset: Preset) -> dict[str, str]:
    """What a launch will do with each step, for the Launch screen (may ask the Docker daemon)."""
    # the one answer (step table, replay, launch)
    from backend.model.ready import model_ready  # deferred: `trainwiz plan` skips the model clients

    resolved = resolve_preset(preset, None)
    present = model_ready(resolved).ready
    out = {"model": "present: skipped" if present else "missing: runs first"}
    ready = environment_ready(resolved)
    out["environment"] = "ready: skipped" if ready else "missing: runs first"
    out["image"] = "done by the environment build" if preset.launch.runner == "docker" else ""
    if preset.launch.runner == "host" and ready:
        out["train"] = f"torchrun: {training_bin(resolved)}"
    return out


def refuse_without_gpus(preset: Preset) -> None:
    """A CUDA run here with no NVIDIA driver or too few GPUs started, then failed in the
    trainer a minute later: the Checks step's own two verdicts refuse it now (one decision:
    the wizard disables Launch on the same results). Only where this machine is where it
    trains: one node, no scheduler."""
    launch = preset.launch
    if launch.device != "cuda" or launch.scheduler != "local" or launch.nnodes != 1:
        return
    from backend.checks import run_checks  # deferred: NVML, only for a CUDA launch

    failed = [r for r in run_checks(preset, only=["nvidia_driver", "gpus"])
              if r.status == "fail" and "launch" in r.blocks]  # fmt: skip
    if failed:
        raise BadInput(
            _(
                "launch.device: cuda, but {check}: {summary}: fix it ('trainwiz check --preset' "
                "with this preset shows how) or set launch.device: cpu"
            ).format(check=failed[0].id, summary=failed[0].summary)
        )


def preflight(
    preset: Preset, *, prepare: bool = True, ignore_plan: bool = False, ref: str | None = None
) -> None:
    """Refuse what cannot start, before any file is written (``prepare``: the launch builds
    what is missing first, the venv a host run trains in included; ``ignore_plan``: launch even
    when the planner predicts it does not fit this machine; ``ref``: how the user named the
    preset, for the commands a refusal suggests)."""
    from backend.data.check import (  # deferred: `trainwiz plan` skips the data checker
        data_file_problem,
    )

    if preset.launch.runner == "docker":
        client()  # raises with how to start the daemon
    else:
        if not (prepare and trains_in_built_venv(preset)):  # else the launch builds it first
            training_bin(preset)  # raises BadInput naming environment.venv
        refuse_missing_method_packages(preset)  # ZeRO's deepspeed, QLoRA's bitsandbytes
        workdir = preset.launch.workdir
        if (
            workdir
            and preset.launch.scheduler == "local"
            and not Path(workdir).expanduser().is_dir()
        ):
            raise BadInput(  # else torchrun's chdir fails in the watcher (exit 127)
                _(
                    "launch.workdir: {value} is not a directory on this machine: fix or remove it"
                ).format(value=workdir)
            )
        script = Path(preset.launch.script)
        if preset.launch.entry == "fastchat-train-mem" and not script.is_absolute():
            base = Path(preset.launch.workdir or ".").expanduser()
            if not preset.launch.workdir or not (base / script).is_file():
                raise BadInput(
                    _(
                        "launch.workdir: {script} is relative but {value} does not exist: set workdir to "
                        "your FastChat clone"
                    ).format(script=preset.launch.script, value=base / script)
                )
    refuse_without_gpus(preset)
    if not ignore_plan:  # the GPUs are there: does the run fit them (backend/runs/plangate.py)
        refuse_over_plan(preset, ref=ref)
    for field in ("data_path", "eval_data_path"):
        value = getattr(preset.training, field)
        where = _host_file(preset, value) if value else None
        problem = data_file_problem(where) if where is not None else None
        if problem:
            raise BadInput(
                _("training.{field}: {problem}").format(field=field, problem=problem)
                + (
                    _(" (as {value} in the preset)").format(value=value)
                    if str(where) != value
                    else ""
                )
                + _(": point it at a FastChat conversation JSON")
            )
    if preset.model.source == "local":
        from backend.model.ready import (  # deferred: `trainwiz plan` skips the model clients
            model_ready,
        )

        readiness = model_ready(preset)
        if not readiness.ready:
            raise BadInput(
                _("model.dir: {reason}: point it at a model").format(reason=readiness.reason)
            )


def _host_file(preset: Preset, path: str) -> Path | None:
    """Where the trainer's file is on the host; None when only the container can see it."""
    if preset.launch.runner == "docker":
        full = (
            path if path.startswith("/") else f"{(preset.launch.workdir or '/').rstrip('/')}/{path}"
        )
        mapped = map_container_path(path, preset.container.volumes, preset.launch.workdir)
        return None if mapped == full else Path(mapped)
    return Path(preset.launch.workdir or os.getcwd()).expanduser() / Path(path).expanduser()


def _check_plan(preset: Preset, transformers_version: str | None) -> None:
    """Build the plan once against a placeholder run dir: what raises does so before any file
    exists (a bad ulimit, an unknown version), as a BadInput rather than a traceback."""
    placeholder = paths.runs_dir() / "<run>"
    try:
        build_plan(
            preset,
            run_dir=placeholder,
            transformers_version=transformers_version,
            preset_ref=str(placeholder / PRESET),
        )
    except TrainwizError:
        raise
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise BadInput(
            _("preset {name}: cannot build its plan: {exc}").format(name=preset.name, exc=exc)
        ) from exc


def launch(
    preset: Preset,
    *,
    prepare: bool = True,
    transformers_version: str | None = None,
    ack_timeout: float = 15.0,
    ignore_plan: bool = False,
    ref: str | None = None,
) -> LaunchResult:
    """Start a run; returns once the watcher has taken it over (or the run already ended).
    ``ignore_plan``: the user's override of the planner's verdict (``--ignore-plan``); ``ref``:
    the preset as the user named it (a shipped name or a path), for a refusal's fix."""
    check_output_dir(preset)  # training.output_dir: the run dir, an empty or a trainwiz folder
    preset = apply_mirrors(preset)  # mirrors: auto/cn/custom are probed once, the choice written in
    preflight(resolve_preset(preset, None), prepare=prepare, ignore_plan=ignore_plan, ref=ref)
    _check_plan(preset, transformers_version)
    me = os.getpid()
    run_dir = create_run_dir(
        preset.name, preset.launch.runner, launcher_pid=me, launcher_start=start_time(me)
    )
    try:
        resolved = resolve_preset(preset, run_dir)
        # The record is redacted; the watcher's prepare steps read the real one (0600).
        write_private(run_dir / PRESET, preset_to_yaml(redact_preset(resolved)))
        prepare_file = write_secret_preset(run_dir, resolved)
        claim_output_dir(preset, run_dir)  # made (or kept) with trainwiz's marker in it
        write_mirrors_json(run_dir, resolved)
        copy_entry(run_dir)  # trainwiz's entry, or the wrapper FastChat's scripts run under
        write_deepspeed_config(resolved, run_dir)  # training.zero -> deepspeed.json (docs/lora.md)
        with PortLock():  # the port is decided once, here, and the plan is built from it
            spec = build_spec(
                preset,
                run_dir=run_dir,
                transformers_version=transformers_version,
                preset_ref=str(prepare_file),
                prepare="missing" if prepare else "none",
                taken=claimed_ports(run_dir),
            )
            write_json(run_dir / PLAN, spec.plan.to_dict())
            fallback_note = record_chain(  # fallback.json (backend/runs/fallback.py)
                preset, run_dir, transformers_version=transformers_version,
                taken=claimed_ports(run_dir), prepare_file=prepare_file,
            )  # fmt: skip
            if fallback_note:
                spec.notes.append(fallback_note)
            # launch.json holds no secret value: the watcher restores them from a 0600 file.
            public, secrets = strip_spec_secrets(spec.launch_json())
            if secrets:
                write_secret_env(run_dir, secrets)
            write_json(run_dir / LAUNCH, public)
            update_status(run_dir, master_port=spec.master_port)
            claim_port(spec.master_port, run_dir)  # other homes' launches skip it too
    except BaseException as exc:
        remove_run_dir(run_dir)  # nothing started: leave no half run behind
        if isinstance(exc, (TrainwizError, KeyboardInterrupt)) or not isinstance(exc, Exception):
            raise
        raise TrainwizError(
            _("launch failed before the run started: {name}: {exc}").format(
                name=type(exc).__name__, exc=exc
            )
        ) from exc
    try:
        start_watcher(run_dir)
    except OSError as exc:
        update_status(
            run_dir, state="failed", cause="watcher", message=f"cannot start the watcher: {exc}"
        )
        raise TrainwizError(
            _("cannot start the watcher of run {name}: {exc}").format(name=run_dir.name, exc=exc)
        ) from exc
    deadline = time.monotonic() + ack_timeout
    status = read_status(run_dir)
    while time.monotonic() < deadline:
        status = read_status(run_dir)
        if status.watcher_pid is not None or status.final:
            break
        time.sleep(0.05)
    else:
        message = (
            f"the watcher did not start within {ack_timeout:.0f} s: see {run_dir / 'watcher.log'}"
        )
        update_status(
            run_dir, state="failed", cause="watcher", ended_at=time.time(), message=message
        )
        raise TrainwizError(_("run {name}: {message}").format(name=run_dir.name, message=message))
    return LaunchResult(run_id=run_dir.name, run_dir=run_dir, status=status, notes=spec.notes)
