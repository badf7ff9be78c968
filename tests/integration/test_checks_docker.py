"""Docker checks against the real daemon CI starts (scripts/ci-docker.sh): version, data root,
runtimes, image presence, and a user who is not allowed on the socket."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import traceback
from pathlib import Path

import pytest

from backend.checks import Targets, run_checks
from backend.checks.context import DEFAULT_DOCKER_HOST, IMAGE_DISK_ESTIMATE
from tests.backend.test_checks_host import make_preset

pytestmark = pytest.mark.docker
BASE_IMAGE = os.environ.get("TRAINWIZ_BASE_IMAGE", "trainwiz-base:bookworm")


def _docker(*args: str) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        pytest.fail(
            f"docker {' '.join(args)} failed ({done.stderr.strip()}): run scripts/ci-docker.sh"
        )
    return done.stdout.strip()


@pytest.fixture(scope="module")
def daemon() -> dict[str, str]:
    return {
        "host": os.environ.get("DOCKER_HOST") or DEFAULT_DOCKER_HOST,
        "version": _docker("version", "--format", "{{.Server.Version}}"),
        "root": _docker("info", "--format", "{{.DockerRootDir}}"),
        "runtimes": _docker("info", "--format", "{{json .Runtimes}}"),
    }


def _docker_preset(tmp_path: Path, image: str):  # type: ignore[no-untyped-def]
    return make_preset(
        tmp_path,
        environment={"image": image},
        launch={"runner": "docker", "device": "cuda"},
        container={"ipc": "host"},
    )


def test_running_daemon_version_root_and_runtimes(tmp_path: Path, daemon: dict[str, str]) -> None:
    preset = _docker_preset(tmp_path, BASE_IMAGE)
    results = {
        r.id: r
        for r in run_checks(
            preset,
            targets=Targets(docker_host=daemon["host"]),
            only=["docker_daemon", "docker_access", "nvidia_runtime", "gpu_probe", "disk"],
        )
    }
    got = results["docker_daemon"]
    assert got.status == "ok", got.summary
    assert got.data["version"] == daemon["version"]
    assert got.data["data_root"] == daemon["root"]
    runtimes = sorted(json.loads(daemon["runtimes"]))
    runtime = results["nvidia_runtime"]
    assert runtime.data["runtimes"] == runtimes
    if "nvidia" in runtimes:
        assert runtime.status == "ok"
    else:  # this CI machine: plain runc, so GPUs cannot reach a container
        assert runtime.status == "fail" and runtime.blocks == ["launch"]
        assert "nvidia-container-toolkit" in runtime.fix and "nvidia-docker2" not in runtime.fix
        assert results["gpu_probe"].status == "skip"
    if os.getuid() == 0:
        assert results["docker_access"].status == "ok"
    disk = {loc["purpose"]: loc for loc in results["disk"].data["locations"]}
    assert disk["docker data root"]["path"] == daemon["root"]
    assert disk["docker data root"]["need"] == 0  # the image is already local


def test_missing_image_needs_room_in_the_data_root_and_the_registry(
    tmp_path: Path, daemon: dict[str, str]
) -> None:
    preset = _docker_preset(tmp_path, "trainwiz-test/not-here:0")
    with __import__("socket").socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v2/"
    targets = Targets(docker_host=daemon["host"], registry_url=dead, network_timeout_s=1)
    results = {r.id: r for r in run_checks(preset, targets=targets, only=["disk", "registry"])}
    disk = {loc["purpose"]: loc for loc in results["disk"].data["locations"]}
    assert disk["docker data root"]["need"] == IMAGE_DISK_ESTIMATE
    assert results["registry"].status == "fail" and results["registry"].blocks == ["image"]
    # The same dead registry is only a warning when the image is already here.
    local = _docker_preset(tmp_path, BASE_IMAGE)
    (registry,) = run_checks(local, targets=targets, only=["registry"])
    assert registry.status == "warn" and "already local" in registry.summary


def test_a_user_outside_the_docker_group_is_told_how_to_join(
    tmp_path: Path, daemon: dict[str, str]
) -> None:
    """A forked child drops to 'nobody' (not in the socket's group) and runs the real checks."""
    assert os.getuid() == 0, "CI runs as root; this test switches to 'nobody'"
    nobody = pwd.getpwnam("nobody")
    preset = make_preset(tmp_path, launch={"runner": "docker"})
    targets = Targets(docker_host=daemon["host"])
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            found = run_checks(preset, targets=targets, only=["docker_access", "docker_daemon"])
            payload = json.dumps([r.model_dump(mode="json") for r in found]).encode()
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
            status = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        raw = pipe.read()
    _, wait_status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(wait_status) == 0
    reach, access = json.loads(raw)  # in CHECKS order
    assert access["status"] == "fail" and "usermod -aG" in access["fix"]
    assert "nobody" in access["summary"] and access["blocks"] == ["image", "launch"]
    assert reach["status"] == "fail" and "permission denied" in reach["summary"]
