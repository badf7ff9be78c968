"""The preset: the one description of a training job (schema version 1).

A preset says where the model comes from, which data, which image and environment, how the
container runs, how torchrun launches, and every training argument. Field names of
``TrainingArgs`` are FastChat's / Hugging Face's own flag names, so a preset reads like the
seed's command line. Defaults equal FastChat's and HF's, and only fields a preset sets are
rendered as flags (``model_fields_set``), which is how the seed's command is reproduced flag
for flag. Secrets never live here: ``model.token_env`` names an environment variable only.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = 1


class _Strict(BaseModel):
    """Unknown keys are errors (with a "did you mean" from the loader), never silently dropped."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


class TinyModelSpec(_Strict):
    """A random-weight Llama made locally, for the embedded default and for GPU proofs."""

    hidden_size: int = Field(64, gt=0)
    intermediate_size: int = Field(176, gt=0)
    num_hidden_layers: int = Field(2, gt=0)
    num_attention_heads: int = Field(4, gt=0)
    num_key_value_heads: int | None = Field(None, gt=0)
    vocab_size: int = Field(512, ge=64)
    max_position_embeddings: int = Field(512, gt=0)
    seed: int = 0


class ModelSource(_Strict):
    """Where the weights come from and where they live on the host."""

    source: Literal["hf", "git_lfs", "local", "tiny"] = "hf"
    repo: str | None = Field(None, description="Hugging Face repo id, e.g. lmsys/vicuna-13b-v1.3")
    revision: str = "main"
    endpoint: str | None = Field(
        None, description="Hub endpoint; a mirror such as https://hf-mirror.com for users in China"
    )
    token_env: str = Field(
        "HF_TOKEN",
        description="name of the environment variable holding the token (never the token)",
    )
    git_url: str | None = Field(None, description="URL for a git-lfs clone (the seed's way)")
    dir: str = Field(..., description="host directory holding (or receiving) the model")
    prefer_safetensors: bool = True
    tiny: TinyModelSpec | None = None

    @model_validator(mode="after")
    def _source_needs(self) -> ModelSource:
        if self.source == "hf" and not self.repo:
            raise ValueError("source 'hf' needs 'repo' (e.g. lmsys/vicuna-13b-v1.3)")
        if self.source == "git_lfs" and not (self.git_url or self.repo):
            raise ValueError("source 'git_lfs' needs 'git_url' or 'repo'")
        if self.source == "tiny" and self.tiny is None:
            self.tiny = TinyModelSpec()
        return self

    def clone_url(self) -> str:
        endpoint = (self.endpoint or "https://huggingface.co").rstrip("/")
        return self.git_url or f"{endpoint}/{self.repo}"


class FastChatInstall(_Strict):
    """How FastChat gets into the environment: a PyPI pin, or an editable clone (the seed)."""

    source: Literal["pypi", "editable"] = "pypi"
    spec: str = "fschat==0.2.36"
    path: str | None = Field(None, description="clone path for 'editable' (seed: /app/FastChat)")
    git_url: str = "https://github.com/lm-sys/FastChat.git"


class FlashAttnPolicy(_Strict):
    install: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: when the GPUs are sm80+ and the image lacks it"
    )
    no_build_isolation: bool = Field(True, description="the seed's fix for No module named 'torch'")
    max_jobs: int | None = Field(None, gt=0, description="MAX_JOBS for nvcc; None sizes it to RAM")
    index_url: str | None = Field(None, description="a separate index for flash-attn only")


class EnvironmentConfig(_Strict):
    """The image and what gets installed into it."""

    image: str = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"
    mode: Literal["image", "in_container"] = Field(
        "image",
        description="image: build a cached environment image once; in_container: pip-install "
        "inside the running container every time, as the seed does",
    )
    pip_index_url: str | None = None
    pip_extra_index_urls: list[str] = Field(default_factory=list)
    pip_trusted_hosts: list[str] = Field(default_factory=list)
    pip_cert: str | None = Field(
        None, description="CA bundle for pip (host path); None: PIP_CERT or the host's pip config"
    )
    find_links: list[str] = Field(
        default_factory=list,
        description="local wheel directories (pip --find-links); docker builds copy the wheels "
        "the install needs into the build context",
    )
    torch_spec: str | None = Field(
        None,
        description="pip requirement for torch when the image has none (e.g. torch==2.13.0); "
        "None keeps the image's torch",
    )
    upgrade_pip: bool = False
    apt_packages: list[str] = Field(default_factory=lambda: ["git"])
    fastchat: FastChatInstall = Field(default_factory=FastChatInstall)
    transformers: str = Field(
        "4.57.6", description="transformers version installed and targeted by the flag names"
    )
    extra_packages: list[str] = Field(default_factory=lambda: ["accelerate", "einops"])
    deepspeed: bool = False
    flash_attn: FlashAttnPolicy = Field(default_factory=FlashAttnPolicy)
    fsdp_state_dict_patch: bool = Field(
        False, description="the seed's .cpu() patch to torch 2.0.x's FSDP _state_dict_utils.py"
    )
    venv: str | None = Field(None, description="host runner: python env to use (None: build one)")

    @field_validator("transformers")
    @classmethod
    def _version_like(cls, value: str) -> str:
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.-]?\w+)?", value):
            raise ValueError(f"'{value}' is not a version like 4.57.6")
        return value


class Ulimit(_Strict):
    name: str
    value: str = Field(..., description="'-1' for unlimited, 'N' or 'SOFT:HARD'")

    @field_validator("value", mode="before")
    @classmethod
    def _str(cls, value: Any) -> str:
        return str(value)

    def soft_hard(self) -> tuple[int, int]:
        soft, _, hard = self.value.partition(":")
        return int(soft), int(hard or soft)


class Volume(_Strict):
    host: str
    container: str
    mode: Literal["rw", "ro"] = "rw"


class ContainerConfig(_Strict):
    """Every `docker run` option the seed uses, each switchable."""

    name: str | None = None
    gpus: str | None = Field("all", description="--gpus value; None for no GPUs")
    privileged: bool = False
    cap_add: list[str] = Field(default_factory=list)
    ulimits: list[Ulimit] = Field(default_factory=list)
    volumes: list[Volume] = Field(default_factory=list)
    network: str | None = Field(None, description="--net (seed: host)")
    ipc: str | None = Field(None, description="--ipc (seed: host)")
    shm_size: str | None = Field(None, description="--shm-size when ipc is not host, e.g. 16g")
    interactive: bool = True
    tty: bool = True
    workdir: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    remove: bool = False


class LaunchConfig(_Strict):
    runner: Literal["docker", "host"] = "docker"
    entry: Literal["trainwiz", "fastchat-train-mem"] = Field(
        "trainwiz",
        description="trainwiz: the bundled entry (metrics, version compatibility); "
        "fastchat-train-mem: FastChat's own train_mem.py unchanged",
    )
    script: str = Field(
        "fastchat/train/train_mem.py", description="script path for entry fastchat-train-mem"
    )
    workdir: str | None = Field(None, description="where torchrun runs (seed: /app/FastChat)")
    device: Literal["cuda", "cpu"] = "cuda"
    nproc_per_node: int = Field(1, ge=1)
    nnodes: int = Field(1, ge=1)
    node_rank: int = Field(0, ge=0)
    master_addr: str | None = None
    master_port: int = Field(29500, ge=1, le=65535)
    env: dict[str, str] = Field(default_factory=dict)
    max_restarts: int = Field(
        0,
        ge=0,
        description="after a crash, resume from the last complete checkpoint up to N times",
    )


class TrainingArgs(_Strict):
    """FastChat's ModelArguments + DataArguments + TrainingArguments, by their flag names.

    Declared in the seed's order so the rendered command reads like the seed's.
    """

    model_name_or_path: str | None = Field(
        None, description="as the trainer sees it; None: model.dir (mapped through volumes)"
    )
    data_path: str = Field(..., description="FastChat conversation JSON for training")
    output_dir: str
    bf16: bool = False
    num_train_epochs: float = Field(3.0, gt=0)
    per_device_train_batch_size: int = Field(8, ge=1)
    per_device_eval_batch_size: int = Field(8, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    eval_strategy: Literal["no", "steps", "epoch"] = Field("no", alias="evaluation_strategy")
    eval_steps: float | None = Field(None, gt=0)
    save_strategy: Literal["no", "steps", "epoch", "best"] = "steps"
    save_steps: float = Field(500, gt=0)
    save_total_limit: int | None = Field(None, ge=1)
    learning_rate: float = Field(5e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    warmup_ratio: float = Field(0.0, ge=0, le=1)
    lr_scheduler_type: str = "linear"
    logging_steps: float = Field(500, gt=0)
    fsdp: str = Field("", description="e.g. 'full_shard auto_wrap offload'")
    fsdp_transformer_layer_cls_to_wrap: str | None = None
    tf32: bool | None = None
    model_max_length: int = Field(512, ge=8)
    gradient_checkpointing: bool = False
    lazy_preprocess: bool = False
    # FastChat's own arguments beyond the seed's command.
    eval_data_path: str | None = None
    padding_side: Literal["right", "left"] = "right"
    trust_remote_code: bool = False
    cache_dir: str | None = None
    optim: str = "adamw_torch"
    # Common Hugging Face arguments.
    max_steps: int = -1
    warmup_steps: int = Field(0, ge=0)
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    adam_beta2: float = Field(0.999, ge=0, lt=1)
    adam_epsilon: float = Field(1e-8, gt=0)
    max_grad_norm: float = Field(1.0, ge=0)
    fp16: bool = False
    fsdp_config: dict[str, Any] | None = None
    deepspeed: str | None = None
    seed: int = 42
    dataloader_num_workers: int = Field(0, ge=0)
    report_to: str | None = None
    ddp_timeout: int = Field(1800, gt=0)
    logging_first_step: bool = False
    disable_tqdm: bool | None = None
    # trainwiz entry only (not FastChat flags): attention implementation, time-based checkpoints,
    # a held-out eval split of data_path (docs/checkpoints.md).
    attn_implementation: Literal["auto", "flash_attention_2", "sdpa", "eager"] = "auto"
    save_minutes: float | None = Field(
        None, gt=0, description="also checkpoint when this many minutes passed since the last one"
    )
    eval_split: float | None = Field(
        None,
        gt=0,
        lt=0.5,
        description="hold out this fraction of data_path for eval loss (deterministic by seed)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> TrainingArgs:
        if self.bf16 and self.fp16:
            raise ValueError("bf16 and fp16 are both on: choose one (bf16 on Ampere or newer)")
        return self


class Preset(_Strict):
    """A whole training job. ``schema`` is the version, so old presets can be migrated."""

    schema_version: Literal[1] = Field(1, alias="schema")
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    description: str = ""
    model: ModelSource
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    container: ContainerConfig = Field(default_factory=ContainerConfig)
    launch: LaunchConfig = Field(default_factory=LaunchConfig)
    training: TrainingArgs

    @model_validator(mode="after")
    def _cross_checks(self) -> Preset:
        # FastChat builds no eval dataset without eval_data_path; HF then raises at start.
        # (The seed's own command has this mismatch; FastChat's train_mem.py tolerates it.)
        if (
            self.training.eval_strategy != "no"
            and not self.training.eval_data_path
            and not self.training.eval_split
            and self.launch.entry == "trainwiz"
        ):
            raise ValueError(
                "training.eval_strategy is "
                f"'{self.training.eval_strategy}' but training.eval_data_path is empty: "
                "set eval_data_path, eval_split (e.g. 0.05) or eval_strategy: 'no'"
            )
        if self.launch.entry != "trainwiz":
            for name in ("eval_split", "save_minutes"):
                if getattr(self.training, name) is not None:
                    raise ValueError(
                        f"training.{name} needs launch.entry 'trainwiz' (FastChat's "
                        f"train_mem.py has no such option): set entry: trainwiz or drop {name}"
                    )
        if self.training.eval_split and self.training.eval_data_path:
            raise ValueError(
                "training.eval_split and training.eval_data_path are both set: choose one"
            )
        if self.launch.device == "cpu" and (self.training.bf16 or self.training.tf32):
            raise ValueError("launch.device 'cpu' cannot use bf16/tf32: set them to false")
        return self

    def model_path_for_trainer(self) -> str:
        """The model path as the training process sees it (inside the container if docker)."""
        if self.training.model_name_or_path:
            return self.training.model_name_or_path
        if self.launch.runner == "docker":
            return map_host_path(self.model.dir, self.container.volumes)
        return self.model.dir


def map_host_path(host_path: str, volumes: list[Volume]) -> str:
    """Map a host path to its in-container path through the bind mounts (longest match wins)."""
    best: Volume | None = None
    for vol in volumes:
        root = vol.host.rstrip("/") or "/"
        if (host_path == root or host_path.startswith(root + "/")) and (
            best is None or len(root) > len(best.host.rstrip("/"))
        ):
            best = vol
    if best is None:
        return host_path
    rest = host_path[len(best.host.rstrip("/")) :].lstrip("/")
    base = best.container.rstrip("/") or "/"
    return f"{base}/{rest}" if rest else base


def map_container_path(container_path: str, volumes: list[Volume], workdir: str | None) -> str:
    """Map an in-container path (absolute, or relative to workdir) back to the host."""
    path = container_path
    if not path.startswith("/") and workdir:
        path = workdir.rstrip("/") + "/" + path
    best: Volume | None = None
    for vol in volumes:
        root = vol.container.rstrip("/") or "/"
        if (path == root or path.startswith(root + "/")) and (
            best is None or len(root) > len(best.container.rstrip("/"))
        ):
            best = vol
    if best is None:
        return path
    rest = path[len(best.container.rstrip("/")) :].lstrip("/")
    base = best.host.rstrip("/") or "/"
    return f"{base}/{rest}" if rest else base
