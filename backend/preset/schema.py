"""The preset: the one description of a training job (schema version 1).

A preset says where the model comes from, which data, which image and environment, how the
container runs, how torchrun launches, and every training argument. Field names of
``TrainingArgs`` are FastChat's / Hugging Face's own flag names, so a preset reads like the
seed's command line. Defaults equal FastChat's and HF's, and only fields a preset sets are
rendered as flags (``model_fields_set``), which is how the seed's command is reproduced flag
for flag. Secrets never live here: ``model.token_env`` names an environment variable only.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from backend.i18n import _
from backend.preset.grammar import (
    MAX_TEXT,
    check_apt_package,
    check_env_keys,
    check_host,
    check_image_ref,
    check_no_option,
    check_pip_requirement,
    check_plain_text,
    check_repo_id,
    check_url,
)

SCHEMA_VERSION = 1
BIG = 10**9  # upper bound of step/count fields: far past any real run, far below overflow


class _Strict(BaseModel):
    """Unknown keys are errors (with a "did you mean" from the loader), never silently dropped.

    Every text field is one line of printable text (``description`` may span lines) of at most
    ``MAX_TEXT`` characters, and every float is finite: values end up in argv, plans, Dockerfiles
    and logs, where a newline, NUL, escape sequence or lone surrogate does harm and never good.
    """

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        populate_by_name=True,
        allow_inf_nan=False,
        str_max_length=MAX_TEXT,
    )

    @field_validator("*", mode="after")
    @classmethod
    def _plain_text(cls, value: Any, info: ValidationInfo) -> Any:
        return check_plain_text(value, multiline=info.field_name == "description")


class TinyModelSpec(_Strict):
    """A random-weight Llama made locally, for the embedded default and for GPU proofs."""

    hidden_size: int = Field(64, gt=0, le=65536)
    intermediate_size: int = Field(176, gt=0, le=262144)
    num_hidden_layers: int = Field(2, gt=0, le=1024)
    num_attention_heads: int = Field(4, gt=0, le=1024)
    num_key_value_heads: int | None = Field(None, gt=0, le=1024)
    vocab_size: int = Field(512, ge=64, le=2**20)
    max_position_embeddings: int = Field(512, gt=0, le=2**20)
    seed: int = Field(0, ge=0, le=2**32 - 1)


class ModelSource(_Strict):
    """Where the weights come from and where they live on the host."""

    source: Literal["hf", "git_lfs", "local", "tiny", "modelscope"] = "hf"
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

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, value: str | None) -> str | None:
        return check_repo_id(value) if value is not None else None

    @field_validator("revision", "token_env")
    @classmethod
    def _not_option(cls, value: str) -> str:
        return check_no_option(value)

    @field_validator("endpoint", "git_url")
    @classmethod
    def _urls(cls, value: str | None) -> str | None:
        return check_url(value, git=True) if value is not None else None

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        check_env_keys({value: ""})
        return value

    @model_validator(mode="after")
    def _source_needs(self) -> ModelSource:
        if self.source == "hf" and not self.repo:
            raise ValueError(_("source 'hf' needs 'repo' (e.g. lmsys/vicuna-13b-v1.3)"))
        if self.source == "modelscope" and not self.repo:
            raise ValueError(_("source 'modelscope' needs 'repo' (its ModelScope id, owner/name)"))
        if self.source == "git_lfs" and not (self.git_url or self.repo):
            raise ValueError(_("source 'git_lfs' needs 'git_url' or 'repo'"))
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

    @field_validator("git_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_url(value, git=True)

    @field_validator("spec")
    @classmethod
    def _spec(cls, value: str) -> str:
        return check_pip_requirement(value)


class FlashAttnPolicy(_Strict):
    install: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: when the GPUs are sm80+ and the image lacks it"
    )
    no_build_isolation: bool = Field(True, description="the seed's fix for No module named 'torch'")
    max_jobs: int | None = Field(
        None, gt=0, le=1024, description="MAX_JOBS for nvcc; None sizes it to RAM"
    )
    index_url: str | None = Field(None, description="a separate index for flash-attn only")

    @field_validator("index_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return check_url(value) if value is not None else None


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
            raise ValueError(_("'{value}' is not a version like 4.57.6").format(value=value))
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image_ref(value)

    @field_validator("pip_index_url")
    @classmethod
    def _index(cls, value: str | None) -> str | None:
        return check_url(value) if value is not None else None

    @field_validator("pip_extra_index_urls")
    @classmethod
    def _extra_index(cls, value: list[str]) -> list[str]:
        return [check_url(v) for v in value]

    @field_validator("apt_packages")
    @classmethod
    def _apt(cls, value: list[str]) -> list[str]:
        return [check_apt_package(v) for v in value]

    @field_validator("extra_packages")
    @classmethod
    def _extras(cls, value: list[str]) -> list[str]:
        return [check_pip_requirement(v) for v in value]

    @field_validator("torch_spec")
    @classmethod
    def _torch(cls, value: str | None) -> str | None:
        return check_pip_requirement(value) if value is not None else None

    @field_validator("pip_trusted_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        return [check_host(v) for v in value]


class Ulimit(_Strict):
    name: str
    value: str = Field(..., description="'-1' for unlimited, 'N' or 'SOFT:HARD'")

    @field_validator("value", mode="before")
    @classmethod
    def _str(cls, value: Any) -> str:
        return str(value)

    @field_validator("value")
    @classmethod
    def _numbers(cls, value: str) -> str:
        if not re.fullmatch(r"-1|\d{1,19}(:(-1|\d{1,19}))?", value):
            raise ValueError(
                _("'{value}' is not a ulimit: use -1 (unlimited), N or SOFT:HARD").format(
                    value=value
                )
            )
        return value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z]{2,20}", value):
            raise ValueError(
                _("'{value}' is not a ulimit name such as memlock or stack").format(value=value)
            )
        return value

    def soft_hard(self) -> tuple[int, int]:
        soft, _, hard = self.value.partition(":")
        return int(soft), int(hard or soft)


class Volume(_Strict):
    host: str
    container: str
    mode: Literal["rw", "ro"] = "rw"

    @field_validator("host", "container")
    @classmethod
    def _path(cls, value: str) -> str:
        if ":" in value or not value.strip():
            raise ValueError(
                _("'{value}' cannot be a bind-mount path (empty, or holds ':')").format(value=value)
            )
        return value


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

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env_keys(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}", value):
            raise ValueError(
                _("'{value}' is not a container name (letters, digits, _ . -)").format(value=value)
            )
        return value

    @field_validator("gpus", "network", "ipc", "shm_size", "workdir")
    @classmethod
    def _not_option(cls, value: str | None) -> str | None:
        return check_no_option(value) if value is not None else None

    @field_validator("cap_add")
    @classmethod
    def _caps(cls, value: list[str]) -> list[str]:
        for cap in value:
            if not re.fullmatch(r"[A-Za-z_]{2,40}", cap):
                raise ValueError(
                    _("'{cap}' is not a capability name such as SYS_PTRACE").format(cap=cap)
                )
        return value


# --- Multi-node (issue 18): where the nodes come from and how their agents start ------------
# Everything here ends up on a command line (ssh argv, an sbatch script), so every value is
# checked against a strict pattern here: anything that could read as an option or as shell is
# refused with the field's name, never quoted into something else later.
_HOST = r"(?:[A-Za-z0-9][A-Za-z0-9_.-]*@)?[A-Za-z0-9][A-Za-z0-9_.-]*(?::[0-9]{1,5})?"
_ENDPOINT = r"[A-Za-z0-9][A-Za-z0-9_.-]*:[0-9]{1,5}"
_SLURM_NAME = r"[A-Za-z0-9][A-Za-z0-9_.,-]*"
_SLURM_TIME = r"(?:[0-9]+-)?[0-9]+(?::[0-9]{1,2}){0,2}|UNLIMITED|INFINITE"
_SLURM_OPTION = r"--[a-z][a-z0-9-]*(?:=[A-Za-z0-9_.,:/@%+=-]+)?"
_MODULE = r"[A-Za-z0-9][A-Za-z0-9_.+/-]*"


def _matches(pattern: str, value: str, what: str) -> str:
    if not re.fullmatch(pattern, value):
        raise ValueError(_("'{value}' is not {what}").format(value=value, what=what))
    return value


class SshConfig(_Strict):
    """How node 0 reaches the other nodes: OpenSSH with the user's own keys and known_hosts."""

    port: int = Field(22, ge=1, le=65535, description="sshd port when a node names none")
    user: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    identity_file: str | None = Field(None, description="a private key file (default: ssh's)")
    known_hosts_file: str | None = Field(None, description="default: ~/.ssh/known_hosts")
    connect_timeout: int = Field(10, ge=1, le=600, description="ssh ConnectTimeout, seconds")


class SlurmConfig(_Strict):
    """The sbatch options of a Slurm launch; each value is checked, none is passed raw."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = Field(None, description="sbatch --time, e.g. 1-12:00:00")
    gpus_per_node: int | None = Field(None, ge=0, le=64)
    cpus_per_task: int | None = Field(None, ge=1, le=1024)
    mem: str | None = Field(None, pattern=r"^[0-9]+[KMGT]?$", description="per node, e.g. 480G")
    extra_options: list[str] = Field(
        default_factory=list, description="more sbatch options, each '--name=value'"
    )
    modules: list[str] = Field(default_factory=list, description="'module load' before srun")

    @field_validator("partition", "account", "qos")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _matches(_SLURM_NAME, value, "a Slurm name")

    @field_validator("time_limit")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        what = "a Slurm time like 90, 12:00:00 or 1-12:00:00"
        return None if value is None else _matches(_SLURM_TIME, value, what)

    @field_validator("extra_options")
    @classmethod
    def _options(cls, value: list[str]) -> list[str]:
        for option in value:
            _matches(_SLURM_OPTION, option, "an sbatch option like --constraint=a100")
        return value

    @field_validator("modules")
    @classmethod
    def _modules(cls, value: list[str]) -> list[str]:
        for module in value:
            _matches(_MODULE, module, "a module name like cuda/12.4")
        return value


def _multinode_checks(launch: LaunchConfig) -> None:
    """The node list, the node count and the scheduler must agree (called by LaunchConfig)."""
    if launch.scheduler == "local":
        if launch.nodes:
            raise ValueError(_("launch.nodes is set but launch.scheduler is 'local': use 'ssh'"))
        return
    if launch.runner != "host" and launch.scheduler == "slurm":
        raise ValueError(
            _(
                "launch.scheduler 'slurm' runs torchrun on each node's host: set launch.runner: "
                "host (with environment.venv on every node), or use scheduler ssh for docker"
            )
        )
    if launch.scheduler == "ssh":
        if not launch.nodes:
            raise ValueError(_("launch.scheduler 'ssh' needs launch.nodes: [node0, node1, ...]"))
        if launch.nnodes != len(launch.nodes):
            raise ValueError(
                _(
                    "launch.nnodes is {nnodes} but launch.nodes lists {count}: set nnodes: {count}"
                ).format(nnodes=launch.nnodes, count=len(launch.nodes))
            )
    elif launch.nodes:
        raise ValueError(
            _("launch.nodes is for 'ssh': with 'slurm' the allocation names the nodes")
        )


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
    nproc_per_node: int = Field(1, ge=1, le=1024)
    nnodes: int = Field(1, ge=1, le=100_000)
    node_rank: int = Field(0, ge=0, le=100_000)
    master_addr: str | None = None
    master_port: int = Field(29500, ge=1, le=65535)
    env: dict[str, str] = Field(default_factory=dict)
    max_restarts: int = Field(
        0,
        ge=0,
        le=100,
        description="after a crash, resume from the last complete checkpoint up to N times",
    )
    oom_fallback: bool = Field(
        True,
        description="an out-of-memory in the first steps restarts on the next smaller candidate "
        "tune ranks (fallback.json; docs/launch.md)",
    )
    # Multi-node (issue 18; docs/multi-node.md).
    scheduler: Literal["local", "ssh", "slurm"] = Field(
        "local", description="local: this machine; ssh: launch.nodes over SSH; slurm: sbatch"
    )
    nodes: list[str] = Field(
        default_factory=list, description="[user@]host[:sshport], node 0 first"
    )
    rdzv_endpoint: str | None = Field(
        None, description="host:port of the c10d rendezvous; None: node 0 and master_port"
    )
    rdzv_timeout: int = Field(
        600, ge=1, le=86400, description="seconds to wait for every node to join"
    )
    ssh: SshConfig = Field(default_factory=SshConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)

    @field_validator("nodes")
    @classmethod
    def _node_names(cls, value: list[str]) -> list[str]:
        for node in value:
            _matches(_HOST, node, "a node like host, user@host or host:2222")
        return value

    @field_validator("rdzv_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        return None if value is None else _matches(_ENDPOINT, value, "host:port")

    @model_validator(mode="after")
    def _multinode(self) -> LaunchConfig:
        _multinode_checks(self)
        return self

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env_keys(value)


# --- LoRA / QLoRA / DeepSpeed ZeRO (issue 21; backend/entry/lora.py, backend/plan/deepspeed.py) --
LORA_BIASES = ("none", "all", "lora_only")


class LoraSettings(_Strict):
    """FastChat's ``train_lora.py`` LoraArguments, same names and defaults (q_lora: method)."""

    lora_r: int = Field(8, ge=1, le=4096, description="adapter rank")
    lora_alpha: int = Field(16, ge=1, description="scale; the update is alpha / r times BA")
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    lora_target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "v_proj"],
        min_length=1,
        description="module names that get adapters (Llama: q_proj k_proj v_proj o_proj ...)",
    )
    lora_weight_path: str = Field("", description="FastChat's flag; unused by its train_lora")
    lora_bias: Literal["none", "all", "lora_only"] = "none"

    @field_validator("lora_target_modules")
    @classmethod
    def _module_names(cls, value: list[str]) -> list[str]:
        for name in value:
            _matches(r"[A-Za-z_][A-Za-z0-9_.]*", name, "a module name like q_proj")
        return value


class ZeroSettings(_Strict):
    """DeepSpeed ZeRO instead of FSDP: trainwiz writes the JSON config into the run dir."""

    stage: Literal[2, 3] = Field(3, description="2: shard optimizer+grads; 3: also the weights")
    offload_optimizer: bool = Field(False, description="Adam states in host RAM (CPU-Adam)")
    offload_param: bool = Field(False, description="stage 3 only: weights in host RAM")

    @model_validator(mode="after")
    def _param_offload_needs_stage3(self) -> ZeroSettings:
        if self.offload_param and self.stage != 3:
            raise ValueError(
                _("offload_param needs stage: 3 (stage 2 keeps every weight on the GPU)")
            )
        return self


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
    num_train_epochs: float = Field(3.0, gt=0, le=100_000)
    per_device_train_batch_size: int = Field(8, ge=1, le=65536)
    per_device_eval_batch_size: int = Field(8, ge=1, le=65536)
    gradient_accumulation_steps: int = Field(1, ge=1, le=65536)
    eval_strategy: Literal["no", "steps", "epoch"] = Field("no", alias="evaluation_strategy")
    eval_steps: float | None = Field(None, gt=0, le=BIG)
    save_strategy: Literal["no", "steps", "epoch", "best"] = "steps"
    save_steps: float = Field(500, gt=0, le=BIG)
    save_total_limit: int | None = Field(None, ge=1, le=BIG)
    learning_rate: float = Field(5e-5, gt=0, le=10)
    weight_decay: float = Field(0.0, ge=0, le=10)
    warmup_ratio: float = Field(0.0, ge=0, le=1)
    lr_scheduler_type: str = "linear"
    logging_steps: float = Field(500, gt=0, le=BIG)
    fsdp: str = Field("", description="e.g. 'full_shard auto_wrap offload'")
    fsdp_transformer_layer_cls_to_wrap: str | None = None
    tf32: bool | None = None
    model_max_length: int = Field(512, ge=8, le=2**22)
    gradient_checkpointing: bool = False
    lazy_preprocess: bool = False
    # FastChat's own arguments beyond the seed's command.
    eval_data_path: str | None = None
    padding_side: Literal["right", "left"] = "right"
    trust_remote_code: bool = False
    cache_dir: str | None = None
    optim: str = "adamw_torch"
    # Common Hugging Face arguments.
    max_steps: int = Field(-1, ge=-1, le=BIG, description="-1: unset (HF: epochs decide)")
    warmup_steps: int = Field(0, ge=0, le=BIG)
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    adam_beta2: float = Field(0.999, ge=0, lt=1)
    adam_epsilon: float = Field(1e-8, gt=0, le=1)
    max_grad_norm: float = Field(1.0, ge=0, le=1e6)
    fp16: bool = False
    fsdp_config: dict[str, Any] | None = None
    deepspeed: str | None = None
    # Issue 21: training method and ZeRO (rendered by backend/plan/hf_flags.py, not as-is).
    method: Literal["full", "lora", "qlora"] = Field(
        "full", description="full fine-tune, LoRA adapters, or QLoRA (4-bit base, CUDA only)"
    )
    lora: LoraSettings = Field(default_factory=LoraSettings)
    zero: ZeroSettings | None = Field(None, description="DeepSpeed ZeRO; None: FSDP or plain DDP")
    seed: int = Field(42, ge=0, le=2**32 - 1)
    dataloader_num_workers: int = Field(0, ge=0, le=1024)
    report_to: str | None = None
    ddp_timeout: int = Field(1800, gt=0, le=30 * 86400)
    logging_first_step: bool = False
    disable_tqdm: bool | None = None
    # trainwiz entry only (not FastChat flags): attention implementation, time-based checkpoints,
    # a held-out eval split of data_path (docs/checkpoints.md).
    attn_implementation: Literal["auto", "flash_attention_2", "sdpa", "eager"] = "auto"
    # Throughput on real data (issue 16). packing/pack_tokens are the trainwiz entry's (off by
    # default, so the seed stays the seed); the kernel and compile switches are Hugging Face's
    # own flags, which the entry turns off with a log line where the installed stack lacks them.
    packing: bool = Field(
        False,
        description="pack whole conversations into rows of pack_tokens (no padding); trainwiz "
        "entry only",
    )
    pack_tokens: int | None = Field(
        None, ge=8, le=2**22, description="tokens per packed row; None: model_max_length"
    )
    use_liger_kernel: bool = Field(
        False, description="Liger's Triton kernels (RMSNorm, RoPE, SwiGLU, fused linear CE)"
    )
    torch_compile: bool = Field(False, description="torch.compile the model (startup cost)")
    save_minutes: float | None = Field(
        None,
        gt=0,
        le=10080,
        description="also checkpoint when this many minutes passed since the last one",
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
            raise ValueError(_("bf16 and fp16 are both on: choose one (bf16 on Ampere or newer)"))
        if self.pack_tokens is not None and self.pack_tokens < self.model_max_length:
            raise ValueError(
                _(
                    "pack_tokens {pack_tokens} is below model_max_length {model_max_length}: a "
                    "conversation must fit one packed row"
                ).format(pack_tokens=self.pack_tokens, model_max_length=self.model_max_length)
            )
        _method_checks(self)
        return self

    @field_validator("fsdp_config")
    @classmethod
    def _fsdp_config(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value)) > MAX_TEXT:
            raise ValueError(
                _("fsdp_config is larger than {MAX_TEXT} characters as JSON").format(
                    MAX_TEXT=MAX_TEXT
                )
            )
        return value


MirrorProfile = Literal["auto", "cn", "none", "custom"]


class MirrorLists(_Strict):
    """Candidate mirrors by what they serve, in order of preference (a ``custom`` profile)."""

    pypi: list[str] = Field(default_factory=list, description="PEP 503 simple index URLs")
    hub: list[str] = Field(default_factory=list, description="Hugging Face Hub endpoints")
    registry: list[str] = Field(
        default_factory=list,
        description="Docker registries serving Docker Hub images (host[:port], or http://host:port)",
    )
    modelscope: list[str] = Field(default_factory=list, description="ModelScope endpoints")


class MirrorsConfig(_Strict):
    """Which mirrors the downloads of the chain go through (docs/mirrors.md).

    none: the preset's own URLs as written. cn: the China mirrors (Tsinghua, Aliyun, USTC,
    Douban; hf-mirror.com; registry mirrors). auto: the official endpoints and the China
    mirrors, each probed; the fastest that answers correctly wins. custom: the lists in
    ``custom``, probed the same way. A preset may write just ``mirrors: auto``.
    """

    profile: MirrorProfile = "none"
    custom: MirrorLists | None = None
    probe_timeout_s: float = Field(2.0, gt=0, le=30, description="per candidate")
    probe_budget_s: float = Field(4.0, gt=0, le=60, description="all probes together")
    resolved: dict[str, Any] | None = Field(
        None,
        description="written by trainwiz when it probes: each choice, its reason and every "
        "probe's timing (mirrors.json in a run); a preset carrying it is not probed again",
    )

    @field_validator("resolved")
    @classmethod
    def _resolved_bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """A record trainwiz wrote, but it arrives in presets people pass around: bounded
        like every other text (its URLs end up in the plan)."""
        if value is not None and len(json.dumps(value, default=str)) > MAX_TEXT:
            raise ValueError(
                _("resolved is larger than {MAX_TEXT} characters as JSON").format(MAX_TEXT=MAX_TEXT)
            )
        return value

    @model_validator(mode="before")
    @classmethod
    def _profile_shorthand(cls, value: Any) -> Any:
        return {"profile": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _custom_needs_lists(self) -> MirrorsConfig:
        if self.profile == "custom" and self.custom is None:
            raise ValueError(
                _("profile 'custom' needs a 'custom' block with pypi/hub/registry lists")
            )
        return self


def _method_checks(args: TrainingArgs) -> None:
    """LoRA settings without LoRA, and ZeRO next to FSDP or a config path, are contradictions."""
    if args.method == "full" and args.lora != LoraSettings():
        raise ValueError(_("training.lora is set but training.method is 'full': set method: lora"))
    if args.method != "full" and args.fsdp:
        raise ValueError(
            _(
                "training.method '{method}' with training.fsdp: FastChat's LoRA path shards with "
                "DeepSpeed, not FSDP; remove fsdp (use training.zero on several GPUs)"
            ).format(method=args.method)
        )
    if args.zero is not None and args.fsdp:
        raise ValueError(
            _("training.zero and training.fsdp are both set: choose one (remove fsdp)")
        )
    if args.zero is not None and args.deepspeed:
        raise ValueError(
            _(
                "training.zero and training.deepspeed are both set: zero writes the config, "
                "deepspeed points at your own; keep one"
            )
        )


class Preset(_Strict):
    """A whole training job. ``schema`` is the version, so old presets can be migrated."""

    schema_version: Literal[1] = Field(1, alias="schema")
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100)
    description: str = ""
    model: ModelSource
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    container: ContainerConfig = Field(default_factory=ContainerConfig)
    launch: LaunchConfig = Field(default_factory=LaunchConfig)
    training: TrainingArgs
    mirrors: MirrorsConfig = Field(default_factory=MirrorsConfig)

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
                _(
                    "training.eval_strategy is '{eval_strategy}' but training.eval_data_path is "
                    "empty: set eval_data_path, eval_split (e.g. 0.05) or eval_strategy: 'no'"
                ).format(eval_strategy=self.training.eval_strategy)
            )
        if self.launch.entry != "trainwiz":
            for name in ("eval_split", "save_minutes"):
                if getattr(self.training, name) is not None:
                    raise ValueError(
                        _(
                            "training.{name} needs launch.entry 'trainwiz' (FastChat's train_mem.py has no "
                            "such option): set entry: trainwiz or drop {name}"
                        ).format(name=name)
                    )
        if self.training.eval_split and self.training.eval_data_path:
            raise ValueError(
                _("training.eval_split and training.eval_data_path are both set: choose one")
            )
        if self.training.packing and self.launch.entry != "trainwiz":
            raise ValueError(
                _(
                    "training.packing needs launch.entry 'trainwiz' (FastChat's train_mem.py pads "
                    "every sample): set launch.entry: trainwiz or packing: false"
                )
            )
        if self.launch.device == "cpu" and (self.training.bf16 or self.training.tf32):
            raise ValueError(_("launch.device 'cpu' cannot use bf16/tf32: set them to false"))
        if self.launch.device == "cpu" and self.training.method == "qlora":
            raise ValueError(
                _(
                    "training.method 'qlora' needs a CUDA GPU (bitsandbytes 4-bit weights): use "
                    "method: lora on launch.device 'cpu', or launch.device: cuda"
                )
            )
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
