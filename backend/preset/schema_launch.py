"""Preset section ``launch``: torchrun, the runner, and the nodes (SSH or Slurm)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from backend.i18n import _
from backend.preset.grammar import (
    check_env_keys,
)
from backend.preset.schema_base import _Strict

_HOST = r"(?:[A-Za-z0-9][A-Za-z0-9_.-]*@)?[A-Za-z0-9][A-Za-z0-9_.-]*(?::[0-9]{1,5})?"
_ENDPOINT = r"[A-Za-z0-9][A-Za-z0-9_.-]*:[0-9]{1,5}"
_SLURM_NAME = r"[A-Za-z0-9][A-Za-z0-9_.,-]*"
_SLURM_TIME = r"(?:[0-9]+-)?[0-9]+(?::[0-9]{1,2}){0,2}|UNLIMITED|INFINITE"
_SLURM_OPTION = r"--[a-z][a-z0-9-]*(?:=[A-Za-z0-9_.,:/@%+=-]+)?"
_MODULE = r"[A-Za-z0-9][A-Za-z0-9_.+/-]*"
# sbatch options a preset may never pass: who the job runs as, where its output and working
# directory go (trainwiz sets them: the run dir), what environment it exports (a way to slip
# LD_PRELOAD in) and what runs around it. getopt_long takes unambiguous abbreviations, so a
# prefix of one of these (--out=..., --exp=...) is refused too.
FORBIDDEN_SBATCH = (
    "uid", "gid", "output", "error", "input", "chdir", "export", "export-file",
    "get-user-env", "wrap", "container", "container-id", "prolog", "epilog", "task-prolog",
    "task-epilog", "bcast", "propagate", "job-name", "comment", "parsable", "wckey",
)  # fmt: skip


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
    ntasks_per_node: int = Field(
        1, ge=1, le=64, description="torchrun agents per node (2: two 'nodes' on one host)"
    )

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
            name = option[2:].partition("=")[0]
            if any(f.startswith(name) for f in FORBIDDEN_SBATCH):
                raise ValueError(
                    _(
                        "'{option}': a preset may not set sbatch's --{name} (trainwiz sets who "
                        "runs the job, its output, directory and environment): remove it"
                    ).format(option=option, name=name)
                )
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
    # Multi-node (docs/multi-node.md).
    scheduler: Literal["local", "ssh", "slurm"] = Field(
        "local", description="local: this machine; ssh: launch.nodes over SSH; slurm: sbatch"
    )
    nodes: list[str] = Field(
        default_factory=list, description="[user@]host[:sshport], node 0 first"
    )
    rdzv_endpoint: str | None = Field(
        None,
        description="host:port of the c10d rendezvous; None: node 0 and master_port (Slurm: "
        "the head node and a port the job finds free there)",
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


# --- LoRA / QLoRA / DeepSpeed ZeRO (docs/lora.md; backend/entry/lora.py, backend/plan/deepspeed.py)
