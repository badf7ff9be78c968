"""The command plan: from a preset, the exact argv of every step the seed runs by hand.

Steps are argv lists (never shell strings built from user input); ``PlanStep.display()`` is the
shell-quoted, copy-pasteable form. The container step carries the same options twice: as
``docker run`` flags for display and as docker SDK keyword arguments for execution, both made
from one table so they cannot drift apart.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from backend.plan.deepspeed import config_path, config_text, method_packages
from backend.plan.hf_flags import training_flags
from backend.preset.schema import Preset, map_host_path

Where = Literal["host", "container"]


@dataclass
class PlanStep:
    """One command. ``exec_prefix`` is how a container step is entered (docker exec ...)."""

    id: str
    group: str
    title: str
    argv: list[str]
    where: Where = "host"
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    exec_prefix: list[str] = field(default_factory=list)
    docker: dict[str, Any] | None = None

    def full_argv(self) -> list[str]:
        return [*self.exec_prefix, *self.argv]

    def display(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        command = shlex.join(self.full_argv())
        return f"{env} {command}" if env else command


@dataclass
class Plan:
    preset: str
    runner: str
    transformers: str
    steps: list[PlanStep]

    def step(self, step_id: str) -> PlanStep:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)

    def group(self, group: str) -> list[PlanStep]:
        return [s for s in self.steps if s.group == group]

    def to_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "runner": self.runner,
            "transformers": self.transformers,
            "steps": [{**asdict(s), "display": s.display()} for s in self.steps],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def as_script(self) -> str:
        """The plan as a copy-pasteable shell script (comments carry the titles)."""
        lines = [f"# trainwiz plan for preset {self.preset} (runner: {self.runner})"]
        for step in self.steps:
            lines.append(f"\n# [{step.group}] {step.title}")
            if step.note:
                lines.extend(f"#   {n}" for n in step.note.splitlines())
            lines.append(step.display())
        return "\n".join(lines) + "\n"


ENTRY_FILE = "entry/train_entry.py"
LORA_SCRIPT = "fastchat/train/train_lora.py"


def build_plan(
    preset: Preset,
    *,
    run_dir: Path | None = None,
    transformers_version: str | None = None,
    preset_ref: str | None = None,
) -> Plan:
    """Every step of the job, in order. ``run_dir`` resolves ``@run`` and the entry's path."""
    from backend.plan.resolve import resolve_preset

    preset = resolve_preset(preset, run_dir)
    target = transformers_version or preset.environment.transformers
    ref = preset_ref or preset.name
    steps: list[PlanStep] = []
    steps.extend(_model_steps(preset, ref))
    if preset.launch.runner == "docker":
        steps.append(
            PlanStep(
                id="image",
                group="image",
                title=f"Pull the base image {preset.environment.image}",
                argv=["docker", "pull", preset.environment.image],
            )
        )
    if preset.environment.mode == "image" or preset.launch.runner == "host":
        what = "environment image" if preset.launch.runner == "docker" else "training venv"
        steps.append(
            PlanStep(
                id="environment",
                group="environment",
                title=f"Build the {what} once (cached by a hash of its inputs)",
                argv=["trainwiz", "env", "build", ref],
                note="FastChat, transformers=="
                f"{preset.environment.transformers}, "
                f"{', '.join([*preset.environment.extra_packages, *method_packages(preset)]) or 'no extras'}",
            )
        )
    train = _train_step(preset, run_dir, target)
    if preset.launch.runner == "docker":
        from backend.plan.docker_args import container_step

        container = container_step(preset, run_dir, train)
        steps.append(container)
        if preset.environment.mode == "in_container":
            prefix = ["docker", "exec", "-it"]
            if preset.launch.workdir:
                prefix += ["-w", preset.launch.workdir]
            prefix.append(preset.container.name or "trainwiz-train")
            from backend.plan.setup_steps import in_container_setup

            for step in in_container_setup(preset):
                step.exec_prefix = prefix
                steps.append(step)
            train.exec_prefix = prefix
            train.where = "container"
            steps.append(train)
        else:
            # The container's own command is the training: nothing to exec into.
            train.where = "container"
            train.note = "runs as the container's command (see the container step)"
            steps.append(train)
    else:
        steps.append(train)
    if preset.launch.scheduler != "local":  # multi-node: one agent per node (issue 18)
        from backend.runs.multinode import plan_steps

        steps.extend(plan_steps(preset, run_dir, train))
    return Plan(preset=preset.name, runner=preset.launch.runner, transformers=target, steps=steps)


def _model_steps(preset: Preset, ref: str) -> list[PlanStep]:
    model = preset.model
    if model.source == "hf":
        env = {"HF_ENDPOINT": model.endpoint} if model.endpoint else {}
        argv = ["huggingface-cli", "download", str(model.repo), "--revision", model.revision]
        argv += ["--local-dir", model.dir]
        return [
            PlanStep(
                id="model",
                group="model",
                title=f"Download {model.repo} from the Hub",
                argv=argv,
                env=env,
                note=f"trainwiz runs this through huggingface_hub: resume, safetensors preferred, "
                f"token from ${model.token_env} or the cached login",
            )
        ]
    if model.source == "git_lfs":
        return [
            PlanStep(
                id="model-lfs",
                group="model",
                title="Enable git-lfs",
                argv=["git", "lfs", "install"],
            ),
            PlanStep(
                id="model",
                group="model",
                title=f"Clone {model.clone_url()} with git-lfs",
                argv=["git", "clone", model.clone_url(), model.dir],
            ),
        ]
    if model.source == "tiny":
        return [
            PlanStep(
                id="model",
                group="model",
                title="Make the tiny random-weight Llama and its tokenizer locally",
                argv=["trainwiz", "model", "make-tiny", ref],
                note=f"into {model.dir}; no network",
            )
        ]
    return [
        PlanStep(
            id="model",
            group="model",
            title=f"Validate the local model at {model.dir}",
            argv=["trainwiz", "model", "validate", model.dir],
        )
    ]


def _train_step(preset: Preset, run_dir: Path | None, target: str) -> PlanStep:
    launch = preset.launch
    if launch.entry == "trainwiz":
        base = run_dir if run_dir is not None else Path("<run_dir>")
        script = str(base / ENTRY_FILE)
    elif preset.training.method != "full" and "script" not in launch.model_fields_set:
        script = LORA_SCRIPT  # FastChat's own LoRA/QLoRA trainer (issue 21)
    else:
        script = launch.script
    argv = ["torchrun", f"--nproc_per_node={launch.nproc_per_node}"]
    if launch.nnodes > 1:
        argv += [f"--nnodes={launch.nnodes}", f"--node_rank={launch.node_rank}"]
        if launch.master_addr:
            argv.append(f"--master_addr={launch.master_addr}")
    argv.append(f"--master_port={launch.master_port}")
    argv.append(script)
    model_path = preset.training.model_name_or_path
    if model_path is None:
        model_path = (
            map_host_path(preset.model.dir, preset.container.volumes)
            if launch.runner == "docker"
            else preset.model.dir
        )
    argv += training_flags(
        preset.training,
        model_path=model_path,
        target_transformers=target,
        trainwiz_entry=launch.entry == "trainwiz",
        deepspeed_config=config_path(run_dir),
    )
    env = dict(launch.env)
    if launch.device == "cpu":
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
    ds_text = config_text(preset)
    note = f"DeepSpeed config {config_path(run_dir)}:\n{ds_text.rstrip()}" if ds_text else ""
    method = "" if preset.training.method == "full" else f" ({preset.training.method})"
    return PlanStep(
        id="train",
        group="train",
        title=f"Train{method} on {launch.nproc_per_node} process(es) with {launch.entry}",
        argv=argv,
        env=env,
        note=note,
    )
