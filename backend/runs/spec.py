"""The launch spec: everything a launch decides, decided once, before anything is shown.

``build_spec`` is the one function that decides, for this machine: the rendezvous port (the
first free port from ``launch.master_port`` up, skipping ports other live runs chose, so an
unchanged machine gives the same answer twice), the training binary (an absolute path), the
image, the environment the run adds, the CLI that the prepare steps run, and the run directory
layout. The plan is built from those decisions, so its argv *is* what runs: ``trainwiz plan``
prints ``spec.plan``; the launcher writes ``spec.plan`` as plan.json and ``spec.launch_json()``
as launch.json, and the watcher executes launch.json as written. A resume, an automatic
restart or an OOM fallback is a new spec (``kind``, ``attempt``), recorded as such.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from backend.errors import BadInput
from backend.i18n import _
from backend.images.ready import (
    built_venv,
    environment_ready,
    image_exists,
    image_for,
    refuse_missing_method_packages,
    training_bin,
    trains_in_built_venv,
)
from backend.paths import METRICS, PRESET, attempt_launch
from backend.plan.commands import build_plan, fastchat_host_dir
from backend.plan.docker_args import LABEL_PRESET, LABEL_RUN
from backend.plan.rdzv import SLURM_ENDPOINT, port_chosen_in_job, port_moves_here
from backend.plan.resolve import resolve_preset
from backend.plan.types import Decided, Plan, PlanStep
from backend.ports import PortLock, claim_port, claimed_ports, next_free_port, port_free
from backend.preset.schema import Preset
from backend.rundir import LAUNCH, atomic_write, own_paths
from backend.runs import multinode

Kind = Literal["plan", "launch", "resume", "auto", "oom_fallback"]
Prepare = Literal["missing", "none", "all"]
RUN_DIR_PLACEHOLDER = "<run_dir>"
PREPARE_IDS = ("model", "fastchat", "image", "environment")  # plan steps a launch may run first


def trainwiz_command() -> tuple[str, ...]:
    """How this installation's CLI is run, as an absolute path: the ``trainwiz`` beside this
    Python (scripts/install.sh puts it in .venv/bin), else the one on PATH, else the module."""
    own = Path(sys.executable).parent / "trainwiz"
    if own.is_file() and os.access(own, os.X_OK):
        return (str(own),)
    found = shutil.which("trainwiz")
    if found:
        return (str(Path(found).absolute()),)
    return (sys.executable, "-m", "tui.cli")


def decide_port(preset: Preset, taken: set[int], notes: list[str]) -> int | None:
    """The master_port torchrun gets (a multi-node run: its rendezvous port): on this machine's
    network (host runner, or a container on ``--net=host``) with one node, or an SSH run's node
    0 here (``backend.plan.rdzv.port_moves_here``), the first port from launch.master_port up that
    is neither bound here nor chosen by another live run; None for a Slurm job without its own
    endpoint (its head node is known only in the job, which chooses a free port there:
    ``port_chosen_in_job``); otherwise the preset's (a bridge network has the container's own
    ports). ``taken`` gains the choice."""
    launch = preset.launch
    port = launch.master_port
    if port_chosen_in_job(preset):
        notes.append(
            _(
                "rendezvous at {endpoint}: the port is chosen in the job on its head node (one "
                "free there at that moment), not launch.master_port; status.json records it "
                "(master_port, rdzv_endpoint)"
            ).format(endpoint=SLURM_ENDPOINT)
        )
        return None
    if not port_moves_here(preset):
        return port
    chosen = port
    if port in taken or not port_free(port):
        chosen = next_free_port(port, taken)  # the one rule the Checks step names too
    if chosen != port:
        why = "chosen by another run" if port in taken else "in use here"
        notes.append(f"launch.master_port {port} is {why}: using {chosen} instead")
    taken.add(chosen)
    return chosen


def decide_torchrun(preset: Preset, notes: list[str]) -> str:
    """The torchrun that runs: the image's own in a container, else the training
    environment's, as an absolute path: the venv the plan's environment step builds when that
    is where the run trains (bare only when ``environment.venv`` names a missing one: a
    launch's preflight refuses that case, so only a printed plan can carry it, with a note)."""
    if preset.launch.runner == "docker":
        return "torchrun"
    if trains_in_built_venv(preset):  # the plan's environment step builds it first
        built, _complete = built_venv(preset)
        return str(built / "bin" / "torchrun")
    try:
        return str(training_bin(preset))
    except BadInput as exc:
        notes.append(str(exc))
        return "torchrun"


@dataclass
class ExecStep:
    """One command the watcher runs, exactly as launch.json records it."""

    id: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    title: str = ""
    display: str = ""
    cwd: str | None = None  # a host step's working directory
    workdir: str | None = None  # an in-container step's (docker exec -w)

    @classmethod
    def of(cls, step: PlanStep, **where: str | None) -> ExecStep:
        return cls(step.id, list(step.argv), dict(step.env), step.title, step.display(), **where)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "title": self.title, "argv": self.argv}
        out["env"] = self.env
        out["display"] = self.display
        if self.cwd is not None:
            out["cwd"] = self.cwd
        if self.workdir is not None:
            out["workdir"] = self.workdir
        return out


@dataclass
class LaunchSpec:
    """Everything one start of a run executes (launch.json) and the plan it came from."""

    kind: Kind
    attempt: int
    preset: str
    runner: str
    run_dir: str
    preset_file: str
    master_port: int | None
    torchrun: str
    image: str | None
    plan: Plan
    prepare: list[ExecStep] = field(default_factory=list)
    train: ExecStep | None = None
    docker: dict[str, Any] | None = None
    remove_after: bool = False
    exec: list[ExecStep] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)  # an OOM candidate's changes
    extra: dict[str, Any] = field(default_factory=dict)  # multi-node (backend/runs/multinode)

    def launch_json(self) -> dict[str, Any]:
        """launch.json: what the watcher executes, and the decisions it was built from."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "attempt": self.attempt,
            "preset": self.preset,
            "runner": self.runner,
            "run_dir": self.run_dir,
            "preset_file": self.preset_file,
            "master_port": self.master_port,
            "torchrun": self.torchrun,
            "image": self.image,
            "transformers": self.plan.transformers,
            "prepare": [s.to_json() for s in self.prepare],
            "notes": self.notes,
        }
        if self.overrides:
            out["overrides"] = self.overrides
        if self.train is not None:
            out["train"] = self.train.to_json()
        if self.docker is not None:
            out["docker"] = self.docker
            out["remove_after"] = self.remove_after
        if self.exec:
            out["exec"] = [s.to_json() for s in self.exec]
        out.update(self.extra)
        return out

    def commands(self) -> list[list[str]]:
        """The commands this spec runs, in order, as a shell would run them: the prepare steps,
        then the training (host), or ``docker run`` and each ``docker exec`` (docker; the
        runner makes the same calls through the docker SDK, from the same table)."""
        out = [list(s.argv) for s in self.prepare]
        if self.train is not None:
            return [*out, list(self.train.argv)]
        if self.docker is not None:
            out.append(self.plan.step("container").argv)
            out += [s.shown_argv() for s in self.plan.steps if s.exec_prefix]
        return out


def build_spec(
    preset: Preset,
    *,
    run_dir: Path | None = None,
    transformers_version: str | None = None,
    preset_ref: str | None = None,
    prepare: Prepare = "missing",
    taken: set[int] | None = None,
    kind: Kind = "launch",
    attempt: int = 1,
    overrides: dict[str, Any] | None = None,
    trainwiz: tuple[str, ...] | None = None,
    torchrun: str | None = None,
) -> LaunchSpec:
    """Decide everything once and build the plan from it (module docstring). ``run_dir``
    None: the printed plan (``<run_dir>`` stands for the folder a launch creates).
    ``trainwiz``/``torchrun`` name other binaries (a test's stubs); by default they are found."""
    taken = set() if taken is None else taken
    resolved = resolve_preset(preset, run_dir)
    notes: list[str] = []
    port = decide_port(resolved, taken, notes)
    if torchrun is None and run_dir is None and resolved.launch.runner == "host":
        try:  # a launch's preflight has already refused this: probe once, not twice
            refuse_missing_method_packages(resolved)
        except BadInput as exc:  # the printed plan says it
            notes.append(str(exc))
    torchrun = torchrun or decide_torchrun(resolved, notes)
    docker = resolved.launch.runner == "docker"
    image = image_for(resolved) if docker else None
    base = str(run_dir) if run_dir is not None else RUN_DIR_PLACEHOLDER
    single = resolved.launch.scheduler == "local"
    run_env = {"TRAINWIZ_METRICS": f"{base}/{METRICS}", "PYTHONUNBUFFERED": "1"}
    run_env["TRAINWIZ_ATTEMPT"] = str(attempt)
    run_id = run_dir.name if run_dir is not None else "<run_id>"
    decided = Decided(
        master_port=port,
        torchrun=torchrun,
        trainwiz=trainwiz or trainwiz_command(),
        image=image,
        run_env=run_env if single else {},
        labels={LABEL_RUN: run_id, LABEL_PRESET: resolved.name} if docker else {},
    )
    ref = preset_ref or (str(run_dir / PRESET) if run_dir is not None else preset.name)
    plan = build_plan(
        preset,
        run_dir=run_dir,
        transformers_version=transformers_version,
        preset_ref=ref,
        decided=decided,
    )
    spec = LaunchSpec(
        kind=kind,
        attempt=attempt,
        preset=resolved.name,
        runner=resolved.launch.runner,
        run_dir=base,
        preset_file=ref,
        master_port=port,
        torchrun=torchrun,
        image=image,
        plan=plan,
        prepare=_prepare(resolved, plan, prepare),
        notes=notes,
        overrides=dict(overrides or {}),
    )
    if not single:  # multi-node: each node's agent (backend/runs/multinode)
        _add_node_steps(resolved, run_dir, plan, torchrun, port)
        if run_dir is None:  # a printed plan: the node steps say it all, nothing is written
            return spec
        legacy = {"runner": spec.runner, "prepare": [s.to_json() for s in spec.prepare]}
        legacy["notes"] = notes
        out = multinode.launch_spec(resolved, plan, Path(base), legacy, torchrun, port)
        spec.extra = {k: v for k, v in out.items() if k not in ("runner", "prepare", "notes")}
        return spec
    train = plan.step("train")
    if not docker:
        # Relative paths in the preset mean what they meant where `trainwiz launch` ran.
        spec.train = ExecStep.of(train, cwd=resolved.launch.workdir or os.getcwd())
        return spec
    kwargs = dict(plan.step("container").docker or {})
    spec.remove_after = bool(kwargs.pop("auto_remove", False))
    spec.docker = kwargs
    if train.exec_prefix:  # in_container: setup + train are exec'd into the container
        workdir = resolved.launch.workdir
        spec.exec = [
            ExecStep.of(s, workdir=workdir) for s in plan.steps if s.group in ("setup", "train")
        ]
    return spec


def _add_node_steps(
    preset: Preset, run_dir: Path | None, plan: Plan, torchrun: str, port: int | None
) -> None:
    """A multi-node plan runs on every node: the single-node container and train steps become
    comments (run by the node steps), then each node's ssh command or the sbatch script."""
    train = plan.step("train")
    if preset.launch.runner == "docker":
        container = plan.step("container")
        container.note = _("the single-node form: each node starts its own (the node steps)")
        container.included_in = "node"
    plan.steps.extend(multinode.plan_steps(preset, run_dir, train, torchrun, port))
    train.included_in = train.included_in or "node"


def _prepare(preset: Preset, plan: Plan, which: Prepare) -> list[ExecStep]:
    """The plan's steps a launch runs before training: ``missing`` those whose result is not
    here yet (a model, the FastChat clone, the image), ``all`` every one, ``none`` none."""
    if which == "none":
        return []
    out = []
    for step in plan.steps:
        if step.id in PREPARE_IDS and (which == "all" or missing(preset, step.id)):
            out.append(ExecStep.of(step))
    return out


def missing(preset: Preset, step_id: str) -> bool:
    """Whether a prepare step's result is not here yet (the model, the clone, the image)."""
    if step_id == "model":
        # the one answer (step table, replay)
        from backend.model.ready import (  # deferred: `trainwiz plan` skips the model clients
            model_ready,
        )

        return not model_ready(preset).ready
    if step_id == "fastchat":
        host = fastchat_host_dir(preset)
        return host is not None and not Path(host).exists()
    if step_id == "image" and preset.environment.mode == "in_container":
        return not image_exists(preset.environment.image)
    return not environment_ready(preset)  # image (mode image: pulled for the build), environment


def apply_overrides(preset: Preset, overrides: dict[str, Any]) -> Preset:
    """``preset`` with an OOM candidate's dotted ``section.field`` values (planner/fallback)."""
    if not overrides:
        return preset
    data = preset.model_dump(mode="json")
    for dotted, value in overrides.items():
        section, _sep, name = dotted.partition(".")
        data.setdefault(section, {})[name] = value
    return Preset.model_validate(data)


def next_attempt_spec(
    run_dir: Path, previous: dict[str, Any], attempt: int, how: Kind
) -> dict[str, Any]:
    """A later attempt's launch.json: a new spec from the run's preset (and the OOM candidate's
    overrides it runs on), its port decided again by the same rule, ``TRAINWIZ_ATTEMPT`` set.
    Written as ``launch.<attempt>.json`` and as launch.json (the spec running now)."""
    from backend.preset.runpreset import run_preset  # deferred: the YAML loader is the CLI's

    # A copied run dir's records name the original's files: read and write only this one's.
    source = Path(own_paths(run_dir)(str(previous.get("preset_file") or run_dir / PRESET)))
    overrides = previous.get("overrides") or {}
    preset = apply_overrides(run_preset(run_dir, source), overrides)
    with PortLock():
        spec = build_spec(
            preset,
            run_dir=run_dir,
            preset_ref=str(source),
            transformers_version=previous.get("transformers"),
            prepare="none",
            taken=claimed_ports(run_dir),
            kind=how,
            attempt=attempt,
            overrides=overrides,
        )
        claim_port(spec.master_port, run_dir)
    data = spec.launch_json()
    data["notes"] = [*previous.get("notes", []), *spec.notes]
    text = json.dumps(data, indent=2) + "\n"

    atomic_write(run_dir / attempt_launch(attempt), text)
    atomic_write(run_dir / LAUNCH, text)
    return data


def plan_spec(
    preset: Preset, *, transformers_version: str | None = None, preset_ref: str | None = None
) -> LaunchSpec:
    """What ``trainwiz plan`` shows: the spec a launch would build now, on this machine (the
    ports other live runs chose count as taken, as they will for the launch)."""
    return build_spec(
        preset,
        transformers_version=transformers_version,
        preset_ref=preset_ref,
        prepare="none",
        taken=claimed_ports(None),
        kind="plan",
    )
