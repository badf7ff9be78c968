"""What the checks need to know: the preset's demands and where to look (injectable).

Every network target and socket path is a field here, so tests point them at a dead socket or
an unroutable address and get real failures, and a user behind a mirror gets checks against the
mirror. Values come from the preset first, then the environment (``DOCKER_HOST``,
``HF_ENDPOINT``, ``PIP_INDEX_URL``), then the public defaults.
"""

from __future__ import annotations

import configparser
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend import paths
from backend.checks import sizing
from backend.checks.model import Status
from backend.errors import BadInput
from backend.model.placeholders import resolve_placeholders
from backend.preset.schema import Preset, map_container_path

DEFAULT_HF_ENDPOINT = "https://huggingface.co"
DEFAULT_PIP_INDEX = "https://pypi.org/simple"
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"
# A pytorch/pytorch devel image is ~9 GB compressed and ~20 GB once extracted: what the Docker
# data root must hold before the first pull of an image that is not there yet.
IMAGE_DISK_ESTIMATE = 20 * 1024**3


@dataclass
class Targets:
    """Where checks look. Tests inject these; the CLI builds them from the preset."""

    docker_host: str = DEFAULT_DOCKER_HOST
    hf_endpoint: str = DEFAULT_HF_ENDPOINT
    pip_index: str = DEFAULT_PIP_INDEX
    registry_url: str | None = "https://registry-1.docker.io/v2/"
    shm_path: str = "/dev/shm"
    meminfo_path: str = "/proc/meminfo"
    network_timeout_s: float = 3.0


@dataclass
class Needs:
    """What the preset asks of the machine (None: no preset, so report without judging)."""

    runner: str = "docker"
    device: str = "cuda"
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_port: int = 29500
    host_network: bool = True
    image: str | None = None
    container_gpus: bool = True
    ipc_host: bool = False
    shm_size: str | None = None
    container_memlock: str | None = None
    bf16: bool = False
    tf32: bool = False
    flash_attn: str = "auto"
    offload: bool = False
    model_source: str = "hf"
    fastchat_editable: bool = False
    host_venv: bool = False
    model_dir: Path | None = None
    output_dir: Path | None = None
    params: int | None = None
    params_source: str = ""
    model_bytes_present: int = 0
    checkpoints: int | None = 1
    save_strategy: str = "steps"
    planned: sizing.PlannedSizes | None = None  # the planner's sizes (GPU presets)


@dataclass
class CheckContext:
    """Shared by all checks of one run; ``preset`` is None for a plain machine survey."""

    preset: Preset | None
    needs: Needs
    targets: Targets
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _memo: dict[str, _Pending] = field(default_factory=dict, repr=False)

    @property
    def judged(self) -> bool:
        """With no preset, nothing is known to be required: missing things warn, never fail."""
        return self.preset is not None

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """Compute a shared probe once per run (docker info is asked by several checks)."""
        with self._lock:
            pending = self._memo.setdefault(key, _Pending())
        return pending.get(compute)

    def severity(self, status: Status) -> Status:
        """Without a preset nothing is known to be required, so a failure is only a warning."""
        if status == "fail" and not self.judged:
            return "warn"
        return status


class _Pending:
    """A value computed by the first caller while the others wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None

    def get(self, compute: Callable[[], Any]) -> Any:
        with self._lock:
            if not self._done:
                try:
                    self._value = compute()
                except BaseException as exc:
                    self._error = exc
                self._done = True
        if self._error is not None:
            raise self._error
        return self._value


def host_path(value: str, field_name: str = "") -> Path:
    """A preset path on the host, placeholders resolved by the one resolver launch uses.

    No run exists at check time, so ``@run`` stands for the runs folder it will be created in;
    ``@home`` alone (trainwiz's own state) is refused here exactly as at launch.
    """
    try:
        return Path(resolve_placeholders(value, run_dir=paths.runs_dir())).expanduser()
    except BadInput as exc:
        if not field_name:
            raise
        raise BadInput([f"{field_name}: {problem}" for problem in exc.problems]) from None


def pip_index_from_config() -> str | None:
    """The index pip would use: PIP_INDEX_URL, else the first pip config file that sets it."""
    env = os.environ.get("PIP_INDEX_URL")
    if env:
        return env
    candidates = [
        os.environ.get("PIP_CONFIG_FILE") or "",
        str(Path.home() / ".config" / "pip" / "pip.conf"),
        str(Path.home() / ".pip" / "pip.conf"),
        "/etc/xdg/pip/pip.conf",
        "/etc/pip.conf",
    ]
    for candidate in candidates:
        if not candidate or not Path(candidate).is_file():
            continue
        parser = configparser.ConfigParser()
        try:
            parser.read(candidate)
        except configparser.Error:
            continue
        for section in ("install", "global"):
            if parser.has_option(section, "index-url"):
                return parser.get(section, "index-url").split()[0]
    return None


def registry_for(image: str) -> str:
    """The registry API URL an image reference pulls from (Docker Hub when none is named)."""
    first, sep, _ = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"https://{first}/v2/"
    return "https://registry-1.docker.io/v2/"


def targets_for(preset: Preset | None) -> Targets:
    targets = Targets(docker_host=os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST)
    targets.hf_endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_HF_ENDPOINT
    targets.pip_index = pip_index_from_config() or DEFAULT_PIP_INDEX
    if preset is not None:
        if preset.model.endpoint:
            targets.hf_endpoint = preset.model.endpoint
        if preset.model.source == "git_lfs" and preset.model.git_url:
            url = re.match(r"^(https?://[^/]+)", preset.model.git_url)
            if url:
                targets.hf_endpoint = url.group(1)
        if preset.environment.pip_index_url:
            targets.pip_index = preset.environment.pip_index_url
        targets.registry_url = registry_for(preset.environment.image)
    return targets


def needs_for(preset: Preset | None) -> Needs:
    if preset is None:
        return Needs(model_dir=paths.models_dir(), output_dir=paths.runs_dir(), checkpoints=None)
    launch, container, training = preset.launch, preset.container, preset.training
    needs = Needs(
        runner=launch.runner,
        device=launch.device,
        nproc=launch.nproc_per_node,
        nnodes=launch.nnodes,
        node_rank=launch.node_rank,
        master_port=launch.master_port,
        host_network=launch.runner == "host" or container.network == "host",
        image=preset.environment.image,
        container_gpus=bool(container.gpus),
        ipc_host=container.ipc == "host",
        shm_size=container.shm_size,
        bf16=training.bf16,
        tf32=bool(training.tf32),
        flash_attn=preset.environment.flash_attn.install,
        offload="offload" in training.fsdp.split(),
        model_source=preset.model.source,
        fastchat_editable=preset.environment.fastchat.source == "editable",
        host_venv=bool(preset.environment.venv),
        save_strategy=training.save_strategy,
    )
    for ulimit in container.ulimits:
        if ulimit.name == "memlock":
            needs.container_memlock = ulimit.value
    needs.model_dir = host_path(preset.model.dir, "model.dir")
    output = training.output_dir
    if launch.runner == "docker" and not output.startswith("@"):
        output = map_container_path(output, container.volumes, launch.workdir)
    needs.output_dir = host_path(output, "training.output_dir")
    needs.model_bytes_present = sizing.weights_bytes(needs.model_dir)
    needs.params, needs.params_source = sizing.param_count(preset, needs.model_dir)
    needs.planned = sizing.planned_sizes(preset)
    if training.save_strategy == "no" and not training.save_minutes:
        needs.checkpoints = 0
    else:
        needs.checkpoints = training.save_total_limit
    return needs


def build_context(preset: Preset | None, targets: Targets | None = None) -> CheckContext:
    return CheckContext(
        preset=preset, needs=needs_for(preset), targets=targets or targets_for(preset)
    )
