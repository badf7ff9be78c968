"""A preset cannot make trainwiz run code it names without the user's explicit yes.

``launch.env.PYTHONPATH`` holding a ``sitecustomize.py`` runs that file in every Python the
run starts; PATH, GIT_SSH_COMMAND and any LD_* do the same for programs, ssh and the loader.
Capabilities beyond Docker's defaults, bind mounts of system trees (or of a symlink to one) and
sbatch options that change who runs the job or where it writes are the same kind of power.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.preset.safety import container_risks
from backend.preset.schema import Preset
from tests.security.test_container_risks import _data

ROOT = Path(__file__).resolve().parents[2]
CODE_VARS = [
    "PYTHONPATH", "PATH", "PYTHONSTARTUP", "PYTHONHOME", "GIT_SSH_COMMAND", "GIT_SSH",
    "LD_BIND_NOW", "LD_DEBUG_OUTPUT", "PYTHONWARNINGS", "NODE_OPTIONS", "CUDA_INJECTION64_PATH",
]  # fmt: skip


def _fields(data: dict[str, object]) -> list[str]:
    return [r.field for r in container_risks(Preset.model_validate(data))]


@pytest.mark.parametrize("key", CODE_VARS)
@pytest.mark.parametrize("section", ["launch", "container"])
def test_code_loading_variables_are_flagged(tmp_path: Path, key: str, section: str) -> None:
    data = _data(tmp_path)
    data["launch"] = {"runner": "host"} if section == "launch" else {}
    target = data["launch"] if section == "launch" else data["container"]
    assert isinstance(target, dict)
    target["env"] = {key: "/tmp/evil"}
    assert f"{section}.env.{key}" in _fields(data)


@pytest.mark.parametrize("cap", ["NET_ADMIN", "BPF", "SYS_BOOT", "PERFMON", "SYS_TIME", "cap_bpf"])
def test_capabilities_beyond_the_defaults_are_flagged(tmp_path: Path, cap: str) -> None:
    data = _data(tmp_path, cap_add=[cap, "IPC_LOCK", "NET_BIND_SERVICE"])
    data["launch"] = {}
    assert _fields(data) == ["container.cap_add[0]"]


@pytest.mark.parametrize(
    "host",
    ["/root/.ssh", "/etc/cron.d", "/usr/local/bin", "/var/lib", "/dev/mem", "/sys/fs/cgroup",
     "/proc/sysrq-trigger", "/home/alice/.ssh", "/run/docker.sock"],
)  # fmt: skip
def test_system_trees_are_flagged_below_their_root(tmp_path: Path, host: str) -> None:
    data = _data(tmp_path, volumes=[{"host": host, "container": "/x"}])
    data["launch"] = {}
    assert _fields(data) == ["container.volumes[0].host"]


def test_a_symlink_to_a_system_dir_is_flagged(tmp_path: Path) -> None:
    (tmp_path / "to-root").symlink_to("/")
    (tmp_path / "to-etc").symlink_to("/etc")
    (tmp_path / "data").mkdir()
    volumes = [{"host": str(tmp_path / n), "container": f"/{n}"} for n in ("to-root", "to-etc")]
    volumes.append({"host": str(tmp_path / "data"), "container": "/data"})
    data = _data(tmp_path, volumes=volumes)
    data["launch"] = {}
    risks = container_risks(Preset.model_validate(data))
    assert [r.field for r in risks] == ["container.volumes[0].host", "container.volumes[1].host"]
    assert "the host's / " in risks[0].message and "/etc" in risks[1].message


@pytest.mark.parametrize(
    "option",
    ["--output=/etc/cron.d/x", "--export=ALL,LD_PRELOAD=/tmp/x.so", "--uid=0", "--chdir=/",
     "--out=/etc/x", "--error=/root/e", "--get-user-env", "--gid=0"],
)  # fmt: skip
def test_sbatch_options_that_change_identity_or_output_are_refused(
    tmp_path: Path, option: str
) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"].update(scheduler="slurm", nnodes=2, slurm={"extra_options": [option]})
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "plan", str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "launch.slurm.extra_options" in done.stderr and "may not set sbatch" in done.stderr
    data["launch"]["slurm"] = {"extra_options": ["--constraint=a100", "--exclusive"]}
    path.write_text(yaml.safe_dump(data))
    Preset.model_validate(data)  # ordinary options still pass


def test_pythonpath_sitecustomize_does_not_run_without_yes(tmp_path: Path) -> None:
    """The reported case: `launch P --detach` ran a sitecustomize.py from launch.env.PYTHONPATH."""
    evil = tmp_path / "evil"
    evil.mkdir()
    marker = tmp_path / "RAN"
    (evil / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"]["env"] = {"PYTHONPATH": str(evil)}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "launch", str(path), "--detach"],
        cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "launch.env.PYTHONPATH" in done.stderr and "pass --yes" in done.stderr
    assert not marker.exists()
    runs = Path(os.environ["TRAINWIZ_HOME"]) / "runs"
    assert not runs.exists() or not any(runs.iterdir())
