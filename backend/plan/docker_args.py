"""The container step: the preset's container options as `docker run` flags and SDK kwargs.

One function walks the options once and fills both forms, so the command a user reads is the
command trainwiz executes through the docker SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.i18n import _
from backend.images import build as image_build
from backend.plan.types import Decided, PlanStep
from backend.preset.schema import Preset

if TYPE_CHECKING:
    from backend.plan.types import Decided, PlanStep

LABEL_RUN = "trainwiz.run_id"  # every container of a run carries these (docker_runner finds them)
LABEL_PRESET = "trainwiz.preset"


def container_options(preset: Preset, run_dir: Path | None) -> tuple[list[str], dict[str, Any]]:
    """(docker run flags, docker SDK ``containers.run`` kwargs) for the preset."""
    c = preset.container
    flags: list[str] = []
    sdk: dict[str, Any] = {}
    mode = "".join(letter for letter, on in (("i", c.interactive), ("t", c.tty), ("d", True)) if on)
    flags.append(f"-{mode}")
    sdk.update(detach=True, stdin_open=c.interactive, tty=c.tty)
    if c.remove:
        flags.append("--rm")
        sdk["auto_remove"] = True
    if c.gpus:
        flags += ["--gpus", c.gpus]
        count = -1 if c.gpus == "all" else None
        request: dict[str, Any] = {"Driver": "", "Capabilities": [["gpu"]]}
        if count is not None:
            request["Count"] = count
        else:
            ids = c.gpus.removeprefix("device=").strip('"').split(",")
            if c.gpus.isdigit():
                request["Count"] = int(c.gpus)
            else:
                request["DeviceIDs"] = ids
        sdk["device_requests"] = [request]
    if c.privileged:
        flags.append("--privileged")
        sdk["privileged"] = True
    for cap in c.cap_add:
        flags.append(f"--cap-add={cap}")
    if c.cap_add:
        sdk["cap_add"] = list(c.cap_add)
    for limit in c.ulimits:
        flags += ["--ulimit", f"{limit.name}={limit.value}"]
    if c.ulimits:
        sdk["ulimits"] = [
            {"Name": u.name, "Soft": u.soft_hard()[0], "Hard": u.soft_hard()[1]} for u in c.ulimits
        ]
    volumes = list(c.volumes)
    binds: list[str] = []
    for vol in volumes:
        spec = f"{vol.host}:{vol.container}" + (":ro" if vol.mode == "ro" else "")
        flags += ["-v", spec]
        binds.append(f"{vol.host}:{vol.container}:{vol.mode}")
    if run_dir is not None:
        # The run dir (entry or FastChat's wrapper, logs, metrics) is mounted at the same path
        # inside the container.
        flags += ["-v", f"{run_dir}:{run_dir}"]
        binds.append(f"{run_dir}:{run_dir}:rw")
    if binds:
        sdk["volumes"] = binds
    if c.network:
        flags.append(f"--net={c.network}")
        sdk["network_mode"] = c.network
    if c.ipc:
        flags.append(f"--ipc={c.ipc}")
        sdk["ipc_mode"] = c.ipc
    if c.shm_size:
        flags.append(f"--shm-size={c.shm_size}")
        sdk["shm_size"] = c.shm_size
    env = {**c.env}
    for key, value in env.items():
        flags += ["-e", f"{key}={value}"]
    if env:
        sdk["environment"] = env
    workdir = c.workdir
    if workdir:
        flags += ["-w", workdir]
        sdk["working_dir"] = workdir
    if c.name:
        flags.append(f"--name={c.name}")
        sdk["name"] = c.name
    return flags, sdk


def container_step(
    preset: Preset, run_dir: Path | None, train: PlanStep, decided: Decided | None = None
) -> PlanStep:
    decided = decided or Decided()
    flags, sdk = container_options(preset, run_dir)
    image = preset.environment.image
    if preset.environment.mode == "image":
        image = decided.image or image_build.env_image_tag(preset)
    if decided.labels:  # what trainwiz stop / runs find the container by
        for key, value in decided.labels.items():
            flags.append(f"--label={key}={value}")
        sdk["labels"] = dict(decided.labels)
    if preset.environment.mode == "image":  # the training's own env is the container's
        for key, value in train.env.items():
            flags += ["-e", f"{key}={value}"]
    argv = ["docker", "run", *flags, image]
    sdk["image"] = image
    if preset.environment.mode == "image":
        # The training is the container's command; -it makes no sense for a batch job.
        argv = [a for a in argv if a not in ("-itd", "-id", "-td")]
        argv.insert(2, "-d")
        sdk.update(stdin_open=False, tty=False)
        for key, value in train.env.items():
            sdk.setdefault("environment", {})[key] = value
        argv += train.argv
        sdk["command"] = list(train.argv)
        if preset.launch.workdir:
            sdk["working_dir"] = preset.launch.workdir
    return PlanStep(
        id="container",
        group="container",
        title=_("Start the training container (detached: survives the SSH session)"),
        argv=argv,
        docker=sdk,
    )
