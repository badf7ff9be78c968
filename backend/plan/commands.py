"""The command plan: from a preset, the exact argv of every step the seed runs by hand.

Steps are argv lists (never shell strings built from user input); ``PlanStep.display()`` is the
shell-quoted, copy-pasteable form. The container step carries the same options twice: as
``docker run`` flags for display and as docker SDK keyword arguments for execution, both made
from one table so they cannot drift apart.
"""

from __future__ import annotations

import re
from pathlib import Path

from backend.errors import BadInput
from backend.i18n import _
from backend.images.pipindex import has_credentials
from backend.images.plan import method_packages
from backend.images.ready import trains_in_built_venv
from backend.model.modelscope import endpoint_env, revision_of
from backend.plan.chat_template import template_note
from backend.plan.deepspeed import config_path, config_text
from backend.plan.hf_flags import training_flags
from backend.plan.resolve import resolve_preset
from backend.plan.setup_steps import in_container_setup
from backend.plan.types import Decided, Plan, PlanStep, Where, comment, shell_word
from backend.preset.hf_choices import check_hf_choices
from backend.preset.schema import Preset, map_container_path, map_host_path

__all__ = [
    "ENTRY_FILE",
    "Decided",
    "Plan",
    "PlanStep",
    "Where",
    "build_plan",
    "check_version",
    "comment",
    "shell_word",
]

ENTRY_FILE = "entry/train_entry.py"
# FastChat's own scripts run under it in a launch: world size and sample-id checks, metrics.
FASTCHAT_WRAPPER = "entry/fastchat_entry.py"
LORA_SCRIPT = "fastchat/train/train_lora.py"


def _private_index_note(preset: Preset) -> str:
    """Said on the environment step when an index URL carries credentials (images.md)."""
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
    decided: Decided | None = None,
) -> Plan:
    """Every step of the job, in order. ``run_dir`` resolves ``@run`` and the entry's path;
    ``decided`` carries what the launch decided about this machine (port, binaries, image), so
    the argv built here is the argv that runs (``backend.runs.spec.build_spec``)."""
    decided = decided or Decided()
    preset = resolve_preset(preset, run_dir)
    if transformers_version is not None:
        check_version(transformers_version)
    target = transformers_version or preset.environment.transformers

    check_hf_choices(preset, target)  # HF's enum options: refused now, not minutes into a run
    ref = preset_ref or preset.name
    steps: list[PlanStep] = []
    steps.extend(_model_steps(preset, ref, decided.trainwiz))
    steps.extend(_fastchat_steps(preset))
    if preset.launch.runner == "docker":
        steps.append(
            PlanStep(
                id="image",
                group="image",
                title=_("Pull the base image {image}").format(image=preset.environment.image),
                argv=["docker", "pull", preset.environment.image],
            )
        )
    # A host run trains in trainwiz's own environment unless the preset names a venv or none
    # is here: a venv built otherwise would go unused (backend.images.ready.training_bin).
    docker_build = preset.launch.runner == "docker" and preset.environment.mode == "image"
    if docker_build or trains_in_built_venv(preset):
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
                argv=[*decided.trainwiz, "env", "build", ref],
                note="FastChat, transformers=="
                f"{preset.environment.transformers}, "
                + (", ".join(extras) or _("no extras"))
                + _private_index_note(preset),
            )
        )
    train = _train_step(preset, run_dir, target, decided)
    if preset.launch.runner == "docker":
        from backend.plan.docker_args import (  # deferred: `trainwiz check` skips docker argv
            container_step,
        )

        container = container_step(preset, run_dir, train, decided)
        steps.append(container)
        if preset.environment.mode == "in_container":
            # No -i/-t: nothing reads a terminal, and a printed plan run as a script has none
            # (the runner's docker SDK exec has neither either).
            prefix = ["docker", "exec"]
            if preset.launch.workdir:
                prefix += ["-w", preset.launch.workdir]
            prefix.append(preset.container.name or "trainwiz-train")

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
            train.note += "\n" + template_note(preset)
            train.included_in = "container"
            steps.append(train)
    else:
        steps.append(train)
    # Multi-node: backend.runs.spec adds each node's steps (they depend on the machines).
    return Plan(
        preset=preset.name,
        runner=preset.launch.runner,
        transformers=target,
        steps=steps,
        checks=machine_checks(preset),
    )


def machine_checks(preset: Preset) -> list[tuple[str, str]]:
    """The seed's once-per-machine setup, which trainwiz checks instead of doing: installing
    drivers and daemons needs root and a reboot's care, so it is never done behind a user."""
    out = [
        (
            _("NVIDIA driver and CUDA (seed: apt-get install cuda)"),
            _("system software, installed once by an administrator; trainwiz checks the driver"),
        )
    ]
    if preset.launch.runner == "docker":
        out += [
            (
                _("Docker (seed: apt install docker.io; systemctl enable docker)"),
                _("trainwiz checks that the daemon answers"),
            ),
            (
                _("NVIDIA container toolkit (seed: apt install nvidia-docker2)"),
                _("trainwiz checks that a container sees the GPUs (the seed's nvidia-smi run)"),
            ),
        ]
    if preset.model.source == "git_lfs":
        out.append(
            (
                _("git-lfs (seed: apt install git-lfs; git lfs install)"),
                _("trainwiz checks for it; its fetch runs git lfs pull in the clone"),
            )
        )
    return out


def check_version(version: str) -> str:
    """A ``--transformers`` argument must be a version: the flag names are chosen from it."""
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.-]?\w+)?", version):
        raise BadInput(
            _("--transformers: '{version}' is not a version like 4.57.6").format(version=version)
        )
    return version


def _model_steps(preset: Preset, ref: str, trainwiz: tuple[str, ...]) -> list[PlanStep]:
    """The model step: trainwiz's own fetch (resume, safetensors preferred, the token only to
    https hosts, validated afterwards), which is what a launch runs; the by-hand equivalent is
    in the note."""
    model = preset.model
    if model.source == "hf":
        env = {"HF_ENDPOINT": model.endpoint} if model.endpoint else {}
        by_hand = ["huggingface-cli", "download", str(model.repo), "--revision", model.revision]
        by_hand += ["--local-dir", model.dir]
        return [
            PlanStep(
                id="model",
                group="model",
                title=_("Download {repo} from the Hub").format(repo=model.repo),
                argv=[*trainwiz, "model", "fetch", ref],
                env=env,
                note=_(
                    "through huggingface_hub: resume, safetensors preferred, token from ${env} "
                    "or the cached login; by hand: {command}"
                ).format(env=model.token_env, command=shell_join(by_hand)),
            )
        ]
    if model.source == "modelscope":
        by_hand = ["modelscope", "download", str(model.repo), "--revision", revision_of(model)]
        by_hand += ["--local-dir", model.dir]
        return [
            PlanStep(
                id="model",
                group="model",
                title=_("Download {repo} from ModelScope").format(repo=model.repo),
                argv=[*trainwiz, "model", "fetch", ref],
                env=endpoint_env(model),
                note=_(
                    "through ModelScope's client (pip install 'trainwiz[modelscope]'); "
                    "by hand: {command}"
                ).format(command=shell_join(by_hand)),
            )
        ]
    if model.source == "git_lfs":
        clone = [["git", "lfs", "install"], ["git", "clone", "--", model.clone_url(), model.dir]]
        return [
            PlanStep(
                id="model",
                group="model",
                title=_("Clone {url} with git-lfs").format(url=model.clone_url()),
                argv=[*trainwiz, "model", "fetch", ref],
                note=_("git clone with git-lfs, checked for free space; by hand: {command}").format(
                    command=" && ".join(shell_join(c) for c in clone)
                ),
            ),
        ]
    if model.source == "tiny":
        return [
            PlanStep(
                id="model",
                group="model",
                title=_("Make the tiny random-weight Llama and its tokenizer locally"),
                argv=[*trainwiz, "model", "make-tiny", ref],
                note=_("into {path}; no network").format(path=model.dir),
            )
        ]
    return [
        PlanStep(
            id="model",
            group="model",
            title=_("Validate the local model at {path}").format(path=model.dir),
            argv=[*trainwiz, "model", "validate", model.dir],
        )
    ]


def shell_join(argv: list[str]) -> str:
    return " ".join(shell_word(a) for a in argv)


def fastchat_host_dir(preset: Preset) -> str | None:
    """Where an editable FastChat clone lives on the host (seen in the container through a
    volume), or None when the preset installs FastChat another way."""
    env = preset.environment
    if preset.launch.runner != "docker" or env.mode != "in_container":
        return None
    if env.fastchat.source != "editable" or not env.fastchat.path:
        return None
    host = map_container_path(env.fastchat.path, preset.container.volumes, None)
    return host if host != env.fastchat.path else None


def _fastchat_steps(preset: Preset) -> list[PlanStep]:
    """The seed clones FastChat on the host into the folder the container mounts, before the
    container starts; ``pip install -e .`` then runs in that clone."""
    host = fastchat_host_dir(preset)
    if host is None:
        return []
    url = preset.environment.fastchat.git_url
    return [
        PlanStep(
            id="fastchat",
            group="fastchat",
            title=_("Clone FastChat into {path} (the container sees it at {inside})").format(
                path=host, inside=preset.environment.fastchat.path
            ),
            argv=["git", "clone", "--", url, host],
            note=_("skipped by a launch when {path} already holds a clone").format(path=host),
        )
    ]


def _train_step(preset: Preset, run_dir: Path | None, target: str, decided: Decided) -> PlanStep:
    launch = preset.launch
    if launch.entry == "trainwiz":
        base = run_dir if run_dir is not None else Path("<run_dir>")
        script = str(base / ENTRY_FILE)
    elif preset.training.method != "full" and "script" not in launch.model_fields_set:
        script = LORA_SCRIPT  # FastChat's own LoRA/QLoRA trainer (docs/lora.md)
    else:
        script = launch.script
    wrapper = []  # a launch runs FastChat's script through the ranks' checks (fastchat_entry.py)
    if launch.entry != "trainwiz" and run_dir is not None:
        wrapper = [str(run_dir / FASTCHAT_WRAPPER)]
    argv = [decided.torchrun, f"--nproc_per_node={launch.nproc_per_node}"]
    if launch.nnodes > 1:
        argv += [f"--nnodes={launch.nnodes}", f"--node_rank={launch.node_rank}"]
        if launch.master_addr:
            argv.append(f"--master_addr={launch.master_addr}")
    port = launch.master_port if decided.master_port is None else decided.master_port
    argv.append(f"--master_port={port}")
    argv += [*wrapper, script]
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
    env.update(decided.run_env)
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
    chosen = template_note(preset)
    note = f"{chosen}\n{note}" if note else chosen
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
