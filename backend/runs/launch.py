"""Launch: preset -> checks -> run directory -> plan -> detached watcher -> run id.

Everything that can be refused (a bad preset, no torchrun, no Docker daemon) is refused before
a run directory exists, so a failed validation starts nothing. After that the launcher only
writes files and starts the watcher in its own session; the watcher owns the run from there.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend import paths
from backend.entry import copy_entry
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.mirrors import apply_mirrors
from backend.mirrors.record import write_mirrors_json
from backend.plan import Plan, PlanStep, build_plan
from backend.plan.deepspeed import write_config as write_deepspeed_config
from backend.plan.resolve import resolve_preset
from backend.preset.loader import preset_to_yaml
from backend.preset.schema import Preset, map_container_path
from backend.redact import redact_preset, write_secret_preset
from backend.runs.docker_runner import LABEL_PRESET, LABEL_RUN
from backend.runs.fallback import record_chain
from backend.runs.ports import PortLock, chosen_port, claimed_ports, free_master_port
from backend.runs.procs import RUN_ENV, start_time
from backend.runs.rundir import (
    LAUNCH,
    METRICS,
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

PROJECT_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LaunchResult:
    run_id: str
    run_dir: Path
    status: RunStatus
    notes: list[str] = dataclasses.field(default_factory=list)  # e.g. "master_port 29511 in use"


def training_bin(preset: Preset, name: str = "torchrun") -> Path:
    """The host training environment's ``name`` (torchrun): the preset's venv, else ours."""
    venv = preset.environment.venv
    if venv:
        candidate = Path(venv).expanduser() / "bin" / name
        if candidate.is_file():
            return candidate
        raise BadInput(
            _(
                "environment.venv: {candidate} does not exist: build the environment ('trainwiz "
                "env build {name}') or point venv at one with torch and fschat"
            ).format(candidate=candidate, name=preset.name)
        )
    own = Path(sys.executable).parent / name
    if own.is_file():
        return own
    found = shutil.which(name)
    if found:
        return Path(found)
    raise BadInput(
        _(
            "environment.venv is empty and no {name} was found: build the training "
            "environment ('trainwiz env build {name2}') or set environment.venv to a venv "
            "with torch"
        ).format(name=name, name2=preset.name)
    )


def _project_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": f"{PROJECT_ROOT}{os.pathsep}{path}" if path else str(PROJECT_ROOT)}


def _model_present(preset: Preset) -> bool:
    from backend.model.ready import model_ready  # the one answer (step table, replay, launch)

    return model_ready(preset).ready


def prepare_steps(preset: Preset, plan: Plan, preset_file: Path) -> list[dict[str, Any]]:
    """Steps to run before training: only those whose result is missing (model, env image)."""
    out = []
    for step in plan.steps:
        if step.id == "model" and not _model_present(preset):
            out.append(_prepare_step(step, "model", preset_file))
        elif step.id == "environment" and not environment_ready(preset):
            # Host: preflight already demanded a training env; docker: build the missing image.
            out.append(_prepare_step(step, "environment", preset_file))
    return out


def step_outlook(preset: Preset) -> dict[str, str]:
    """What a launch will do with each step, for the Launch screen (may ask the Docker daemon)."""
    resolved = resolve_preset(preset, None)
    out = {"model": "present: skipped" if _model_present(resolved) else "missing: runs first"}
    ready = environment_ready(resolved)
    out["environment"] = "ready: skipped" if ready else "missing: runs first"
    out["image"] = "done by the environment build" if preset.launch.runner == "docker" else ""
    if preset.launch.runner == "host" and ready:
        out["train"] = f"torchrun: {training_bin(resolved)}"
    return out


def _prepare_step(step: PlanStep, what: str, preset_file: Path) -> dict[str, Any]:
    return {
        "id": step.id,
        "title": step.title,
        "argv": [sys.executable, "-m", "backend.runs.prepare", what, str(preset_file)],
        "env": {**step.env, **_project_env()},
        "display": step.display(),
    }


def environment_ready(preset: Preset) -> bool:
    if preset.launch.runner == "host":
        try:
            training_bin(preset)
        except BadInput:
            return False
        return True
    return _image_exists(_image_for(preset))


def _image_for(preset: Preset) -> str:
    if preset.environment.mode == "image":
        try:
            from backend.images.build import env_image_tag

            return env_image_tag(preset)
        except ImportError:
            return preset.environment.image
    return preset.environment.image


def _image_exists(image: str) -> bool:
    from backend.runs.docker_runner import client

    try:
        client().images.get(image)
    except Exception:
        return False
    return True


def launch_spec(
    preset: Preset,
    plan: Plan,
    run_dir: Path,
    prepare: bool,
    taken: set[int] | None = None,
    prepare_file: Path | None = None,
) -> dict[str, Any]:
    """launch.json: exactly what the watcher will execute (no secrets: env names only)."""
    taken = set() if taken is None else taken
    prepare_file = prepare_file or run_dir / PRESET
    train = plan.step("train")
    run_env = {"TRAINWIZ_METRICS": str(run_dir / METRICS), "PYTHONUNBUFFERED": "1"}
    notes: list[str] = []
    spec: dict[str, Any] = {
        "runner": preset.launch.runner,
        "prepare": prepare_steps(preset, plan, prepare_file) if prepare else [],
        "notes": notes,
    }
    nnodes = preset.launch.nnodes
    if preset.launch.scheduler != "local":  # multi-node: backend/runs/multinode
        from backend.runs import multinode

        # docker: the image's own torchrun; host: the training venv's on every node.
        torchrun = "torchrun" if preset.launch.runner == "docker" else str(training_bin(preset))
        return multinode.launch_spec(preset, plan, run_dir, spec, torchrun)
    if preset.launch.runner == "host":
        argv = free_master_port(train.argv, nnodes, notes, taken)
        if argv[0] == "torchrun":
            argv[0] = str(training_bin(preset))
        spec["train"] = {
            "id": "train",
            "title": train.title,
            "argv": argv,
            "env": {**train.env, **run_env},
            # Relative paths in the preset mean what they meant where `trainwiz launch` ran.
            "cwd": preset.launch.workdir or os.getcwd(),
            "display": train.display(),
        }
        return spec
    container = plan.step("container")
    kwargs = dict(container.docker or {})
    if str(kwargs.get("image", "<")).startswith("<"):
        kwargs["image"] = _image_for(preset)  # the plan could not name the env image itself
    kwargs["labels"] = {LABEL_RUN: run_dir.name, LABEL_PRESET: preset.name}
    kwargs["environment"] = {**kwargs.get("environment", {}), **run_env}
    host_net = kwargs.get("network_mode") == "host"
    if host_net and kwargs.get("command"):
        kwargs["command"] = free_master_port(list(kwargs["command"]), nnodes, notes, taken)
    spec["remove_after"] = bool(kwargs.pop("auto_remove", False))
    spec["docker"] = kwargs
    if train.exec_prefix:  # in_container mode: setup + train are exec'd into the container
        workdir = preset.launch.workdir
        spec["exec"] = [
            {
                "id": s.id,
                "argv": free_master_port(s.argv, nnodes, notes, taken) if host_net else s.argv,
                "env": {**s.env, **(run_env if s.id == "train" else {})},
                "workdir": workdir,
            }
            for s in plan.steps
            if s.group in ("setup", "train")
        ]
    return spec


def preflight(preset: Preset) -> None:
    """Refuse what cannot start, before any file is written."""
    if preset.launch.runner == "docker":
        from backend.runs.docker_runner import client

        client()  # raises with how to start the daemon
    else:
        training_bin(preset)  # raises BadInput naming environment.venv
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
    for field in ("data_path", "eval_data_path"):
        value = getattr(preset.training, field)
        where = _host_file(preset, value) if value else None
        if where is not None and not where.is_file():
            raise BadInput(
                _("training.{field}: {value} does not exist").format(field=field, value=value)
                + (_(" (on the host: {where})").format(where=where) if str(where) != value else "")
                + _(": point it at a FastChat conversation JSON")
            )
    if preset.model.source == "local":
        from backend.model.ready import model_ready

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


def start_watcher(run_dir: Path) -> int:
    """``python -m backend.runs.watch RUN_DIR`` in a new session: immune to SIGHUP and ^C."""
    # Every process of the run inherits the marker (backend.runs.procs finds them by it).
    env = {**os.environ, **_project_env(), RUN_ENV: str(run_dir.resolve())}
    fd = os.open(run_dir / "watcher.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "backend.runs.watch", str(run_dir)],
            cwd=run_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc.pid


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
) -> LaunchResult:
    """Start a run; returns once the watcher has taken it over (or the run already ended)."""
    preset = apply_mirrors(preset)  # mirrors: auto/cn/custom are probed once, the choice written in
    preflight(resolve_preset(preset, None))
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
        write_mirrors_json(run_dir, resolved)
        plan = build_plan(
            preset,
            run_dir=run_dir,
            transformers_version=transformers_version,
            preset_ref=str(run_dir / PRESET),
        )
        write_json(run_dir / PLAN, plan.to_dict())
        if preset.launch.entry == "trainwiz":
            copy_entry(run_dir)
        write_deepspeed_config(resolved, run_dir)  # training.zero -> deepspeed.json (issue 21)
        with PortLock():
            spec = launch_spec(
                resolved, plan, run_dir, prepare, claimed_ports(run_dir), prepare_file
            )
            fallback_note = record_chain(  # fallback.json (backend/runs/fallback.py)
                preset, run_dir, transformers_version=transformers_version,
                taken=claimed_ports(run_dir), prepare_file=prepare_file,
            )  # fmt: skip
            if fallback_note:
                spec["notes"].append(fallback_note)
            write_json(run_dir / LAUNCH, spec)
            update_status(run_dir, master_port=chosen_port(spec))
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
    return LaunchResult(run_id=run_dir.name, run_dir=run_dir, status=status, notes=spec["notes"])
