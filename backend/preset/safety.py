"""Container options that hand the host to whoever wrote the preset.

A preset is often someone else's file. ``privileged``, ``SYS_ADMIN``/``ALL`` capabilities, a bind
mount of the host's ``/`` (or of ``/etc``, ``/root``...) or of the Docker socket, and loader
variables such as ``LD_PRELOAD`` each let the training container (or the host training process)
run anything as root on the host. They are legitimate for some setups (the seed runs
``--privileged``), so they are not refused: ``container_risks`` lists them, ``check`` and ``plan``
show them, and ``launch``/``replay`` (and the wizard's confirmation) need an explicit yes.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from backend.i18n import _
from backend.preset.schema import Preset

DANGEROUS_CAPS = {"ALL", "SYS_ADMIN", "SYS_MODULE", "SYS_RAWIO", "SYS_PTRACE", "DAC_READ_SEARCH"}
# Host paths whose bind mount gives the container the host (or its secrets).
SENSITIVE_HOST_PATHS = (
    "/", "/etc", "/root", "/home", "/boot", "/dev", "/proc", "/sys", "/usr", "/bin", "/sbin",
    "/lib", "/var", "/var/lib/docker", "/run", "/var/run",
)  # fmt: skip
DOCKER_SOCKETS = ("docker.sock", "containerd.sock", "podman.sock")
LOADER_VARS = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONSTARTUP", "BASH_ENV", "ENV")


@dataclass(frozen=True)
class Risk:
    """One dangerous option: the preset field, what it allows, and how to drop it."""

    field: str
    message: str
    fix: str

    def line(self) -> str:
        return f"{self.field}: {self.message}; {self.fix}"


def _normal(path: str) -> str:
    norm = posixpath.normpath("/" + path.strip().lstrip("/"))
    return "/" if norm in ("//", "/.") else norm


def container_risks(preset: Preset) -> list[Risk]:
    """Every option of ``preset`` that gives its container or process power over the host."""
    risks: list[Risk] = []
    c = preset.container
    docker = preset.launch.runner == "docker"
    if docker and c.privileged:
        risks.append(
            Risk(
                "container.privileged",
                _("a privileged container is root on the host (every device, every capability)"),
                _("set container.privileged: false (GPUs need only --gpus)"),
            )
        )
    for index, cap in enumerate(c.cap_add):
        name = cap.upper().removeprefix("CAP_")
        if docker and name in DANGEROUS_CAPS:
            risks.append(
                Risk(
                    f"container.cap_add[{index}]",
                    _("capability {cap} lets the container escape to the host").format(cap=cap),
                    _("remove {cap} from container.cap_add").format(cap=cap),
                )
            )
    for index, vol in enumerate(c.volumes):
        host = _normal(vol.host)
        where = f"container.volumes[{index}].host"
        if not docker:
            continue
        if posixpath.basename(host) in DOCKER_SOCKETS:
            risks.append(
                Risk(
                    where,
                    _(
                        "mounting {host} gives the container control of the Docker daemon (root on the host)"
                    ).format(host=vol.host),
                    _("remove this volume"),
                )
            )
        elif host in SENSITIVE_HOST_PATHS:
            mode = "read-only" if vol.mode == "ro" else "writable"
            risks.append(
                Risk(
                    where,
                    _("mounts the host's {host} {mode} into the container").format(
                        host=host, mode=mode
                    ),
                    _("mount only the model, data and output directories"),
                )
            )
    for section, env in (("launch.env", preset.launch.env), ("container.env", c.env)):
        for key in env:
            if key.upper() in LOADER_VARS:
                risks.append(
                    Risk(
                        f"{section}.{key}",
                        _("{key} makes every program load code chosen by the preset").format(
                            key=key
                        ),
                        _("remove {key} from {section}").format(key=key, section=section),
                    )
                )
    return risks


def risk_summary(risks: list[Risk]) -> str:
    """The fields, comma-separated, for one-line refusals."""
    return ", ".join(r.field for r in risks)
