"""The command plan: from a preset, the exact argv of every step the seed runs by hand.

Steps are argv lists (never shell strings built from user input); ``PlanStep.display()`` is the
shell-quoted, copy-pasteable form. The container step carries the same options twice: as
``docker run`` flags for display and as docker SDK keyword arguments for execution, both made
from one table so they cannot drift apart.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from backend.errors import BadInput
from backend.i18n import _
from backend.plan.deepspeed import config_path, config_text, method_packages
from backend.plan.hf_flags import training_flags
from backend.preset.schema import Preset, map_host_path
from backend.redact import redact_argv, redact_data, redact_env, redact_text

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
        """One shell command line for any values: every word quoted, secrets redacted.

        A key that is not a shell name cannot be an assignment, so then ``env`` sets them.
        """
        if self._env_in_exec():
            return " ".join(shell_word(a) for a in redact_argv(self.shown_argv()))
        env = redact_env(self.env)
        words = [shell_word(a) for a in redact_argv(self.full_argv())]
        if all(_SHELL_NAME.fullmatch(k) for k in env):
            prefix = [f"{k}={shell_word(v)}" for k, v in env.items()]
        else:
            prefix = ["env", *(shell_word(f"{k}={v}") for k, v in env.items())]
        return " ".join([*prefix, *words])

    def _env_in_exec(self) -> bool:
        return bool(self.env) and self.exec_prefix[:2] == ["docker", "exec"]

    def shown_argv(self) -> list[str]:
        """The command :meth:`display` prints, unredacted. A step run inside the container gets
        its environment there (``docker exec -e K=V``), not on the host's docker client: the
        printed line must do what the runner does."""
        full = self.full_argv()
        if not self._env_in_exec():
            return full
        flags = [w for k, v in self.env.items() for w in ("-e", f"{k}={v}")]
        return [*full[:2], *flags, *full[2:]]

    def redacted(self) -> dict[str, Any]:
        """The step as plan.json / ``plan --json`` show it: secrets redacted."""
        data = asdict(self)
        data["title"] = redact_text(self.title)
        data["note"] = redact_text(self.note)
        data["argv"] = redact_argv(self.argv)
        data["exec_prefix"] = redact_argv(self.exec_prefix)
        data["env"] = redact_env(self.env)
        if self.docker is not None:
            docker = redact_data(self.docker)
            docker["environment"] = redact_env(self.docker.get("environment") or {})
            if "command" in docker:
                docker["command"] = redact_argv(self.docker["command"])
            data["docker"] = docker
        data["display"] = self.display()
        return data


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
            "steps": [s.redacted() for s in self.steps],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def as_script(self) -> str:
        """The plan as a copy-pasteable shell script (comments carry the titles)."""
        lines = [
            comment(
                _("trainwiz plan for preset {preset} (runner: {runner})").format(
                    preset=self.preset, runner=self.runner
                )
            )
        ]
        for step in self.steps:
            lines.append("")
            lines.append(comment(f"[{step.group}] {redact_text(step.title)}"))
            if step.note:  # one comment per line: a ZeRO step's note is a JSON config
                lines += [comment(f"  {line}") for line in redact_text(step.note).splitlines()]
            lines.append(step.display())
        return "\n".join(lines) + "\n"


_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _escape_controls(text: str) -> str:
    """Control characters (newline, ESC, NUL...) as visible ``\\n``/``\\xNN`` escapes."""
    out = []
    for char in text.replace("\\", "\\\\"):
        code = ord(char)
        if char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char != "\t" and (code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def comment(text: str) -> str:
    """One shell comment line, whatever ``text`` holds: no newline can end the comment early."""
    return "# " + _escape_controls(text)


def shell_word(value: str) -> str:
    """``value`` as one shell word. A NUL cannot be in an argument at all: shown escaped."""
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    return shlex.quote(value)


ENTRY_FILE = "entry/train_entry.py"
LORA_SCRIPT = "fastchat/train/train_lora.py"


def _private_index_note(preset: Preset) -> str:
    """Said on the environment step when an index URL carries credentials (images.md)."""
    from backend.images.pipindex import has_credentials

    env = preset.environment
    urls = [env.pip_index_url, *env.pip_extra_index_urls, env.flash_attn.index_url]
    if not any(url and has_credentials(url) for url in urls):
        return ""
    if preset.launch.runner == "docker":
        return "; " + _(
            "private pip index: reached through trainwiz's build-time proxy on 127.0.0.1, "
            "its credentials stay out of the image"
        )
    return "; " + _("private pip index: its URL goes to pip's environment, not its command line")


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
    if transformers_version is not None:
        check_version(transformers_version)
    target = transformers_version or preset.environment.transformers
    ref = preset_ref or preset.name
    steps: list[PlanStep] = []
    steps.extend(_model_steps(preset, ref))
    if preset.launch.runner == "docker":
        steps.append(
            PlanStep(
                id="image",
                group="image",
                title=_("Pull the base image {image}").format(image=preset.environment.image),
                argv=["docker", "pull", preset.environment.image],
            )
        )
    if preset.environment.mode == "image" or preset.launch.runner == "host":
        title = (
            _("Build the environment image once (cached by a hash of its inputs)")
            if preset.launch.runner == "docker"
            else _("Build the training venv once (cached by a hash of its inputs)")
        )
        extras = [*preset.environment.extra_packages, *method_packages(preset)]
        steps.append(
            PlanStep(
                id="environment",
                group="environment",
                title=title,
                argv=["trainwiz", "env", "build", ref],
                note="FastChat, transformers=="
                f"{preset.environment.transformers}, "
                + (", ".join(extras) or _("no extras"))
                + _private_index_note(preset),
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
            train.note = _("runs as the container's command (see the container step)")
            steps.append(train)
    else:
        steps.append(train)
    if preset.launch.scheduler != "local":  # multi-node: one agent per node (issue 18)
        from backend.runs.multinode import plan_steps

        if preset.launch.runner == "docker":
            container.note = "the single-node form: each node starts its own (the node steps)"
        steps.extend(plan_steps(preset, run_dir, train))
    return Plan(preset=preset.name, runner=preset.launch.runner, transformers=target, steps=steps)


def check_version(version: str) -> str:
    """A ``--transformers`` argument must be a version: the flag names are chosen from it."""
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.-]?\w+)?", version):
        raise BadInput(
            _("--transformers: '{version}' is not a version like 4.57.6").format(version=version)
        )
    return version


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
                title=_("Download {repo} from the Hub").format(repo=model.repo),
                argv=argv,
                env=env,
                note=_(
                    "trainwiz runs this through huggingface_hub: resume, safetensors preferred, "
                    "token from ${env} or the cached login"
                ).format(env=model.token_env),
            )
        ]
    if model.source == "modelscope":
        from backend.mirrors.modelscope import modelscope_step

        return [modelscope_step(model)]
    if model.source == "git_lfs":
        return [
            PlanStep(
                id="model-lfs",
                group="model",
                title=_("Enable git-lfs"),
                argv=["git", "lfs", "install"],
            ),
            PlanStep(
                id="model",
                group="model",
                title=_("Clone {url} with git-lfs").format(url=model.clone_url()),
                argv=["git", "clone", "--", model.clone_url(), model.dir],
            ),
        ]
    if model.source == "tiny":
        return [
            PlanStep(
                id="model",
                group="model",
                title=_("Make the tiny random-weight Llama and its tokenizer locally"),
                argv=["trainwiz", "model", "make-tiny", ref],
                note=_("into {path}; no network").format(path=model.dir),
            )
        ]
    return [
        PlanStep(
            id="model",
            group="model",
            title=_("Validate the local model at {path}").format(path=model.dir),
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
    note = (
        _("DeepSpeed config {path}:").format(path=config_path(run_dir)) + f"\n{ds_text.rstrip()}"
        if ds_text
        else ""
    )
    if launch.device == "cpu" and preset.training.fsdp.strip():
        # accelerate builds no FSDP plugin without CUDA: --fsdp is accepted and ignored, and the
        # run trains with plain DDP (every rank holds the whole model). Say so, not silently.
        cpu_note = _(
            "training.fsdp '{fsdp}' is not applied on launch.device 'cpu': accelerate shards only "
            "on CUDA, so this run trains with plain DDP (each process holds the whole model)"
        ).format(fsdp=preset.training.fsdp)
        note = f"{note}\n{cpu_note}" if note else cpu_note
    title = (
        _("Train on {nproc} process(es) with {entry}")
        if preset.training.method == "full"
        else _("Train ({method}) on {nproc} process(es) with {entry}")
    ).format(method=preset.training.method, nproc=launch.nproc_per_node, entry=launch.entry)
    return PlanStep(
        id="train",
        group="train",
        title=title,
        argv=argv,
        env=env,
        note=note,
    )
