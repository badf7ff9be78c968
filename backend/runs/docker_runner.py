"""The Docker runner: the training as a detached container started through the docker SDK.

The container carries labels (``trainwiz.run_id``, ``trainwiz.preset``) so trainwiz can find its
runs again from the daemon alone; the watcher streams its output into train.log and records the
exit status. Docker keeps the container running whatever happens to the wizard or the watcher.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from backend.errors import TrainwizError
from backend.i18n import _
from backend.images.docker_client import docker_client
from backend.plan.docker_args import LABEL_PRESET, LABEL_RUN  # the plan sets them
from backend.redact import redact_argv
from backend.rundir import CorruptRun, read_status, update_status


def client() -> Any:
    """The shared docker client (backend.images.docker_client), or a TrainwizError saying how
    to get the daemon up."""
    return docker_client()


def sdk_kwargs(raw: dict[str, Any]) -> dict[str, Any]:
    """Plan JSON (plain dicts) -> docker SDK objects (Ulimit, DeviceRequest)."""
    import docker

    kwargs = dict(raw)
    if kwargs.get("ulimits"):
        kwargs["ulimits"] = [
            docker.types.Ulimit(name=u["Name"], soft=u["Soft"], hard=u["Hard"])
            for u in kwargs["ulimits"]
        ]
    if kwargs.get("device_requests"):
        kwargs["device_requests"] = [
            docker.types.DeviceRequest(
                driver=r.get("Driver", ""),
                count=r.get("Count"),
                device_ids=r.get("DeviceIDs"),
                capabilities=r.get("Capabilities"),
            )
            for r in kwargs["device_requests"]
        ]
    return kwargs


def _clear_name(handle: Any, name: str | None, log: IO[bytes]) -> None:
    """A finished container of an earlier trainwiz run may hold the preset's fixed name."""
    if not name:
        return
    import docker

    try:
        old = handle.containers.get(name)
    except docker.errors.NotFound:
        return
    if old.status == "running" or LABEL_RUN not in (old.labels or {}):
        raise TrainwizError(
            _(
                "container.name '{name}' is taken by container {short_id} ({status}): remove it "
                "(docker rm -f {name}) or change container.name"
            ).format(name=name, short_id=old.short_id, status=old.status)
        )
    log.write(
        f"[trainwiz] removing finished container {name} of run {old.labels[LABEL_RUN]}\n".encode()
    )
    old.remove(force=True)


def _remove_earlier_attempt(handle: Any, run_dir: Path, log: IO[bytes]) -> None:
    """A resumed run (``trainwiz resume``, ``launch.max_restarts``) starts a new container; the
    exited one of the attempt before is removed first (its output is in train.log already), so
    a run leaves one container however often it resumed. Only this run's own container, by its
    label, and never a running one."""
    import docker

    try:
        earlier = read_status(run_dir).container_id
    except CorruptRun:
        return
    if not earlier:
        return
    try:
        old = handle.containers.get(earlier)
    except docker.errors.NotFound:
        return  # removed already (container.remove: --rm)
    if (old.labels or {}).get(LABEL_RUN) != run_dir.name:
        return
    if old.status in ("running", "restarting", "paused"):
        raise TrainwizError(
            f"container {old.short_id} of this run's earlier attempt is still {old.status}: "
            f"stop it first (trainwiz stop {run_dir.name})"
        )
    log.write(
        f"[trainwiz] removing the earlier attempt's exited container {old.short_id}\n".encode()
    )
    old.remove(force=True)


def _remove_unstarted(handle: Any, run_id: str) -> None:
    """``containers.run`` creates, then starts: a start that fails (a missing command, a device
    driver the daemon lacks, a broken network) leaves a never-started container behind, which
    nothing would ever remove. Only this run's, by label, and only in the created state."""
    import docker

    label = f"{LABEL_RUN}={run_id}"
    for left in handle.containers.list(all=True, filters={"label": label, "status": "created"}):
        try:
            left.remove(force=True)
        except docker.errors.APIError:
            pass


def _stream(chunks: Any, log: IO[bytes]) -> None:
    for chunk in chunks:
        log.write(chunk)
        log.flush()


def run_container(
    run_dir: Path, spec: dict[str, Any], log: IO[bytes], stop_requested: Callable[[], bool]
) -> int:
    """Start the container, stream its log, run in-container steps, return the exit code."""
    import docker

    handle = client()
    kwargs = sdk_kwargs(spec["docker"])
    kwargs["detach"] = True
    _remove_earlier_attempt(handle, run_dir, log)
    _clear_name(handle, kwargs.get("name"), log)
    try:
        container = handle.containers.run(**kwargs)
    except docker.errors.ImageNotFound as exc:
        raise TrainwizError(
            _("image {get} not found: build it with 'trainwiz env build' first").format(
                get=kwargs.get("image")
            )
        ) from exc
    except docker.errors.APIError as exc:
        log.write(f"docker: {exc.explanation or exc}\n".encode())
        _remove_unstarted(handle, run_dir.name)
        raise TrainwizError(
            _("docker could not start the container: {value}").format(value=exc.explanation or exc)
        ) from exc
    execs: list[dict[str, Any]] = spec.get("exec", [])
    update_status(
        run_dir,
        container_id=container.id,
        pid=None,  # a prepare step's pid/pgid would be stale (and reusable) from here on
        pgid=None,
        state="running" if not execs else "starting",
        step="container",
        message=f"container {container.short_id}",
    )
    if not execs:
        _stream(container.logs(stream=True, follow=True), log)
        result = container.wait()
        if spec.get("remove_after"):  # container.remove (--rm), after the exit code is known
            container.remove(force=True)
        return int(result.get("StatusCode", 1))
    code = 0
    for step in execs:
        if stop_requested():
            break
        log.write(
            f"[trainwiz] step {step['id']} (in container): {' '.join(redact_argv(step['argv']))}\n".encode()
        )
        if step["id"] == "train":
            update_status(run_dir, state="running", step="train", message="training")
        else:
            update_status(run_dir, step=step["id"], message=f"step {step['id']}")
        exec_id = handle.api.exec_create(
            container.id,
            step["argv"],
            environment=step.get("env") or None,
            workdir=step.get("workdir") or None,
        )["Id"]
        _stream(handle.api.exec_start(exec_id, stream=True), log)
        code = _exec_exit_code(handle.api, exec_id)
        if code != 0:
            break
    # The idle container would hold its GPUs forever: stop it (or remove it for --rm).
    container.stop(timeout=10)
    if spec.get("remove_after"):
        container.remove(force=True)
    return code


def _exec_exit_code(api: Any, exec_id: str) -> int:
    for _attempt in range(50):
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        time.sleep(0.1)
    return 1


def container_state(container_id: str) -> tuple[str, int | None]:
    """(docker status, exit code) of a container: for runs whose watcher is gone."""
    import docker

    try:
        container = client().containers.get(container_id)
    except docker.errors.NotFound:
        return "gone", None
    state = container.attrs.get("State", {})
    return str(container.status), state.get("ExitCode")


def stop_container(container_id: str, timeout: float) -> None:
    """SIGTERM to the container's init, SIGKILL after ``timeout`` (docker's own stop)."""
    import docker

    try:
        container = client().containers.get(container_id)
    except docker.errors.NotFound:
        return
    container.stop(timeout=int(timeout))


def labelled_containers() -> list[dict[str, Any]]:
    """Every container trainwiz started on this daemon (running or not)."""
    handle = client()
    out = []
    for container in handle.containers.list(all=True, filters={"label": LABEL_RUN}):
        out.append(
            {
                "id": container.id,
                "name": container.name,
                "status": container.status,
                "run_id": container.labels.get(LABEL_RUN),
                "preset": container.labels.get(LABEL_PRESET),
            }
        )
    return out
