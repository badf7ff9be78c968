"""Container options that hand the host to whoever wrote the preset.

A preset is often someone else's file. ``privileged``, ``SYS_ADMIN``/``ALL`` capabilities, a bind
mount of the host's ``/`` (or of ``/etc``, ``/root``...) or of the Docker socket, and loader
variables such as ``LD_PRELOAD`` each let the training container (or the host training process)
run anything as root on the host. They are legitimate for some setups (the seed runs
``--privileged``), so they are not refused: ``container_risks`` lists them, ``check`` and ``plan``
show them, and ``launch``/``replay`` (and the wizard's confirmation) need an explicit yes.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

from backend.i18n import _
from backend.preset.schema import Preset

# Default deny: only Docker's own default set and the few that RDMA/NCCL and schedulers ask for
# are harmless; any other capability (NET_ADMIN, BPF, SYS_BOOT, PERFMON, SYS_TIME...) is a risk.
SAFE_CAPS = {
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
    "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
    "IPC_LOCK", "SYS_NICE", "SYS_RESOURCE",
}  # fmt: skip
# Host paths whose bind mount (of the path itself or of anything below it) gives the
# container the host, its programs or its secrets. ``/home`` itself is listed, not its
# subfolders: a user's data folder is the normal case; a dot-folder of keys is caught below.
SENSITIVE_TREES = (
    "/etc", "/root", "/boot", "/dev", "/proc", "/sys", "/usr", "/bin", "/sbin", "/lib",
    "/lib32", "/lib64", "/libx32", "/var", "/run", "/opt/containerd", "/snap",
)  # fmt: skip
SENSITIVE_HOST_PATHS = ("/", "/home", *SENSITIVE_TREES)
KEY_FOLDERS = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".docker",
    ".kube",
    ".config",
    ".netrc",
    ".git-credentials",
)
DOCKER_SOCKETS = ("docker.sock", "containerd.sock", "podman.sock")
# Variables that make a program load code the preset chose (a library, a module, a startup
# file, an ssh command, a directory searched for programs). Any LD_* counts.
LOADER_VARS = (
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONSTARTUP", "BASH_ENV", "ENV",
    "PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONEXECUTABLE", "PYTHONBREAKPOINT",
    "PYTHONWARNINGS", "PYTHONSAFEPATH", "PATH", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXEC_PATH",
    "GIT_ASKPASS", "SSH_ASKPASS", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_PROXY_COMMAND",
    "PERL5LIB", "PERL5OPT", "RUBYOPT", "NODE_OPTIONS", "CUDA_INJECTION64_PATH",
    "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "PROMPT_COMMAND",
)  # fmt: skip
LOADER_PREFIXES = ("LD_", "GIT_CONFIG_", "DYLD_")


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


def loader_var(key: str) -> bool:
    """Does variable ``key`` make a program run code named by its value?"""
    upper = key.upper()
    return upper in LOADER_VARS or upper.startswith(LOADER_PREFIXES)


def _sensitive(host: str) -> bool:
    if host in SENSITIVE_HOST_PATHS or any(host.startswith(t + "/") for t in SENSITIVE_TREES):
        return True
    return any(part in KEY_FOLDERS for part in host.split("/"))


def _sensitive_host(path: str) -> str:
    """The host path a bind mount really gives: the lexical path, or where its symlinks lead
    (``/data/link -> /etc``) when that is more sensitive."""
    lexical = _normal(path)
    try:
        real = os.path.realpath(os.path.expanduser(path.strip()))
    except (OSError, ValueError):
        return lexical
    real = _normal(real)
    if _sensitive(real) and not _sensitive(lexical):
        return real
    if posixpath.basename(real) in DOCKER_SOCKETS:
        return real
    return lexical


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
        if docker and name not in SAFE_CAPS:
            risks.append(
                Risk(
                    f"container.cap_add[{index}]",
                    _("capability {cap} lets the container escape to the host").format(cap=cap),
                    _("remove {cap} from container.cap_add").format(cap=cap),
                )
            )
    for index, vol in enumerate(c.volumes):
        host = _sensitive_host(vol.host)
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
        elif _sensitive(host):
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
            if loader_var(key):
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
