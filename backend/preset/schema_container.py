"""Preset section ``container``: how docker runs the training container, and path mapping."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
)

from backend.i18n import _
from backend.preset.grammar import (
    check_env_keys,
    check_no_option,
)
from backend.preset.schema_base import _Strict


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


# --- Multi-node (docs/multi-node.md): where the nodes come from and how their agents start ---
# Everything here ends up on a command line (ssh argv, an sbatch script), so every value is
# checked against a strict pattern here: anything that could read as an option or as shell is
# refused with the field's name, never quoted into something else later.


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
